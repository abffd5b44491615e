"""The runner's schedule without a topology: fault steps overlap on their own schedules, workload targets
resolve against the client's view, a step that cannot be applied makes the run one that could not run, and
``run.start`` says whether the run left the fault model."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fleet.config import FleetConfig
from harness.faults.plane import FaultError
from harness.scenarios import runner
from harness.scenarios.runner import ScenarioError, Workload, fault_model
from harness.scenarios.scenario_file import Op, Step


class History:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def emit(self, type: str, **fields: Any) -> None:
        self.events.append((type, fields))


class FakeNemesis:
    """Records when each fault starts and stops; ``refuse`` kinds fail to start."""

    def __init__(self, refuse: str = "") -> None:
        self.log: list[tuple[str, str, float]] = []
        self.refuse = refuse
        self.lock = threading.Lock()

    def start(self, kind: str, target: str, **params: Any) -> str:
        if kind == self.refuse:
            raise FaultError(f"{kind}: refused")
        with self.lock:
            self.log.append(("start", kind, time.monotonic()))
        return kind

    def stop(self, fault: str) -> None:
        with self.lock:
            self.log.append(("stop", fault, time.monotonic()))


class FakeTopology:
    def __init__(self, nemesis: FakeNemesis | None = None) -> None:
        self.history = History()
        self.nemesis = nemesis
        self.router: list[tuple[str, str]] = []

    def live_workers(self) -> set[str]:
        return {"worker-1", "worker-2"}

    def start_connection(self, connection_id: str) -> None:
        self.router.append(("START", connection_id))

    def stop_connection(self, connection_id: str) -> None:
        self.router.append(("STOP", connection_id))


def test_steps_overlap_and_a_long_fault_does_not_delay_the_next() -> None:
    nemesis = FakeNemesis()
    cluster = FakeTopology(nemesis)
    steps = [Step(0.0, "pause", "worker-1", duration_s=0.3), Step(0.05, "partition_aws", "worker-2", 0.05)]
    ops = [Op(0.1, "stop", "c001")]
    workload = Workload(cluster, random.Random(1), ["c000", "c001"])  # type: ignore[arg-type]
    runner._run_schedule(cluster, workload, steps, ops, lambda _: None)  # type: ignore[arg-type]
    order = [(event, kind) for event, kind, _ in nemesis.log]
    assert order == [("start", "pause"), ("start", "partition_aws"), ("stop", "partition_aws"), ("stop", "pause")]
    assert cluster.router == [("STOP", "c001")] and workload.started() == ["c000"]


def test_a_step_that_cannot_be_applied_aborts_the_phase_as_could_not_run() -> None:
    nemesis = FakeNemesis(refuse="restart")
    cluster = FakeTopology(nemesis)
    workload = Workload(cluster, random.Random(1), ["c000"])  # type: ignore[arg-type]
    with pytest.raises(ScenarioError, match=r"fault restart -> worker-1 at 0\.00 s: restart: refused"):
        runner._run_schedule(cluster, workload,  # type: ignore[arg-type]
                             [Step(0.0, "restart", "worker-1"), Step(5.0, "kill", "worker-2")], [], lambda _: None)
    assert ("step.error", {"kind": "restart", "target": "worker-1", "error": "restart: refused"}) \
        in cluster.history.events
    assert not [entry for entry in nemesis.log if entry[1] == "kill"]  # the rest was abandoned, not waited for


@pytest.mark.parametrize(("steps", "ops", "message"), [
    ([Step(float("inf"), "kill", "worker-1")], [], r"fault kill -> worker-1 at inf s: "),
    ([], [Op(float("inf"), "stop", "c000")], r"stop c000 at inf s: "),
])
def test_a_step_that_cannot_be_scheduled_aborts_the_run_instead_of_being_judged(
        steps: list[Step], ops: list[Op], message: str) -> None:
    """The scheduler's own failure (here: a time ``Event.wait`` cannot take) is a run that could not run,
    never a run judged as if the fault had happened."""
    nemesis = FakeNemesis()
    cluster = FakeTopology(nemesis)
    workload = Workload(cluster, random.Random(1), ["c000"])  # type: ignore[arg-type]
    with pytest.raises(ScenarioError, match=message):
        runner._run_schedule(cluster, workload, steps, ops, lambda _: None)  # type: ignore[arg-type]
    assert nemesis.log == [] and cluster.router == []


def test_workload_targets_resolve_against_what_the_client_did(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = FakeTopology()
    workload = Workload(cluster, random.Random(3), ["c000", "c001", "c002"])  # type: ignore[arg-type]
    monkeypatch.setattr(workload, "_owned_by", lambda rule: ["c002"] if rule == "worker-2" else [])
    say: list[str] = []
    for op in (Op(0, "stop", "owned-by:worker-2"), Op(0, "start", "previous"), Op(0, "stop", "previous"),
               Op(0, "start", "stopped"), Op(0, "stop", "owned-by:worker-1"), Op(0, "start", "c009")):
        workload.apply(op, say.append)
    assert cluster.router == [("STOP", "c002"), ("START", "c002"), ("STOP", "c002"), ("START", "c002"),
                              ("START", "c009")]
    assert ("workload.skip", {"op": "stop", "target": "owned-by:worker-1", "reason": "no such connection now"}) \
        in cluster.history.events
    assert sorted(workload.started()) == ["c000", "c001", "c002", "c009"]
    assert workload.resolve("stopped") is None and workload.resolve("random") in workload.started()


def test_the_fault_model_is_left_by_skew_beyond_the_tolerance_and_for_i1_by_ecs_calling_a_live_task_stopped() -> None:
    config = FleetConfig(profile="hardened", timescale=0.1, worker_id="t")
    skew = lambda ms: [Step(0, "clock_skew", "worker-1", 1.0, {"offset_ms": ms})]  # noqa: E731
    assert fault_model([Step(0, "kill", "worker-1")], config) == "within"
    assert fault_model(skew(-100), config) == "within"
    assert fault_model(skew(-1000), config) == "outside: clock skew 1000 ms > tolerance 100 ms"
    lying = [Step(0, "zombie", "worker-2"), Step(1, "stopped_while_running", "worker-1"), Step(2, "kill", "worker-3")]
    assert fault_model(lying, config) == ("outside for I1: ECS reports a running task stopped "
                                          "(stopped_while_running of worker-1, zombie of worker-2)")
    assert fault_model(lying + skew(-1000), config).startswith("outside: clock skew")


def test_the_progress_line_of_a_verdict_is_readable(tmp_path: Path) -> None:
    """Not ``recovery max=7685.25830078125 ms (bound {'kill': 8000.0})``."""
    from harness.scenarios.catalog import SCENARIOS
    from tests.harness.report.histories import small_run

    small_run(tmp_path, bound_ms=8000.0)
    lines: list[str] = []
    phases = runner.Phases(SCENARIOS["crash"], FleetConfig(profile="hardened", timescale=0.1, worker_id="t"),
                           3, 1, 3, progress=lines.append)
    phases.verdict(tmp_path)
    assert lines[-1].endswith("crash/hardened: INVALID: 1 duplicate claims, 3 lost sequences, "
                              "recovery max 2.40 s, bound 8.00 s"), lines[-1]


def test_clock_steps_add_up_with_skews_against_the_tolerance() -> None:
    config = FleetConfig(profile="hardened", timescale=0.1, worker_id="t")
    step = lambda ms, worker="worker-1": Step(0, "clock_step", worker, 0.0, {"step_ms": ms})  # noqa: E731
    assert fault_model([step(60), step(-30, "worker-2")], config) == "within"
    assert fault_model([step(60), step(-50)], config) == "outside: clock skew 110 ms > tolerance 100 ms"
    assert fault_model([step(-60), Step(1, "clock_skew", "worker-1", 1.0, {"offset_ms": 50})], config) == (
        "outside: clock skew 110 ms > tolerance 100 ms")


def test_a_run_refuses_a_folder_holding_another_runs_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs never mix (history files are opened for append, and the checkers read the first run.start)."""
    from harness.scenarios.catalog import SCENARIOS

    def no_fleet(*_: object, **__: object) -> None:
        raise AssertionError("a fleet was started")

    monkeypatch.setattr(runner, "Cluster", no_fleet)
    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "harness.jsonl").write_text('{"type": "run.start"}\n')
    with pytest.raises(ScenarioError, match="holds another run's history"):
        runner.run_scenario(runner.ScenarioRun(SCENARIOS["crash"], run_dir=tmp_path))


