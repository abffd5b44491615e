"""Sessions, consuming parts and interval helpers."""

from __future__ import annotations

import numpy as np

from harness.checkers.consuming import accepted_writes, consumption, covering, intersect, lease_beliefs, merge_intervals

PK = "CONN#a"


def test_merge_intervals_unites_overlapping_and_touching_ones() -> None:
    starts, ends = merge_intervals(np.array([5.0, 0.0, 2.0, 10.0]), np.array([7.0, 2.0, 3.0, 11.0]))

    assert starts.tolist() == [0.0, 5.0, 10.0] and ends.tolist() == [3.0, 7.0, 11.0]


def test_intersect_keeps_only_positive_overlaps() -> None:
    a = (np.array([0.0, 10.0]), np.array([5.0, 20.0]))
    b = (np.array([5.0, 12.0]), np.array([6.0, 30.0]))

    starts, ends = intersect(a, b)

    assert starts.tolist() == [12.0] and ends.tolist() == [20.0]


def test_covering_includes_the_ends() -> None:
    intervals = (np.array([0.0, 10.0]), np.array([5.0, 20.0]))

    assert covering(intervals, np.array([-1.0, 0.0, 5.0, 7.0, 20.0, 21.0])).tolist() == [
        False, True, True, False, True, False]


def test_a_reused_session_id_pairs_opens_and_closes_in_order(build) -> None:
    build.run_start().session(PK, "worker-1", 100, 200, session="s1").session(PK, "worker-2", 300, 400,
                                                                              session="s1")

    sessions = consumption(build.frame()).sessions

    assert sessions[["worker", "open_t", "close_t"]].values.tolist() == [["worker-1", 100, 200],
                                                                         ["worker-2", 300, 400]]


def test_a_close_without_its_open_starts_at_the_first_event(build) -> None:
    build.run_start(t=50).at(200, "sub.close", "upstream", pk=PK, session="s9", worker="worker-1",
                             reason="error", last_pong_t=190)

    parts = consumption(build.frame()).parts

    assert parts[["start", "end"]].values.tolist() == [[50, 200]]


def test_checkpoints_and_unknown_writes_are_accepted_writes_but_failures_are_not(build) -> None:
    build.run_start().persist(100, PK, "worker-1", 1, outcome="info").persist(110, PK, "worker-1", 2,
                                                                              outcome="fail")
    build.at(120, "checkpoint", "worker-1", pk=PK, worker="worker-1", epoch=1, seq=1, outcome="ok")

    writes = consumption(build.frame()).writes

    assert writes[["t", "type", "seq_to", "certain"]].values.tolist() == [[100, "msg.persist", 1, False],
                                                                          [120, "checkpoint", 1, True]]


def test_lease_beliefs_are_per_incarnation(build) -> None:
    build.run_start().acquire(100, PK, "worker-1", 2100, gen="a1")
    build.acquire(1000, PK, "worker-1", 3000, epoch=2, gen="b2")
    build.at(1500, "lease.lost", "worker-1", pk=PK, worker="worker-1", gen="a1", reason="expired")
    build.at(4000, "run.stop", "harness")

    beliefs = lease_beliefs(build.frame())

    assert beliefs[["consumer", "start", "end", "ended_by"]].values.tolist() == [
        ["worker-1@a1", 100, 1500, "lease.lost"], ["worker-1@b2", 1000, 4000, "end"]]


def test_a_write_spans_from_its_sending_to_its_answer(build) -> None:
    build.run_start().persist(500, PK, "worker-1", 1, sent=420, gen="a1").persist(600, PK, "worker-1", 2)

    writes = accepted_writes(build.frame())

    assert writes[["t", "answered_t", "consumer"]].values.tolist() == [[420, 500, "worker-1@a1"],
                                                                     [600, 600, "worker-1"]]
