"""Selections, run settings and faults read from a history."""

from __future__ import annotations

import math

import pytest

from harness.checkers.events import (
    consumer_of,
    desired_states,
    faults,
    run_info,
    same_consumer,
    select,
    split_consumer,
)


def test_select_returns_the_asked_columns_typed(build) -> None:
    build.at(1, "emit", "upstream", pk="CONN#a", seq=1).at(2, "sub.open", "upstream", pk="CONN#a", session=7)
    history = build.frame()

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


def test_the_consumer_is_the_incarnation_and_falls_back_to_the_worker(build) -> None:
    build.at(1, "sub.open", "upstream", pk="CONN#a", worker="worker-1", gen="ab")
    build.at(2, "sub.open", "upstream", pk="CONN#a", worker="worker-1", gen="")
    build.at(3, "lease.renew", "worker-2", outcome="ok")
    frame = select(build.frame(), ["sub.open", "lease.renew"], ["src", "worker", "gen"])

    assert consumer_of(frame).tolist() == ["worker-1@ab", "worker-1", "worker-2"]
    assert split_consumer("worker-1@ab") == ("worker-1", "ab") and split_consumer("worker-1") == ("worker-1", None)


@pytest.mark.parametrize(("a", "b", "same"), [
    ("worker-1@ab", "worker-1@ab", True),
    ("worker-1@ab", "worker-1@cd", False),
    ("worker-1@ab", "worker-1", True),
    ("worker-1", "worker-2", False),
    ("worker-1@ab", "worker-2@ab", False),
])
def test_same_consumer(a: str, b: str, same: bool) -> None:
    assert same_consumer(a, b) is same and same_consumer(b, a) is same


def test_desired_state_comes_from_the_routers_accepted_events_when_there_are_any(build) -> None:
    build.at(1, "event", "router", kind="START", pk="CONN#a", status=200)
    build.at(2, "event", "router", kind="STOP", pk="CONN#a", status=409)
    build.at(3, "event", "router", kind="STOP", pk="CONN#a", status=200)
    build.at(4, "conn.stopped", "harness", pk="CONN#b")

    assert desired_states(build.frame()).values.tolist() == [[1, "CONN#a", "conn.started"],
                                                              [3, "CONN#a", "conn.stopped"]]


def test_a_router_event_takes_effect_when_its_write_was_answered(build) -> None:
    """Explore benchmark seed 3026: the router logged a STOP 340 ms after its write (the mailbox post and
    the notification come between), which made what the stream emitted meanwhile look STARTED.  A 503 whose
    write was answered (the notification failed) took effect too; one whose write was not did not."""
    build.at(10, "event", "router", kind="START", pk="CONN#a", status=200, written_ms=5)
    build.at(400, "event", "router", kind="STOP", pk="CONN#a", status=200, written_ms=60)
    build.at(500, "event", "router", kind="START", pk="CONN#b", status=503, written_ms=450)
    build.at(600, "event", "router", kind="STOP", pk="CONN#b", status=503)

    assert desired_states(build.frame()).values.tolist() == [[5, "CONN#a", "conn.started"],
                                                              [60, "CONN#a", "conn.stopped"],
                                                              [450, "CONN#b", "conn.started"]]


def test_without_router_events_desired_state_comes_from_the_harness(build) -> None:
    build.at(1, "conn.started", "harness", pk="CONN#a").at(2, "event", "router", kind="INVALID", status=400)

    assert desired_states(build.frame())["type"].tolist() == ["conn.started"]


def test_run_info_reads_the_fault_model(build) -> None:
    assert run_info(build.run_start(fault_model="outside: skew").frame()).fault_model == "outside: skew"