class SettlingTopology:
    """Every stream stored; ``c005`` drained for the first ``polls`` looks (``None``: for ever)."""

    def __init__(self, polls: int | None) -> None:
        self.polls = polls
        self.looks = 0

    def streams(self) -> dict[str, Any]:
        return {"c000": {"head_seq": 9}, "c005": {"head_seq": 125}}

    def stored_through(self, ids: list[str]) -> dict[str, float]:
        return {"c000": 9.0}

    def draining(self, ids: list[str]) -> list[str]:
        self.looks += 1
        return ["c005"] if "c005" in ids and (self.polls is None or self.looks <= self.polls) else []


def test_settling_waits_for_a_drain_of_a_stopped_stream_to_end() -> None:
    # explore seed 7104: c005, STOPPED, was still drained when settling ended, and the final scan missed seqs
    topology = SettlingTopology(polls=2)
    _, behind, draining = runner.settle_streams(topology, ["c000"], ["c000", "c005"], 0.0, timeout_s=60.0)  # type: ignore[arg-type]
    assert (behind, draining, topology.looks) == ([], [], 3)


def test_settling_gives_up_on_a_drain_that_does_not_end_within_the_bound() -> None:
    topology = SettlingTopology(polls=None)
    _, behind, draining = runner.settle_streams(topology, ["c000"], ["c000", "c005"], 0.0, timeout_s=0.0)  # type: ignore[arg-type]
    assert (behind, draining) == ([], ["c005"])
