"""I5 STOP honoured: latency from conn.stopped to the close of the pk's sessions."""

from __future__ import annotations

import pytest

from harness.checkers.result import UNKNOWN
from harness.checkers.stop import check_stop

PK = "CONN#a"


def stopped_at_1000(build, **start_fields):
    return build.run_start(**start_fields).at(0, "conn.started", "harness", pk=PK).at(
        1000, "conn.stopped", "harness", pk=PK)


def test_a_session_closing_within_the_bound_honours_the_stop(build) -> None:
    stopped_at_1000(build).session(PK, "worker-1", 100, 1800).at(9000, "run.stop", "harness")

    result = check_stop(build.frame())

    assert result.valid is True
    [row] = result.tables["stops"]
    # default bound: desired_check_ms 1000 + heartbeat_ms 500
    assert (row["sessions"], row["closed_t"], row["latency_ms"], row["bound_ms"], row["within_bound"]) == (
        1, 1800, 800, 1500, True)


def test_a_session_closing_late_is_invalid(build) -> None:
    stopped_at_1000(build).session(PK, "worker-1", 100, 3000).at(9000, "run.stop", "harness")

    result = check_stop(build.frame())

    assert result.valid is False
    assert result.details["late"] == 1 and result.tables["stops"][0]["latency_ms"] == 2000


def test_the_bound_from_run_start_wins(build) -> None:
    stopped_at_1000(build, stop_bound_ms=2500).session(PK, "worker-1", 100, 3000)
    build.at(9000, "run.stop", "harness")

    assert check_stop(build.frame()).valid is True


def test_a_session_opened_after_the_stop_counts(build) -> None:
    stopped_at_1000(build).session(PK, "worker-1", 100, 1100).session(PK, "worker-2", 1200, 4000)
    build.at(9000, "run.stop", "harness")

    result = check_stop(build.frame())

    assert result.valid is False and result.tables["stops"][0]["sessions"] == 2


def test_sessions_after_a_later_start_do_not_count(build) -> None:
    stopped_at_1000(build).session(PK, "worker-1", 100, 1100).at(2000, "conn.started", "harness", pk=PK)
    build.session(PK, "worker-2", 2500, 8000).at(9000, "run.stop", "harness")

    assert check_stop(build.frame()).tables["stops"][0]["latency_ms"] == 100


def test_a_stop_with_nothing_open_has_no_latency(build) -> None:
    stopped_at_1000(build).session(PK, "worker-1", 100, 900).at(9000, "run.stop", "harness")

    assert check_stop(build.frame()).tables["stops"][0]["latency_ms"] == 0


def test_a_session_never_closed_is_late_once_the_bound_passed_and_unknown_before(build) -> None:
    stopped_at_1000(build).session(PK, "worker-1", 100).at(9000, "run.stop", "harness")

    late = check_stop(build.frame())
    too_soon = check_stop(build.frame(), bound_ms=20000)

    assert late.valid is False and late.tables["stops"][0]["closed_t"] is None
    assert too_soon.valid == UNKNOWN and too_soon.details["undecided"] == 1


def test_no_bound_at_all_is_unknown(build) -> None:
    build.run_start(config={}).at(1000, "conn.stopped", "harness", pk=PK).session(PK, "worker-1", 100, 1100)

    assert check_stop(build.frame()).valid == UNKNOWN


def router(build, t: float, kind: str, status: int = 200):
    return build.at(t, "event", "router", kind=kind, pk=PK, status=status)


def test_a_stop_through_the_router_that_is_not_honoured_is_invalid(build) -> None:
    build.run_start(stop_bound_ms=500)
    router(build, 0, "START").session(PK, "worker-1", 100, gen="g1")  # never closed
    router(build, 1000, "STOP").at(9000, "run.stop", "harness")

    result = check_stop(build.frame())

    assert result.valid is False
    [row] = result.tables["stops"]
    assert (row["closed_t"], row["consumers"], row["within_bound"]) == (None, ["worker-1@g1"], False)


def test_a_stop_through_the_router_honoured_in_time_is_valid(build) -> None:
    build.run_start(stop_bound_ms=500)
    router(build, 0, "START").session(PK, "worker-1", 100, 1300).persist(1200, PK, "worker-1", 9)
    router(build, 1000, "STOP").at(9000, "run.stop", "harness")

    result = check_stop(build.frame())

    assert result.valid is True and result.tables["stops"][0]["latency_ms"] == 300


