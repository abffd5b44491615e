"""The simulated upstream WebSocket source (DESIGN §8): streams of sequenced frames, a replay buffer, a record
of every subscription session, and a small HTTP control API.  Run it with ``python -m harness.upstream_sim``
or in-process through ``UpstreamSimulator``."""

from harness.upstream_sim.server import UpstreamSimulator

__all__ = ["UpstreamSimulator"]
