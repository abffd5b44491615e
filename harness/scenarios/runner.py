"""Runs one scenario end to end: topology up, streams started, fault steps and workload operations applied on
their own schedules, recovery awaited, the store's ground truth recorded, checkers run, ``verdict.json``
written.

Phases, each announced on the progress callback: ``up`` (backend, simulator, router, workers; the backend
borrowed, renewed, from ``ScenarioRun.backends`` when given, so a batch of runs starts it once), ``start``
(START every connection through the router; wait until the simulator sees a session for each), ``steady``
(one lease of normal running), ``faults`` (every fault step and workload operation runs in its own thread
at its ``at_s``, so faults overlap and a fault with a duration never delays the next one; the phase ends
when the last of them has), ``recover`` (until every STARTED stream has a live session of a running worker,
or the bound has passed twice), ``settle`` (one more lease, then until every STARTED stream has stored all
it had emitted when settling began and no drain of a STOPPED stream is in progress, at most four leases more:
the last backlog persisted), ``run.stop``,
then ``final`` (the simulator's heads, every stored message with its writer, and every connection item, written to the
history as ``final.emitted`` / ``final.persisted`` / ``final.connection``).  Faults are healed and every
process stopped in ``finally``, whatever happened.

The phases (``Phases``) use only a ``Topology`` (``harness.scenarios.topology``): ``run_scenario`` gives
them a local ``Cluster``; the AWS backend (``harness.aws.topology``) gives them a deployed fleet.

``run.start`` records the expanded schedule and workload, the bounds in ms at the run's scale and at scale 1,
and ``fault_model``: ``"within"``; ``"outside: clock skew X ms > tolerance Y ms"`` when a step skews a
clock past the configured tolerance (the design promises nothing then); or ``"outside for I1: ECS reports a
running task stopped (...)"`` when a step makes ECS say so of a live worker (``ECS_REPORTS_A_LIVE_TASK_STOPPED``):
the fleet trusts ECS and buries that incarnation, which consumes until it learns of it, so I1 is not promised;
its writes are still fenced, so every other invariant is.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from fleet.config import FleetConfig
from harness.backends import BackendError, KeptBackends
from harness.checkers.verdict import OUTSIDE_FOR_I1, verdict_line, write_verdict
from harness.cluster import Cluster, ClusterError, ClusterSpec
from harness.faults.plane import FaultError
from harness.ground_truth import record_final
from harness.processes import start_thread
from harness.scenarios.scenario_file import Op, ScenarioSpec, Step
from harness.scenarios.topology import LocalTopology, Topology

Progress = Callable[[str], None]
Say = Callable[[str], None]


class ScenarioError(Exception):
    """The scenario could not be run (as opposed to: it ran and the fleet misbehaved)."""


@dataclass
class ScenarioRun:
    """One run of a scenario file; ``None`` settings take the file's value."""

    scenario: ScenarioSpec
    profile: str | None = None
    timescale: float | None = None
    workers: int | None = None
    connections: int | None = None
    seed: int | None = None
    rate: float | None = None
    run_dir: Path = Path("runs/latest")
    dynamodb: str | None = None  # the embedded DynamoDB server; None: the file's, else dynalite
    localstack_url: str = ""
    fleet_root: Path | None = None  # run the worker and router processes from this checkout
    overrides: dict[str, Any] = field(default_factory=dict)  # FleetConfig settings (``fleet.config.tuning``)
    # Borrow the embedded backend from these, renewed, instead of starting one for this run alone
    backends: KeptBackends | None = None

    def setting(self, name: str) -> Any:
        value = getattr(self, name)
        return getattr(self.scenario, name) if value is None else value

    @property
    def name(self) -> str:
        return self.scenario.name


def _quiet(_: str) -> None:
    pass


# Faults that make ECS report a live worker's task stopped (``harness.faults.plane``).
ECS_REPORTS_A_LIVE_TASK_STOPPED = frozenset({"zombie", "stopped_while_running"})


def fault_model(steps: list[Step], config: FleetConfig) -> str:
    """``within``, or which step leaves the fault model: clock skew beyond the configured tolerance (a worker's
    largest skew plus all its clock steps, which stay and add up, at worst), else ECS reporting a live task
    stopped (outside for I1 only)."""
    tolerance = config.scaled_ms(config.clock_tolerance_ms)
    off: dict[str, float] = {}
    for s in steps:
        if s.kind == "clock_step":
            off[s.target] = off.get(s.target, 0.0) + abs(float(s.params.get("step_ms", 0)))
    worst = max((abs(float(s.params.get("offset_ms", 0))) + off.get(s.target, 0.0) for s in steps
                 if s.kind == "clock_skew"), default=0.0)
    worst = max(worst, *off.values(), 0.0)
    if worst > tolerance:
        return f"outside: clock skew {worst:g} ms > tolerance {tolerance:g} ms"
    lying = sorted({f"{s.kind} of {s.target}" for s in steps if s.kind in ECS_REPORTS_A_LIVE_TASK_STOPPED})
    if lying:
        return f"{OUTSIDE_FOR_I1} ECS reports a running task stopped ({', '.join(lying)})"
    return "within"