def test_a_write_accepted_after_the_stop_bound_is_invalid(build) -> None:
    build.run_start(stop_bound_ms=500)
    router(build, 0, "START").session(PK, "worker-1", 100, 1300).persist(2000, PK, "worker-1", 9)
    router(build, 1000, "STOP").at(9000, "run.stop", "harness")

    result = check_stop(build.frame())

    assert result.valid is False and result.details["late_writes"] == 1


def test_a_write_of_unknown_outcome_after_the_stop_bound_is_undecided(build) -> None:
    build.run_start(stop_bound_ms=500)
    router(build, 0, "START").session(PK, "worker-1", 100, 1300).persist(2000, PK, "worker-1", 9, outcome="info")
    router(build, 1000, "STOP").at(9000, "run.stop", "harness")

    assert check_stop(build.frame()).valid == UNKNOWN


def test_a_start_again_ends_the_stops_obligation(build) -> None:
    build.run_start(stop_bound_ms=500)
    router(build, 0, "START").session(PK, "worker-1", 100, 1200)
    router(build, 1000, "STOP")
    router(build, 1100, "START").session(PK, "worker-2", 1400).persist(3000, PK, "worker-2", 9)
    build.at(9000, "run.stop", "harness")

    result = check_stop(build.frame())

    assert result.valid is True and result.tables["stops"][0]["sessions"] == 1


def test_a_stop_the_router_refused_is_not_judged(build) -> None:
    build.run_start(stop_bound_ms=500)
    router(build, 0, "START").session(PK, "worker-1", 100)
    router(build, 1000, "STOP", status=400).at(9000, "run.stop", "harness")

    assert check_stop(build.frame()).details["stops"] == 0


def test_a_session_that_outlives_the_stop_until_a_late_start_again_is_invalid(build) -> None:
    build.run_start(stop_bound_ms=500)
    router(build, 0, "START").session(PK, "worker-1", 100, 8000)
    router(build, 1000, "STOP")
    router(build, 4000, "START").at(9000, "run.stop", "harness")

    result = check_stop(build.frame())

    assert result.valid is False and result.tables["stops"][0]["closed_t"] is None


def late_write_around_an_unknown_start(build, write_t: float):
    """STOP at 1000 (bound 500: deadline 1500), a write stored at ``write_t``, and a START sent at 2000 whose
    answer was a 503 (its outcome unknown)."""
    build.run_start(stop_bound_ms=500)
    router(build, 0, "START").session(PK, "worker-1", 100, 1300).persist(write_t, PK, "worker-1", 9)
    router(build, 1000, "STOP")
    return build.at(2500, "event", "router", kind="START", pk=PK, status=503, sent_ms=2000).at(
        9000, "run.stop", "harness")


def test_a_start_of_unknown_outcome_sent_before_the_late_part_makes_it_undecided(build) -> None:
    """Seen on moto under overload (explore seed 9003): a START answered 503 after its write was sent may have
    landed; what is late only after it was sent is undecided, not a violation.  Invalid before the rule."""
    result = check_stop(late_write_around_an_unknown_start(build, 3000).frame())

    assert result.valid == UNKNOWN
    [row] = result.tables["stops"]
    assert (row["within_bound"], row["maybe_restarted_t"]) == (None, 2000)


def test_what_is_late_before_a_start_of_unknown_outcome_was_sent_stays_invalid(build) -> None:
    result = check_stop(late_write_around_an_unknown_start(build, 1800).frame())

    assert result.valid is False and result.tables["stops"][0]["maybe_restarted_t"] is None


def test_a_start_again_within_the_bound_leaves_nothing_due(build) -> None:
    build.run_start(stop_bound_ms=500)
    router(build, 0, "START").session(PK, "worker-1", 100, 8000)
    router(build, 1000, "STOP")
    router(build, 1200, "START").at(9000, "run.stop", "harness")

    assert check_stop(build.frame()).valid is True


# -- drains: a worker reading what the stream emitted before the STOP, after its owner died (issue 10) -----
def killed_owner_then_stop(build, drain_close: float | None = 3300):
    """STOP at 1000 (bound 500: deadline 1500) of a stream emitting seq n at 100 n; its owner died at 900
    having stored 1..8; worker-2 drains from 3000 (backlog 9..14, emitted up to 1400) and leaves at
    ``drain_close``."""
    build.run_start(stop_bound_ms=500)
    router(build, 0, "START").session(PK, "worker-1", 50, 900, gen="g1")
    for seq in range(1, 41):
        build.emit(PK, seq, 100 * seq)
    build.persist(850, PK, "worker-1", 1, 8, gen="g1")
    router(build, 1000, "STOP").session(PK, "worker-2", 3000, drain_close, gen="g2")
    return build


