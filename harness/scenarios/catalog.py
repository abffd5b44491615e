"""The scenarios: what each one breaks, when, and the recovery bound each profile is held to.

A scenario's fault schedule is plain data drawn from the seed alone (same ``--seed``, same schedule); a
step's target may be a rule resolved when the step runs (``busiest``: the worker holding the most
streams; ``worker-N``: that worker; ``all``).  Bounds are in ms at the run's time scale:

* ``blog`` is held to the published worst case, lease + reconcile (≈ 80 s at scale 1), for every fault;
  for a graceful release the stream waits for the next reconcile.
* ``hardened``: crash, pause and AWS partition within lease + 10 % (a takeover waits for the worker item
  to expire plus the clock tolerance) plus a fixed work allowance (``WORK_ALLOWANCE_MS``, unscaled);
  graceful handoff within 1 s (a latency, not a timer, so it is not scaled); an upstream drop within
  the reconnect backoff cap (plus the partition's own length).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fleet.config import FleetConfig

HANDOFF_BOUND_MS = 1_000.0
# The part of a takeover that is work, not waiting: the detection jitter, the claim round trip, the
# upstream connect and replay, the first batch write.  Measured here at about 0.35 s whatever the time scale,
# so it is not scaled: at scale 0.1 it is 17 % of a 2 s lease, at scale 1 under 2 %.
WORK_ALLOWANCE_MS = 500.0


@dataclass(frozen=True)
class Step:
    at_s: float           # seconds after the fault phase begins (0 = right away)
    kind: str
    target: str           # worker id, "busiest", "random-other", or "all"
    duration_s: float = 0.0   # 0: an instant fault (stopped as soon as it is applied)
    params: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"at_s": round(self.at_s, 4), "kind": self.kind, "target": self.target,
                "duration_s": round(self.duration_s, 4), "params": self.params}


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    schedule: Callable[[random.Random, FleetConfig, int], list[Step]]
    bound: Callable[[FleetConfig], float | None]


def _ms(config: FleetConfig, ms: int) -> float:
    return config.scaled_ms(ms)


def published_bound(config: FleetConfig) -> float:
    return _ms(config, config.lease_ms + config.reconcile_ms)


def takeover_bound(config: FleetConfig) -> float:
    if config.profile != "hardened":
        return published_bound(config)
    return 1.1 * _ms(config, config.lease_ms) + WORK_ALLOWANCE_MS


def _jitter(rng: random.Random, config: FleetConfig) -> float:
    """A start offset within one heartbeat, so faults fall anywhere in the renewal cycle."""
    return rng.uniform(0.0, config.heartbeat_s)


def _crash(rng: random.Random, config: FleetConfig, workers: int) -> list[Step]:
    return [Step(_jitter(rng, config), "kill", "busiest")]


def _graceful(rng: random.Random, config: FleetConfig, workers: int) -> list[Step]:
    steps = []
    at = _jitter(rng, config)
    gap = max(2.0 * config.lease_s, published_bound(config) / 1000.0 if config.profile != "hardened" else 0.0)
    for i in range(1, workers + 1):
        steps.append(Step(at, "term", f"worker-{i}"))
        steps.append(Step(at + gap / 2, "restart", f"worker-{i}"))
        at += gap
    return steps


def _pause(rng: random.Random, config: FleetConfig, workers: int) -> list[Step]:
    target = f"worker-{rng.randint(1, workers)}"
    return [Step(_jitter(rng, config), "pause", target, duration_s=2.0 * config.lease_s)]


def _partition_aws(rng: random.Random, config: FleetConfig, workers: int) -> list[Step]:
    target = f"worker-{rng.randint(1, workers)}"
    return [Step(_jitter(rng, config), "partition_aws", target, duration_s=2.0 * config.lease_s)]


def _partition_upstream(rng: random.Random, config: FleetConfig, workers: int) -> list[Step]:
    target = f"worker-{rng.randint(1, workers)}"
    return [Step(_jitter(rng, config), "partition_upstream", target, duration_s=config.lease_s)]


def _mid_op_drop(rng: random.Random, config: FleetConfig, workers: int) -> list[Step]:
    reset_target, timeout_target = rng.sample(range(1, workers + 1), 2) if workers > 1 else (1, 1)
    start = _jitter(rng, config)
    blip = 0.3 * config.lease_s
    return [
        Step(start, "reset_upstream", "all"),
        Step(start + config.lease_s, "aws_reset", f"worker-{reset_target}", duration_s=blip),
        Step(start + 2.5 * config.lease_s, "aws_timeout", f"worker-{timeout_target}", duration_s=blip),
    ]


def _clock_skew(rng: random.Random, config: FleetConfig, workers: int) -> list[Step]:
    target = f"worker-{rng.randint(1, workers)}"
    offset = _ms(config, config.clock_tolerance_ms) * rng.choice((-1, 1))
    return [Step(_jitter(rng, config), "clock_skew", target, duration_s=3.0 * config.lease_s,
                 params={"offset_ms": int(offset)})]


def _drop_bound(config: FleetConfig) -> float:
    reconnect = _ms(config, config.reconnect_max_ms if config.profile == "hardened" else config.reconnect_base_ms)
    return reconnect + 0.1 * _ms(config, config.lease_ms)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("crash", "SIGKILL the worker holding the most streams; it stays down.", _crash, takeover_bound),
    Scenario("graceful", "Rolling deploy: SIGTERM each worker in turn, then start it again.", _graceful,
             lambda c: HANDOFF_BOUND_MS if c.profile == "hardened" else published_bound(c)),
    Scenario("pause", "SIGSTOP one worker for twice the lease, then SIGCONT (the zombie owner).", _pause,
             takeover_bound),
    Scenario("partition_aws", "Cut one worker's AWS traffic for twice the lease; its upstream stays up.",
             _partition_aws, takeover_bound),
    Scenario("partition_upstream", "Cut one worker's upstream traffic for one lease.", _partition_upstream,
             lambda c: _ms(c, c.lease_ms) + _drop_bound(c) if c.profile == "hardened" else published_bound(c)),
    Scenario("mid_op_drop", "Reset every upstream session mid-stream; reset, then black-hole, one worker's "
             "DynamoDB requests in flight.", _mid_op_drop,
             lambda c: _drop_bound(c) if c.profile == "hardened" else published_bound(c)),
    Scenario("clock_skew", "One worker's lease clock off by the configured tolerance.", _clock_skew,
             lambda c: None),
)}


def schedule(name: str, seed: int, config: FleetConfig, workers: int) -> list[Step]:
    """The fault schedule of one run: a function of the scenario, seed, settings and worker count."""
    return SCENARIOS[name].schedule(random.Random(f"{name}:{seed}"), config, workers)
