"""Tests of harness.region.batch's timeline (pure): each fault starts and stops at its scaled times, a
flapping check flips in between, a START is one action."""

from __future__ import annotations

from harness.region.batch import timeline
from harness.region.schedules import RegionSchedule, Step


def test_faults_start_and_stop_at_their_scaled_times_and_a_flapping_check_flips_between() -> None:
    flapping = Step(10.0, "flapping", "east", duration_s=40.0, flaps=2, period_s=10.0)
    pause = Step(5.0, "worker_pause", "west-worker-1", duration_s=20.0)
    start = Step(12.0, "start", "router")
    actions = [(round(t, 6), action, step.kind) for t, action, step in
               timeline(RegionSchedule(1, {}, (pause, flapping, start)), timescale=0.1)]
    assert actions == [(0.5, "start", "worker_pause"), (1.0, "start", "flapping"), (1.2, "start", "start"),
                       (2.0, "flip", "flapping"), (2.5, "stop", "worker_pause"), (3.0, "flip", "flapping"),
                       (4.0, "flip", "flapping"), (5.0, "stop", "flapping")]


def test_a_fault_without_flaps_only_starts_and_stops() -> None:
    cut = Step(3.0, "region_cut", "east", duration_s=60.0)
    assert [(round(t, 6), a) for t, a, _ in timeline(RegionSchedule(2, {}, (cut,)), timescale=0.1)] == \
        [(0.3, "start"), (6.3, "stop")]