def test_a_drain_that_stores_only_the_backlog_honours_the_stop(build) -> None:
    killed_owner_then_stop(build).persist(3200, PK, "worker-2", 9, 14, gen="g2", sent=3150)
    build.at(9000, "run.stop", "harness")

    result = check_stop(build.frame())

    assert result.valid is True
    [row] = result.tables["stops"]
    assert (row["drains"], row["drains_closed_t"], row["latency_ms"], row["late_writes"]) == (1, 3300, 0, 0)


def test_a_drain_that_goes_on_storing_live_data_is_invalid(build) -> None:
    """Seq 16 was emitted at 1600, after the deadline: consumed after the STOP."""
    killed_owner_then_stop(build).persist(3200, PK, "worker-2", 9, 16, gen="g2", sent=3150)
    build.at(9000, "run.stop", "harness")

    result = check_stop(build.frame())

    assert result.valid is False and result.details["late_writes"] == 1


def test_a_drain_session_kept_open_past_its_backlog_is_invalid(build) -> None:
    """Its last backlog write was answered at 3200: due at 3700; it reads on, storing nothing, until 4000
    (or forever)."""
    killed_owner_then_stop(build, drain_close=4000).persist(3200, PK, "worker-2", 9, 14, gen="g2", sent=3150)
    build.at(9000, "run.stop", "harness")
    lingering = check_stop(build.frame())
    never_closed = killed_owner_then_stop(type(build)(), drain_close=None).persist(3200, PK, "worker-2", 9, 14,
                                                                                   gen="g2", sent=3150)
    never_closed.at(9000, "run.stop", "harness")

    assert lingering.valid is False and lingering.tables["stops"][0]["drains_closed_t"] == 4000
    assert check_stop(never_closed.frame()).valid is False
    assert check_stop(never_closed.frame(), bound_ms=20_000).valid == UNKNOWN  # not due before the end


def test_a_live_consumer_still_reading_after_the_stop_is_invalid_even_with_emission_times(build) -> None:
    """Open at the STOP, it must be closed by the deadline however it writes."""
    build.run_start(stop_bound_ms=500)
    router(build, 0, "START").session(PK, "worker-1", 50, 3000, gen="g1")
    for seq in range(1, 31):
        build.emit(PK, seq, 100 * seq)
    router(build, 1000, "STOP").persist(2900, PK, "worker-1", 29, gen="g1").at(9000, "run.stop", "harness")

    result = check_stop(build.frame())

    assert result.valid is False
    [row] = result.tables["stops"]
    assert (row["latency_ms"], row["late_writes"], row["drains"]) == (2000, 1, 0)


def test_a_drain_whose_backlog_write_is_slow_may_stay_open_until_it_is_answered(build) -> None:
    """Sent at 3050 while the session was open, answered at 5000 after it closed (4000): due at 5500."""
    killed_owner_then_stop(build, drain_close=4000).persist(5000, PK, "worker-2", 9, 14, gen="g2", sent=3050)
    build.at(9000, "run.stop", "harness")

    assert check_stop(build.frame()).valid is True


def test_a_drains_unanswered_backlog_write_that_never_landed_still_shows_the_drain_at_work(build) -> None:
    """As above, but the put got no answer (at 3900) and the stored log holds another's mark at its number: it
    never landed, yet the drain was storing its backlog until then (moto seed 8135)."""
    killed_owner_then_stop(build, drain_close=4000)
    build.persist(3900, PK, "worker-2", 9, 14, outcome="info", gen="g2", sent=3050, b=2)
    build.log(8000, PK, (1, "batch", "worker-1", "g1", 1, 1, 8, 850), (2, "mark", "worker-3", "g3", 3, 9, 8, 5000))
    build.at(9000, "run.stop", "harness")

    assert check_stop(build.frame()).valid is True


