"""Selections, run settings and faults read from a history."""

from __future__ import annotations

import math

from harness.checkers.events import Events, faults, run_info, select


def test_select_returns_the_asked_columns_typed_whether_indexed_or_not(build) -> None:
    build.at(1, "emit", "upstream", pk="CONN#a", seq=1).at(2, "sub.open", "upstream", pk="CONN#a", session=7)
    frame = build.frame()

    for history in (frame, Events(frame)):
        emits = select(history, "emit", ["t", "pk", "seq", "worker"])
        opens = select(history, ["sub.open"], ["session"])
        assert emits["seq"].tolist() == [1.0] and math.isnan(emits["worker"][0])
        assert opens["session"].tolist() == ["7"]


def test_run_info_reads_run_start_and_run_stop(build) -> None:
    build.run_start(t=10, bound_ms={"kill": 80000}).at(20, "run.stop", "harness").at(30, "emit", "upstream")

    info = run_info(build.frame())

    assert (info.scenario, info.timescale, info.start_t, info.stop_t, info.end_t, info.last_t) == (
        "test", 0.1, 10, 20, 20, 30)
    assert info.duration("lease_ms") == 2000 and info.duration("nope") is None
    assert info.bound_for("kill") == 80000 and info.bound_for("pause") is None


def test_run_info_without_run_start_is_empty_but_spans_the_events(build) -> None:
    info = run_info(build.at(5, "emit", "upstream").at(9, "emit", "upstream").frame())

    assert (info.profile, info.config, info.first_t, info.end_t) == (None, {}, 5, 9)


def test_faults_pair_each_start_with_the_next_stop_of_the_same_kind_and_target(build) -> None:
    build.fault(10, "pause", "worker-1").fault(12, "pause", "worker-2", stop_t=15)
    build.fault(20, "kill", "worker-3")
    build.at(30, "fault.stop", "nemesis", kind="pause", target="worker-1")
    build.at(40, "fault.start", "nemesis", kind="partition_aws", target=["worker-1", "worker-2"])

    found = faults(build.frame())

    assert [(f.kind, f.target, f.start_t, f.stop_t) for f in found] == [
        ("pause", "worker-1", 10, 30), ("pause", "worker-2", 12, 15), ("kill", "worker-3", 20, None),
        ("partition_aws", "worker-1,worker-2", 40, None)]
    assert found[3].targets == ("worker-1", "worker-2")