def run_scenario(run: ScenarioRun, progress: Progress = _quiet) -> dict[str, Any]:
    """Run ``run`` on a local topology and return its verdict (also written to ``RUN_DIR/verdict.json``)."""
    workers, profile = int(run.setting("workers")), str(run.setting("profile"))
    history = run.run_dir / "history"
    if history.is_dir() and any(history.iterdir()):  # runs never mix: the checkers would read both
        raise ScenarioError(f"{run.run_dir} holds another run's history; give each run a folder of its own")
    if workers < 2:
        raise ScenarioError("a scenario needs at least 2 workers (someone must take over)")
    seed = int(run.setting("seed"))
    spec = ClusterSpec(workers=workers, profile=profile, timescale=float(run.setting("timescale")),
                       run_dir=run.run_dir, dynamodb=run.dynamodb or run.scenario.dynamodb or "dynalite",
                       rate=float(run.setting("rate")), seed=seed,
                       localstack_url=run.localstack_url, fleet_root=run.fleet_root, overrides=run.overrides,
                       upstream=run.scenario.upstream, death_notices=run.scenario.death_notices)
    phases = Phases(run.scenario, spec.fleet_config(), workers, seed, int(run.setting("connections")), progress)
    phases.say(f"starting {workers} workers (time scale {spec.timescale}, lease {phases.config.lease_s:.2f} s)")
    try:
        backend = (run.backends.fresh(spec.dynamodb, spec.fleet_config())
                   if run.backends is not None and not run.localstack_url else None)
    except BackendError as exc:
        raise ClusterError(str(exc)) from exc
    with Cluster(spec, backend=backend) as cluster:
        phases.run(LocalTopology(cluster), settings=run.overrides or None, dynamodb=spec.dynamodb)
    return phases.verdict(run.run_dir)


@dataclass
class Phases:
    """A scenario's plan at one fleet configuration, and its phases over any ``Topology``."""

    scenario: ScenarioSpec
    config: FleetConfig
    workers: int
    seed: int
    connections: int
    progress: Progress = _quiet
    prefix: str = ""  # of the connection ids (a deployment's run names its own: ``<prefix>c000``, ...)
    began: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.plan = self.scenario.expand(self.config.profile, self.seed, self.config, self.workers)
        self.connection_ids = [f"{self.prefix}c{i:03d}" for i in range(self.connections)]

    def say(self, message: str) -> None:
        self.progress(f"[{time.monotonic() - self.began:6.1f}s] {self.scenario.name}/{self.config.profile}: "
                      f"{message}")

    def run(self, topology: Topology, **run_start: Any) -> None:
        """Every phase from ``run.start`` to the final scan; faults still active are healed at the end.
        ``run_start``: more fields of ``run.start`` (e.g. the backend's)."""
        config, plan, say = self.config, self.plan, self.say
        workload = Workload(topology, random.Random(f"{self.scenario.name}:{self.seed}:workload"),
                            self.connection_ids)
        try:
            topology.history.emit(
                "run.start", scenario=self.scenario.name, profile=config.profile, timescale=config.timescale,
                config=config.durations(), connections=len(workload.desired), workers=self.workers,
                bound_ms=plan.bound_ms, bound_scale1_ms=plan.bound_scale1_ms, seed=self.seed,
                schedule=[s.to_json() for s in plan.steps], workload=[o.to_json() for o in plan.ops],
                fault_model=fault_model(plan.steps, config), scenario_file=self.scenario.path,
                upstream=self.scenario.upstream or None, death_notices=self.scenario.death_notices or None,
                # hardened: the owner reads its STOP mailbox with the next renewal (a heartbeat), whose answer
                # may take the request timeout, and a failed renewal is retried within another heartbeat
                stop_bound_ms=config.scaled_ms(2 * config.heartbeat_ms + config.aws_timeout_ms
                                               if config.profile == "hardened"
                                               else config.desired_check_ms + config.heartbeat_ms),
                **run_start,
            )
            say(f"starting {len(workload.desired)} connections through the router")
            for connection_id in list(workload.desired):
                topology.start_connection(connection_id)
            _await_owned(topology, workload.started(), timeout_s=config.reconcile_s + 4 * config.lease_s + 10)
            say("every stream has an owner; steady running")
            time.sleep(config.lease_s)
            _run_schedule(topology, workload, plan.steps, plan.ops, say)
            say("faults done; waiting for recovery")
            recover_for = 2 * max(plan.bound_ms.values(), default=0.0) / 1000.0 + 2 * config.lease_s
            owned = _await_owned(topology, workload.started(), timeout_s=recover_for, raise_on_timeout=False)
            say("recovered" if owned else f"not every stream recovered within {recover_for:.1f} s")
            settled_t, behind, draining = settle_streams(topology, workload.started(), list(workload.desired),
                                                  config.lease_s, timeout_s=4 * config.lease_s)
            if behind:
                say(f"{len(behind)} streams had not stored their backlog after {5 * config.lease_s:.1f} s "
                    f"(e.g. {', '.join(behind[:3])})")
            if draining:
                say(f"{len(draining)} drains were still in progress after {5 * config.lease_s:.1f} s "
                    f"(e.g. {', '.join(draining[:3])})")
            # the observed run ends before the final scan, which may take seconds: the checkers' horizons
            # (what must have been persisted by the end) are measured from ``run.stop``
            topology.history.emit("run.stop", settled_t=settled_t)
            record_final_scan(topology, list(workload.desired), self.prefix)
        finally:
            topology.nemesis.heal_all()

    def verdict(self, run_dir: Path) -> dict[str, Any]:
        """Check the run folder's history and write ``verdict.json``."""
        self.say("checking the history")
        verdict = write_verdict(run_dir)
        self.say(verdict_line(verdict))
        return verdict


