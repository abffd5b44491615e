"""The simulated upstream WebSocket source (DESIGN §8): streams of sequenced frames, a replay buffer, a record
of every subscription session, a small HTTP control API, and the limits a real gateway has (new-connection
quota, maximum connection age, idle timeout, mass disconnects).  Run it with ``python -m harness.upstream_sim``
or in-process through ``UpstreamSimulator``."""

from harness.upstream_sim.server import UpstreamSimulator

__all__ = ["UpstreamSimulator"]
