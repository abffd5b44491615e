"""Tests of harness.region.batch: the timeline (pure: each fault starts and stops at its scaled times, a
flapping check flips in between, a START is one action) and a START step sent beside it, and a resumed batch
(a run judged in the folder is not run again, one left unjudged is)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from harness.cluster import ClusterError
from harness.region import batch
from harness.region.batch import RUN_FILE, judged, run_batch, send_start, timeline, verdict
from harness.region.failover import VARIANTS
from harness.region.schedules import RegionSchedule, Step, generate

CLEAN = {"split_brain": {"streams": 0, "overlap_ms": 0}, "lost_messages": 0, "lost_control_writes": 0,
         "activation": {"both_on": 0, "early_failbacks": 0, "activated_unhealthy": 0, "flapping": 0}}


def test_faults_start_and_stop_at_their_scaled_times_and_a_flapping_check_flips_between() -> None:
    flapping = Step(10.0, "flapping", "east", duration_s=40.0, flaps=2, period_s=10.0)
    pause = Step(5.0, "worker_pause", "west-worker-1", duration_s=20.0)
    start = Step(12.0, "start", "router")
    actions = [(round(t, 6), action, step.kind) for t, action, step in
               timeline(RegionSchedule(1, {}, (pause, flapping, start)), timescale=0.1)]
    assert actions == [(0.5, "start", "worker_pause"), (1.0, "start", "flapping"), (1.2, "start", "start"),
                       (2.0, "flip", "flapping"), (2.5, "stop", "worker_pause"), (3.0, "flip", "flapping"),
                       (4.0, "flip", "flapping"), (5.0, "stop", "flapping")]


def test_a_pause_aimed_at_the_failover_is_only_armed_at_its_time_the_runner_times_the_rest() -> None:
    """Begun when the failover begins and lasting from there (``_aimed_pause``), not stopped at ``at_s`` plus
    its duration beside a gray failure."""
    gray = Step(3.0, "gray_failure", "east", duration_s=50.0)
    pause = Step(3.0, "replication_pause", "global-tables", duration_s=22.0, when="failover")
    assert [(round(t, 6), a, step.kind) for t, a, step in timeline(RegionSchedule(3, {}, (gray, pause)), 0.1)] == \
        [(0.3, "start", "gray_failure"), (0.3, "start", "replication_pause"), (5.3, "stop", "gray_failure")]


def test_a_fault_without_flaps_only_starts_and_stops() -> None:
    cut = Step(3.0, "region_cut", "east", duration_s=60.0)
    assert [(round(t, 6), a) for t, a, _ in timeline(RegionSchedule(2, {}, (cut,)), timescale=0.1)] == \
        [(0.3, "start"), (6.3, "stop")]


class Routers:
    """START through the failover name: unanswered until ``answer`` is set, then acknowledged, or refused."""

    def __init__(self, refuse: bool = False) -> None:
        self.answer, self.refuse, self.sent = threading.Event(), refuse, threading.Event()

    def start_stream(self, name: str) -> None:
        self.sent.set()
        self.answer.wait(10.0)
        if self.refuse:
            raise ClusterError(f"START {name}: refused")


@pytest.mark.parametrize("refused", [False, True])
def test_a_start_step_waits_for_its_answer_beside_the_schedule_and_counts_once_acknowledged(refused: bool) -> None:
    routers, acknowledged = Routers(refuse=refused), ["s0"]
    sending = send_start(routers, "s1", acknowledged)  # type: ignore[arg-type]

    assert routers.sent.wait(10.0) and sending.is_alive()  # unanswered: the schedule goes on meanwhile
    assert acknowledged == ["s0"]
    routers.answer.set()
    sending.join(10.0)
    assert acknowledged == (["s0"] if refused else ["s0", "s1"])


def _leave(folder: Path, result: dict[str, Any]) -> None:
    folder.mkdir(parents=True)
    (folder / RUN_FILE).write_text(json.dumps(result), encoding="utf-8")


def test_a_runs_verdict_names_what_was_found_or_why_it_was_unjudged() -> None:
    assert verdict({**CLEAN, "lost_messages": 2}) == "2 lost messages"
    assert verdict(CLEAN) == "nothing found"
    assert verdict({"error": "not within 9 s: x"}) == "unjudged (not within 9 s: x)"


def test_a_resumed_batch_runs_only_what_the_folder_does_not_hold_judged(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    schedules = generate(1, 2)
    _leave(tmp_path / "seed-1" / "gate", {**CLEAN, "variant": "gate", "seed": 1, "wall_s": 1.0, "cpu_s": 1.0})
    _leave(tmp_path / "seed-2" / "gate", {"variant": "gate", "seed": 2, "error": "not within 9 s: x"})
    (tmp_path / "seed-2" / "gate" / "history").mkdir()  # what the unjudged attempt left goes
    assert judged(tmp_path / "seed-1" / "gate") is not None and judged(tmp_path / "seed-2" / "gate") is None

    ran: list[tuple[int, Path]] = []

    class Pool:  # no regions start: only which runs are made, and where
        def __init__(self, spec: object) -> None:
            self.spec = spec

        def __enter__(self) -> Pool:
            return self

        def __exit__(self, *_: object) -> None:
            return None

    def run(schedule: RegionSchedule, variant: object, folder: Path, pool: object, streams: int) -> dict[str, Any]:
        assert not any(folder.iterdir())
        ran.append((schedule.seed, folder))
        return {**CLEAN, "variant": "gate", "seed": schedule.seed, "wall_s": 2.0, "cpu_s": 1.0}

    monkeypatch.setattr(batch, "RegionsPool", Pool)
    monkeypatch.setattr(batch, "run_schedule", run)
    lines: list[str] = []
    results = run_batch(schedules, [VARIANTS["gate"]], tmp_path, 0.1, say=lines.append)
    assert ran == [(2, tmp_path / "seed-2" / "gate")]
    assert [r["seed"] for r in results] == [1, 2]
    assert lines[0] == f"resuming {tmp_path}: 1 of 2 runs already judged there, not run again"
    assert lines[1].startswith("[2/2] gate seed 2: nothing found; 2 s wall, 1 s CPU")