def _await_owned(topology: Topology, ids: list[str], timeout_s: float, raise_on_timeout: bool = True) -> bool:
    """Wait until every stream has an open session held by a running, unpaused worker."""
    deadline = time.monotonic() + timeout_s
    while True:
        live = topology.live_workers()
        streams = topology.streams()
        missing = [i for i in ids if not any(
            s["closed"] is None and s["worker"] in live for s in streams.get(i, {}).get("sessions", []))]
        if not missing:
            return True
        if time.monotonic() > deadline:
            if raise_on_timeout:
                raise ScenarioError(f"{len(missing)} streams never got an owner within {timeout_s:.0f} s "
                                    f"(e.g. {', '.join(missing[:5])}); see {topology.logs}")
            return False
        time.sleep(0.05)


def settle_streams(topology: Topology, ids: list[str], every: list[str], minimum_s: float,
            timeout_s: float) -> tuple[float, list[str], list[str]]:
    """Wait ``minimum_s``, then until each stream of ``ids`` has stored everything it had emitted when
    settling began (the last backlog persisted) and no stream of ``every`` is held by a drain (a STOPPED
    stream's backlog, which the final scan must not read half stored), at most ``timeout_s`` more.  Stored
    is what the topology knows answered (``Topology.stored_through``; locally the workers' ``msg.persist`` ok
    up to that seq, so the recovery checker, which reads the same events, sees every stream caught up before
    ``run.stop``).  When settling began (wall clock, ms: the sequences checker's horizon), the streams still
    behind, and those still draining."""
    began_t = time.time() * 1000.0
    heads = {i: s.get("head_seq") or 0 for i, s in topology.streams().items() if i in ids}
    time.sleep(minimum_s)
    deadline = time.monotonic() + timeout_s
    while True:
        stored = topology.stored_through(list(heads))
        behind = sorted(i for i in heads if stored.get(i, 0) < heads[i])
        draining = topology.draining(every)
        if not (behind or draining) or time.monotonic() > deadline:
            return began_t, behind, draining
        time.sleep(0.05)  # polling what the workers report: it has no other signal


def _busiest(topology: Topology) -> str:
    counts = {w: 0 for w in topology.live_workers()}
    if not counts:
        raise FaultError("busiest: no worker is running")
    for stream in topology.streams().values():
        for session in stream["sessions"]:
            if session["closed"] is None and session["worker"] in counts:
                counts[session["worker"]] += 1
    return max(sorted(counts), key=lambda w: counts[w])


def _resolve(topology: Topology, target: str) -> str:
    return _busiest(topology) if target == "busiest" else target


