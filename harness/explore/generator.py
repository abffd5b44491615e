"""Random fault schedules and client workloads drawn from one seed, written as scenario files.

``generate(seed, ...)`` draws, from ``random.Random(f"explore:{seed}")`` alone (same seed, same schedule,
whatever the profile, so ``blog`` and ``hardened`` face the same schedule), a fault phase of about
``phase_leases`` leases composing entries of ``FAULT_MENU`` and ``WORKLOAD_MENU``.  Both menus are data
tables: an entry names a fault kind (or operations), its weight, how long it lasts, and how each parameter
is drawn.  Entries whose kind is not in the fault plane's ``REGISTRY`` are left out, so registering a new
kind (e.g. ``aws_throttle`` from ``harness/faults/aws_api.py``) makes its menu entry live.

Rules that keep a generated run meaningful:

* one worker, the survivor, gets no process, partition or clock fault, so someone can always take over;
* a worker never has two faults on the same resource at once (its process, its AWS link, its upstream
  link, its clock): a ``restart`` follows a ``kill`` / ``term`` of the same worker, never overlaps it;
* clock skew beyond the configured tolerance is drawn with probability ``outside_p`` only (the runner then
  records that the run left the fault model);
* the bound for every fault kind is the largest catalog bound for the profile plus the length of the
  fault phase: generated runs judge safety (I1, I2, I5, I6) first, and recovery only once faults are over;
* the load (streams x messages per second) is drawn from ``LOAD_MENU`` unless given, from a stream of its
  own (``explore-load:<seed>``), so the faults of a seed do not depend on it: dense streams keep a write in
  flight when a fault lands (a frozen writer's zombie write needs one), many sparse ones give takeovers
  many streams to race on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from fleet.config import FleetConfig
from harness.faults.plane import REGISTRY
from harness.scenarios.scenario_file import ScenarioSpec


@dataclass(frozen=True)
class Of:
    """``uniform(low, high)`` times the configured duration ``name`` (ms at the run's scale), as int ms;
    ``signed``: a random sign."""

    name: str
    low: float
    high: float
    signed: bool = False


@dataclass(frozen=True)
class Uniform:
    low: float
    high: float


@dataclass(frozen=True)
class Choice:
    options: tuple[Any, ...]


@dataclass(frozen=True)
class MenuEntry:
    label: str
    kind: str
    weight: float
    resource: str = ""                      # one fault per worker and resource at a time ("" = no limit)
    leases: tuple[float, float] = (0.0, 0.0)  # duration range in leases; (0, 0): an instant fault
    params: dict[str, Any] = field(default_factory=dict)
    target: str = "worker"                  # "worker" (not the survivor if ``resource`` is set) or "all"
    restart_p: float = 0.0                  # chance a restart of the same worker follows


SURVIVOR_SPARED = ("process", "aws", "upstream", "clock")
TOXIC_ATTRIBUTES: dict[str, dict[str, Any]] = {
    "latency": {"latency": Of("lease", 0.05, 1.2), "jitter": Of("lease", 0.0, 0.05)},
    "timeout": {"timeout": Choice((0, Of("lease", 0.1, 1.0)))},
    "reset_peer": {"timeout": Of("lease", 0.0, 0.2)},
    "bandwidth": {"rate": Choice((1, 5, 50))},
    "slow_close": {"delay": Of("lease", 0.1, 1.0)},
    "slicer": {"average_size": Choice((16, 64, 256)), "size_variation": Choice((0, 8)),
               "delay": Choice((100, 1_000, 10_000))},
    "limit_data": {"bytes": Choice((200, 1_000, 5_000))},
}
TOXIC_SERVICES = {"dynamodb": 3.0, "services": 1.0, "upstream": 1.5}
# (service, toxic) pairs left out: limit_data cuts a DynamoDB request mid-body, and dynalite (the embedded
# backend) dies on an aborted request (``req.on('error', throw)`` in dynalite/index.js), ending the run.
BACKEND_UNSAFE = {("dynamodb", "limit_data")}

FAULT_MENU: list[MenuEntry] = [
    MenuEntry("kill", "kill", 2.0, "process", restart_p=0.6),
    MenuEntry("term", "term", 1.5, "process", restart_p=0.8),
    MenuEntry("pause-short", "pause", 1.5, "process", (0.002, 0.3)),   # lands mid-request
    MenuEntry("pause-long", "pause", 2.0, "process", (0.5, 3.0)),
    MenuEntry("partition_aws", "partition_aws", 1.5, "aws", (0.3, 3.0)),
    MenuEntry("partition_upstream", "partition_upstream", 1.0, "upstream", (0.3, 2.0)),
    MenuEntry("reset_upstream", "reset_upstream", 0.5, target="all"),
    MenuEntry("clock_skew", "clock_skew", 1.0, "clock", (1.0, 4.0),
              {"offset_ms": Of("clock_tolerance", 0.2, 1.0, signed=True)}),
    *(MenuEntry(f"toxic-{toxic}-{service}", "toxic", weight / len(TOXIC_ATTRIBUTES), f"toxic-{service}",
                (0.3, 3.0), {"service": service, "type": toxic, "stream": Choice(("upstream", "downstream")),
                             "toxicity": Choice((1.0, Uniform(0.1, 0.9))), "attributes": attributes})
      for service, weight in TOXIC_SERVICES.items() for toxic, attributes in TOXIC_ATTRIBUTES.items()
      if (service, toxic) not in BACKEND_UNSAFE),
    # AWS API errors (harness/faults/aws_api.py); live once registered in the fault plane, with their defaults
    *(MenuEntry(kind, kind, 0.75, f"api-{kind}", (0.3, 3.0))
      for kind in ("aws_throttle", "aws_5xx", "aws_slow", "sqs_throttle", "sqs_duplicate", "sqs_late")),
]
# Beyond the tolerance: the one fault outside the model, drawn with probability ``outside_p`` per clock skew.
OUTSIDE_SKEW = Of("clock_tolerance", 2.0, 20.0, signed=True)


@dataclass(frozen=True)
class WorkloadEntry:
    label: str
    weight: float
    ops: tuple[tuple[float, str, str], ...]   # (lease offset after the first, op, target)
    after_fault: bool = False                 # starts just after a process or partition fault, at its worker


WORKLOAD_MENU: list[WorkloadEntry] = [
    WorkloadEntry("stop", 1.0, ((0.0, "stop", "random"),)),
    WorkloadEntry("stop-start-again", 1.5, ((0.0, "stop", "random"), (0.1, "start", "previous"))),
    WorkloadEntry("stop-start-stop", 1.0, ((0.0, "stop", "random"), (0.1, "start", "previous"),
                                           (0.2, "stop", "previous"))),
    WorkloadEntry("duplicate-start", 1.0, ((0.0, "start", "random"),)),
    WorkloadEntry("start-stopped", 0.5, ((0.0, "start", "stopped"),)),
    WorkloadEntry("stop-during-takeover", 2.0, ((0.0, "stop", "owned-by:{worker}"),), after_fault=True),
    WorkloadEntry("stop-start-during-takeover", 1.5, ((0.0, "stop", "owned-by:{worker}"),
                                                      (0.1, "start", "previous")), after_fault=True),
]


def _draw(value: Any, rng: random.Random, durations: dict[str, float]) -> Any:
    if isinstance(value, Of):
        drawn = rng.uniform(value.low, value.high) * durations[f"{value.name}_ms"]
        return round(drawn * (rng.choice((-1, 1)) if value.signed else 1))
    if isinstance(value, Uniform):
        return round(rng.uniform(value.low, value.high), 3)
    if isinstance(value, Choice):
        return _draw(rng.choice(value.options), rng, durations)
    if isinstance(value, dict):
        return {k: _draw(v, rng, durations) for k, v in value.items()}
    return value


class _Timeline:
    """Which (worker, resource) is busy when, so faults on one resource never overlap."""

    def __init__(self) -> None:
        self.busy: dict[tuple[str, str], list[tuple[float, float]]] = {}

    def free(self, worker: str, resource: str, start: float, end: float) -> bool:
        return all(end <= a or start >= b for a, b in self.busy.get((worker, resource), []))

    def take(self, worker: str, resource: str, start: float, end: float) -> None:
        self.busy.setdefault((worker, resource), []).append((start, end))


# (streams, messages per second per stream) a run is drawn from when neither is given: 100 messages a second
# in all.  A survivor left holding every stream (two workers down) must store that behind the fence (one
# request per message on dynalite) plus its takeover's backlog on 2 cores, within the run's settle phase:
# at 200 a second it could not (explore benchmark seed 3008, a 2.3 s lag at the final scan).
LOAD_MENU = ((20, 5.0), (10, 10.0), (5, 20.0))


def load_for(seed: int, connections: int | None, rate: float | None) -> tuple[int, float]:
    """The run's (streams, rate): drawn from ``LOAD_MENU`` when neither is given, else 20 streams and 5
    messages per second for the one not given."""
    if connections is None and rate is None:
        return random.Random(f"explore-load:{seed}").choice(LOAD_MENU)
    return (connections if connections is not None else 20), (rate if rate is not None else 5.0)


def generate(seed: int, *, profile: str = "hardened", workers: int = 3, connections: int | None = None,
             rate: float | None = None, timescale: float = 0.1, phase_leases: float = 6.0, max_faults: int = 4,
             max_ops: int = 3, outside_p: float = 0.1) -> ScenarioSpec:
    """One scenario drawn from ``seed``; ``profile`` is written in the file but does not change the draw."""
    rng = random.Random(f"explore:{seed}")
    connections, rate = load_for(seed, connections, rate)
    config = FleetConfig(profile="hardened", timescale=timescale, worker_id="generator")
    durations = config.durations()
    lease_s, phase_s = config.lease_s, phase_leases * config.lease_s
    names = [f"worker-{i}" for i in range(1, workers + 1)]
    survivor = rng.choice(names)
    menu = [e for e in FAULT_MENU if e.kind in REGISTRY]
    timeline = _Timeline()
    faults: list[dict[str, Any]] = []
    disrupted: list[tuple[float, str]] = []   # (time, worker) of each fault drawn ("" for every worker)
    wanted = rng.randint(1, max_faults)
    for _ in range(10 * max_faults):  # a draw that finds no free worker is drawn again
        if len(disrupted) + sum(1 for s in faults if s["target"] == "all") >= wanted:
            break
        entry = rng.choices(menu, weights=[e.weight for e in menu])[0]
        at = round(rng.uniform(0.0, phase_s * 0.8), 3)
        duration = round(min(rng.uniform(*entry.leases) * lease_s, phase_s - at), 3) if entry.leases[1] else 0.0
        params = _draw(entry.params, rng, durations)
        if entry.kind == "clock_skew" and rng.random() < outside_p:
            params["offset_ms"] = _draw(OUTSIDE_SKEW, rng, durations)
        if entry.target == "all":
            faults.append({"at_s": at, "kind": entry.kind, "target": "all"})
            disrupted.append((at, ""))
            continue
        restart_at = round(at + rng.uniform(0.5, 3.0) * lease_s, 3) if rng.random() < entry.restart_p else None
        end = restart_at if restart_at is not None else (float("inf") if entry.restart_p else at + duration)
        spared = entry.resource in SURVIVOR_SPARED
        candidates = [w for w in names if not (spared and w == survivor)
                      and timeline.free(w, entry.resource, at, end)]
        if not candidates:
            continue
        worker = rng.choice(candidates)
        if entry.resource:
            timeline.take(worker, entry.resource, at, end)
        step: dict[str, Any] = {"at_s": at, "kind": entry.kind, "target": worker}
        if duration:
            step["duration_s"] = duration
        if params:
            step["params"] = params
        faults.append(step)
        if restart_at is not None:
            faults.append({"at_s": restart_at, "kind": "restart", "target": worker})
        disrupted.append((at, worker))
    workload = _workload(rng, max_ops, phase_s, lease_s, disrupted)
    faults.sort(key=lambda s: s["at_s"])
    phase_end_ms = 1000.0 * max((s["at_s"] + s.get("duration_s", 0.0) for s in faults), default=0.0)
    return ScenarioSpec(
        name=f"explore-{seed}", description=f"generated from seed {seed} ({len(faults)} fault steps, "
                                            f"{len(workload)} operations); survivor {survivor}",
        profile=profile, workers=workers, connections=connections, rate=rate, timescale=timescale, seed=seed,
        workload=workload, faults=faults,
        bounds={"any": {"hardened": f"lease + 0.1*lease + reconnect_max + 1000 + {phase_end_ms:.0f}",
                        "default": f"lease + reconcile + {phase_end_ms:.0f}"}},
    )


def _workload(rng: random.Random, max_ops: int, phase_s: float, lease_s: float,
              disrupted: list[tuple[float, str]]) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = []
    takeovers = [(at, worker) for at, worker in disrupted if worker]
    menu = [e for e in WORKLOAD_MENU if takeovers or not e.after_fault]
    for _ in range(rng.randint(0, max_ops)):
        entry = rng.choices(menu, weights=[e.weight for e in menu])[0]
        if entry.after_fault:
            fault_at, worker = rng.choice(takeovers)
            start = fault_at + rng.uniform(0.3, 1.2) * lease_s
        else:
            start, worker = rng.uniform(0.0, phase_s), ""
        for offset, op, target in entry.ops:
            ops.append({"at_s": round(start + offset * lease_s, 3), "op": op,
                        "target": target.format(worker=worker)})
    return sorted(ops, key=lambda o: o["at_s"])
