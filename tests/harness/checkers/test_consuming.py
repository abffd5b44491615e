"""Sessions, consuming parts and interval helpers."""

from __future__ import annotations

import numpy as np

from harness.checkers.consuming import consumption, covering, intersect, merge_intervals

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