class Workload:
    """The client's operations: START and STOP through the router, targets resolved when they run."""

    def __init__(self, topology: Topology, rng: random.Random, initial: list[str]) -> None:
        self.topology = topology
        self.rng = rng
        self.desired: dict[str, str] = dict.fromkeys(initial, "STARTED")
        self.previous: str | None = None
        self._lock = threading.Lock()

    def started(self) -> list[str]:
        with self._lock:
            return [c for c, state in self.desired.items() if state == "STARTED"]

    def _owned_by(self, rule: str) -> list[str]:
        worker = (self.rng.choice(sorted(self.topology.live_workers())) if rule == "random"
                  else _resolve(self.topology, rule))
        dynamodb, tables = self.topology.dynamodb()
        scan = dynamodb.get_paginator("scan").paginate(TableName=tables["connections"], ConsistentRead=True)
        return sorted(item["pk"]["S"].removeprefix("CONN#") for page in scan for item in page.get("Items", [])
                      if item.get("lease_owner", {}).get("S") == worker
                      and item.get("desired_state", {}).get("S") == "STARTED")

    def resolve(self, target: str) -> str | None:
        """The connection id ``target`` names now, or None when it names none."""
        with self._lock:
            if target == "previous":
                return self.previous
            if target in ("random", "stopped"):
                state = "STARTED" if target == "random" else "STOPPED"
                candidates = sorted(c for c, s in self.desired.items() if s == state)
                return self.rng.choice(candidates) if candidates else None
        if target.startswith("owned-by:"):
            candidates = self._owned_by(target.removeprefix("owned-by:"))
            with self._lock:
                return self.rng.choice(candidates) if candidates else None
        return target

    def apply(self, op: Op, say: Say) -> None:
        connection_id = self.resolve(op.target)
        if connection_id is None:
            self.topology.history.emit("workload.skip", op=op.op, target=op.target, reason="no such connection now")
            say(f"{op.op.upper()} {op.target}: no such connection now; skipped")
            return
        with self._lock:
            self.previous = connection_id
            self.desired[connection_id] = "STARTED" if op.op == "start" else "STOPPED"
        say(f"{op.op.upper()} {connection_id}" + (f" ({op.target})" if op.target != connection_id else ""))
        try:
            if op.op == "start":
                self.topology.start_connection(connection_id)
            else:
                self.topology.stop_connection(connection_id)
        except ClusterError as exc:  # the router's answer is in its own history; the run goes on
            self.topology.history.emit("workload.error", op=op.op, pk=f"CONN#{connection_id}", error=str(exc))


def _run_schedule(topology: Topology, workload: Workload, steps: list[Step], ops: list[Op], say: Say) -> None:
    """Every step and operation in its own thread at its time; raises ScenarioError if a step failed."""
    begin = time.monotonic()
    abort = threading.Event()
    errors: list[str] = []

    def wait_until(at_s: float) -> bool:
        return not abort.wait(max(0.0, begin + at_s - time.monotonic()))

    def fault(step: Step) -> None:
        try:  # the wait too: a time it cannot wait for is a step that could not run
            if not wait_until(step.at_s):
                return
            target = _resolve(topology, step.target)
            say(f"fault {step.kind} -> {target}" + (f" for {step.duration_s:.2f} s" if step.duration_s else ""))
            started = topology.nemesis.start(step.kind, target, **step.params)
            if step.duration_s:
                abort.wait(step.duration_s)
            topology.nemesis.stop(started)
        except Exception as exc:  # reported below as a run that could not be run as written
            errors.append(f"fault {step.kind} -> {step.target} at {step.at_s:.2f} s: {exc}")
            topology.history.emit("step.error", kind=step.kind, target=step.target, error=str(exc))
            abort.set()

    def operation(op: Op) -> None:
        try:
            if wait_until(op.at_s):
                workload.apply(op, say)
        except Exception as exc:
            errors.append(f"{op.op} {op.target} at {op.at_s:.2f} s: {exc}")
            abort.set()

    threads = [threading.Thread(target=fault, args=(s,), name=f"step-{i}") for i, s in enumerate(steps)]
    threads += [threading.Thread(target=operation, args=(o,), name=f"op-{i}") for i, o in enumerate(ops)]
    for thread in threads:
        start_thread(thread)
    try:
        for thread in threads:
            thread.join()
    except BaseException:  # interrupted: the threads stop waiting, the caller heals what they started
        abort.set()
        raise
    if errors:
        raise ScenarioError("; ".join(errors))


def record_final_scan(topology: Topology, ids: list[str], prefix: str) -> None:
    """Ground truth into the history: each stream's head, every stored message with its writer, and every
    connection item of the run's connection ids (``harness.ground_truth``)."""
    dynamodb, tables = topology.dynamodb()
    try:
        record_final(topology.history, dynamodb, tables, topology.streams(), ids, prefix)
    except (BotoCoreError, ClientError) as exc:
        raise ScenarioError(f"the final scan failed, the backend stopped answering ({exc}); "
                            f"see {topology.logs}") from exc