def test_a_drain_still_open_when_start_came_again_before_anything_was_due_honours_the_stop(build) -> None:
    """Explore benchmark seed 3000: a drain opened after the STOP, START came again 200 ms later (before the
    deadline) and the drain closed after that.  Nothing was due: valid, not undecided."""
    build.run_start(stop_bound_ms=500)
    router(build, 0, "START").session(PK, "worker-1", 50, 900, gen="g1")
    for seq in range(1, 41):
        build.emit(PK, seq, 100 * seq)
    build.persist(850, PK, "worker-1", 1, 8, gen="g1")
    router(build, 1000, "STOP").session(PK, "worker-2", 1050, 1700, gen="g2")
    router(build, 1200, "START").persist(1650, PK, "worker-2", 9, 10, gen="g2", sent=1600)
    build.at(9000, "run.stop", "harness")

    result = check_stop(build.frame())

    assert result.valid is True and result.details["undecided"] == 0


def test_a_drain_still_open_when_start_came_again_after_it_was_due_is_invalid(build) -> None:
    """The same drain, START only at 2500: it was due at 1550 and still open."""
    build.run_start(stop_bound_ms=500)
    router(build, 0, "START").session(PK, "worker-1", 50, 900, gen="g1")
    for seq in range(1, 41):
        build.emit(PK, seq, 100 * seq)
    router(build, 1000, "STOP").session(PK, "worker-2", 1050, 2700, gen="g2")
    router(build, 2500, "START").at(9000, "run.stop", "harness")

    assert check_stop(build.frame()).valid is False


def cut_from_dynamodb(build, worker: str, start: float, stop: float, **params) -> None:
    params = {"service": "dynamodb", "type": "timeout", **params}
    build.at(start, "fault.start", "nemesis", kind="toxic", target=worker, params=params)
    build.at(stop, "fault.stop", "nemesis", kind="toxic", target=worker, params=params)


def test_an_owner_cut_from_dynamodb_has_until_its_fence_closes(build) -> None:
    """Bound 1500, lease 2000: cut from 500 to 6000, the owner has until the earlier of 6000 + 1500 and
    1000 + 2000 + 1500."""
    stopped_at_1000(build).session(PK, "worker-1", 100, 3000)
    cut_from_dynamodb(build, "worker-1", 500, 6000)
    build.at(9000, "run.stop", "harness")

    result = check_stop(build.frame())

    [row] = result.tables["stops"]
    assert result.valid is True and result.details["deferred"] == 1
    assert (row["latency_ms"], row["deadline_t"], row["deferred_by"]) == (2000, 4500, "toxic:timeout on worker-1")


def test_an_owner_cut_from_dynamodb_is_still_late_past_its_fence(build) -> None:
    stopped_at_1000(build).session(PK, "worker-1", 100, 5000)
    cut_from_dynamodb(build, "worker-1", 500, 6000)
    build.at(9000, "run.stop", "harness")

    assert check_stop(build.frame()).valid is False


def test_a_cut_ending_soon_defers_the_deadline_only_to_its_end_plus_the_bound(build) -> None:
    stopped_at_1000(build).session(PK, "worker-1", 100, 3000)
    cut_from_dynamodb(build, "worker-1", 500, 1200)
    build.at(9000, "run.stop", "harness")

    result = check_stop(build.frame())

    assert result.valid is False and result.tables["stops"][0]["deadline_t"] == 2700


def test_only_a_dynamodb_cut_of_the_owner_defers_the_deadline(build) -> None:
    stopped_at_1000(build).session(PK, "worker-1", 100, 3000)
    cut_from_dynamodb(build, "worker-2", 500, 6000)
    cut_from_dynamodb(build, "worker-1", 500, 6000, service="sqs")
    build.at(9000, "run.stop", "harness")

    result = check_stop(build.frame())

    assert result.valid is False and result.tables["stops"][0]["deferred_by"] is None


@pytest.mark.parametrize("kind", ["pause", "pause_mid_write"])
def test_an_owner_frozen_after_the_stop_has_until_its_fence_closes(build, kind: str) -> None:
    """A frozen owner reaches nothing, DynamoDB included: it cannot learn of the STOP, only its fence
    promises anything (explore seed 391: STOP, then the owner frozen mid-write 0.4 s later)."""
    stopped_at_1000(build).session(PK, "worker-1", 100, 3000)
    build.fault(1_400, kind, "worker-1", stop_t=2_600).at(9000, "run.stop", "harness")

    result = check_stop(build.frame())

    [row] = result.tables["stops"]
    assert result.valid is True and (row["deadline_t"], row["deferred_by"]) == (4100, f"{kind} on worker-1")
