"""I2 lost and I3 duplicated sequences: ground truth, msg.persist fallback, STARTED windows, horizon."""

from __future__ import annotations

import pytest

from harness.checkers.result import UNKNOWN
from harness.checkers.sequences import check_sequences

PK = "CONN#a"


def emitted(build, pk: str = PK, seqs: range = range(1, 11), step: float = 100.0):
    for seq in seqs:
        build.emit(pk, seq, seq * step)
    return build


def row_of(result, pk: str = PK) -> dict:
    [row] = [r for r in result.tables["sequences"] if r["pk"] == pk]
    return row


def test_every_seq_persisted_once_is_valid(build) -> None:
    emitted(build.run_start())
    for seq in range(1, 11):
        build.persist(seq * 100 + 5, PK, "worker-1", seq)
    build.at(5000, "run.stop", "harness")

    result = check_sequences(build.frame())

    assert result.valid is True
    assert result.details["source"] == "msg.persist"
    counts = result.details["emitted"], result.details["persisted"], result.details["lost_sequences"]
    assert counts == (10, 10, 0)


def test_dropped_seqs_are_lost_with_their_ranges(build) -> None:
    emitted(build.run_start())
    build.persist(305, PK, "worker-1", 1, 3).persist(705, PK, "worker-1", 6, 7)
    build.persist(1005, PK, "worker-1", 9, 10)
    build.at(5000, "run.stop", "harness")

    result = check_sequences(build.frame())

    assert result.valid is False
    assert result.details["lost_sequences"] == 3
    assert result.details["lost_ranges"] == {PK: [[4, 5], [8, 8]]}
    assert row_of(result)["lost"] == 3 and row_of(result)["lost_ranges"] == "4-5,8"


def test_a_seq_stored_twice_is_a_duplicate(build) -> None:
    emitted(build.run_start(), seqs=range(1, 5))
    build.at(5000, "run.stop", "harness").at(5001, "final.persisted", "harness", pk=PK, seqs=[1, 2, 3, 3, 4])
    build.at(5001, "final.emitted", "harness", pk=PK, head_seq=4)

    result = check_sequences(build.frame())

    assert result.valid is False
    assert result.details["source"] == "final.persisted"
    assert result.details["duplicate_deliveries"] == 1 and result.details["lost_sequences"] == 0
    assert result.details["duplicated_ranges"] == {PK: [[3, 3]]}
    row = row_of(result)
    assert (row["stored"], row["persisted"], row["duplicated"], row["head_seq"]) == (5, 4, 1, 4)


def test_a_seq_written_ok_twice_is_a_duplicate_without_ground_truth(build) -> None:
    emitted(build.run_start(), seqs=range(1, 3))
    build.persist(205, PK, "worker-1", 1, 2).persist(300, PK, "worker-2", 2).at(5000, "run.stop", "harness")

    result = check_sequences(build.frame())

    assert result.valid is False and result.details["duplicate_deliveries"] == 1


def test_the_store_is_the_ground_truth_over_the_writers_claims(build) -> None:
    emitted(build.run_start(), seqs=range(1, 4))
    build.persist(305, PK, "worker-1", 1, 3).at(5000, "run.stop", "harness")
    build.at(5001, "final.persisted", "harness", pk=PK, seqs=[1, 3])

    result = check_sequences(build.frame())

    assert result.valid is False and result.details["lost_ranges"] == {PK: [[2, 2]]}


def test_seqs_emitted_while_stopped_are_not_lost(build) -> None:
    build.run_start().at(150, "conn.started", "harness", pk=PK).at(550, "conn.stopped", "harness", pk=PK)
    build.at(850, "conn.started", "harness", pk=PK)
    emitted(build)  # seqs 1..10 at 100..1000: STARTED for 2..5 and 9..10
    build.persist(505, PK, "worker-1", 2, 5).persist(1005, PK, "worker-1", 9)
    build.at(5000, "run.stop", "harness")

    result = check_sequences(build.frame())

    assert result.details["emitted"] == 6
    assert result.details["lost_ranges"] == {PK: [[10, 10]]}


@pytest.mark.parametrize("unknown_sent", [True, False])
def test_what_follows_a_stop_of_unknown_outcome_is_not_required(build, unknown_sent: bool) -> None:
    """Explore seed 7120: a STOP answered 503 (outcome unknown) had landed; the drain stored everything before
    it, and the repeated STOP was answered 200 later.  What was emitted between the first STOP's send and the
    answered one was never certainly STARTED, so it is not lost.  A 503 that sent nothing (no ``sent_ms``: the
    region gate refused it) changes nothing, and a START answered later makes the stream required again."""
    build.run_start()
    build.at(150, "event", "router", pk=PK, kind="START", status=200, written_ms=150)
    stop = {"sent_ms": 420} if unknown_sent else {}
    build.at(720, "event", "router", pk=PK, kind="STOP", status=503, **stop)
    build.at(760, "event", "router", pk=PK, kind="STOP", status=200, written_ms=750)
    build.at(850, "event", "router", pk=PK, kind="START", status=200, written_ms=850)
    emitted(build)  # seqs 1..10 at 100..1000: 2..7 before the answered STOP, 9..10 after the START
    build.persist(505, PK, "worker-1", 2, 4).persist(1005, PK, "worker-1", 9, 10)

    result = check_sequences(build.at(5000, "run.stop", "harness").frame())

    if unknown_sent:  # the STOP may have landed at 420: 5..7 were never certainly STARTED
        assert result.valid is True and result.details["lost_ranges"] == {}
    else:  # nothing was sent: 5..7 were emitted while STARTED and never stored
        assert result.valid is False and result.details["lost_ranges"] == {PK: [[5, 7]]}


def test_what_follows_the_send_of_an_answered_stop_is_not_required(build) -> None:
    """A Locust storm: the router's STOP write took 330 ms to be answered.  The fleet drains up to the STOP's
    ``stopped_at_ms``, taken when the write was sent, so what was emitted between the send and the answer was
    never certainly STARTED; what was emitted before the send still is."""
    build.run_start()
    build.at(150, "event", "router", pk=PK, kind="START", status=200, written_ms=150)
    build.at(760, "event", "router", pk=PK, kind="STOP", status=200, sent_ms=420, written_ms=750)
    emitted(build, seqs=range(1, 8))  # seqs 1..7 at 100..700: 2..4 before the send, 5..7 before the answer
    build.persist(505, PK, "worker-1", 2, 3)

    result = check_sequences(build.at(5000, "run.stop", "harness").frame())

    assert result.valid is False and result.details["lost_ranges"] == {PK: [[4, 4]]}


def test_a_pk_first_seen_stopping_was_started_until_then(build) -> None:
    build.run_start().at(550, "conn.stopped", "harness", pk=PK)
    emitted(build)
    build.persist(505, PK, "worker-1", 1, 4).at(5000, "run.stop", "harness")

    result = check_sequences(build.frame())

    assert result.details["emitted"] == 5 and result.details["lost_ranges"] == {PK: [[5, 5]]}


def test_seqs_emitted_within_the_settle_time_are_unseen_at_the_end_not_lost(build) -> None:
    emitted(build.run_start())
    build.persist(805, PK, "worker-1", 1, 8).at(1050, "run.stop", "harness")

    default = check_sequences(build.frame())  # settle: one lease (2000 ms) before run.stop
    short = check_sequences(build.frame(), settle_ms=10)

    assert default.valid is True
    assert default.details["unseen_at_end"] == 2 and default.details["lost_sequences"] == 0
    assert short.valid is False
    assert short.details["lost_ranges"] == {PK: [[9, 10]]} and short.details["unseen_at_end"] == 0


def test_the_runners_settle_start_is_the_horizon_when_it_recorded_one(build) -> None:
    """Explore seed 4045: a survivor still catching up after its last fault took longer than a lease to
    settle; the runner waited until what was emitted before its settle began (650 here) was stored, and
    only that is judged.  A hole before it is still a loss."""
    emitted(build.run_start())
    build.persist(605, PK, "worker-1", 1, 6).at(5000, "run.stop", "harness", settled_t=650)

    settled = check_sequences(build.frame())

    assert settled.valid is True and settled.details["horizon_t"] == 650
    assert settled.details["unseen_at_end"] == 4 and settled.details["lost_sequences"] == 0
    assert check_sequences(build.frame(), settle_ms=2000).details["lost_ranges"] == {PK: [[7, 10]]}


def test_a_hole_before_the_settle_start_is_lost(build) -> None:
    emitted(build.run_start())
    build.persist(305, PK, "worker-1", 1, 2).persist(605, PK, "worker-1", 4, 6)
    build.at(5000, "run.stop", "harness", settled_t=650)

    result = check_sequences(build.frame())

    assert result.valid is False and result.details["lost_ranges"] == {PK: [[3, 3]]}


def test_a_missing_seq_an_unknown_write_may_have_stored_makes_it_unknown(build) -> None:
    emitted(build.run_start(), seqs=range(1, 4))
    build.persist(305, PK, "worker-1", 1, 2).persist(310, PK, "worker-1", 3, outcome="info")
    build.at(5000, "run.stop", "harness")

    result = check_sequences(build.frame())

    assert result.valid == UNKNOWN
    assert result.details["possibly_persisted"] == 1 and result.details["lost_sequences"] == 0


def test_a_lower_seq_after_a_higher_one_within_one_ownership_is_out_of_order(build) -> None:
    emitted(build.run_start(), seqs=range(1, 6))
    build.acquire(50, PK, "worker-1", 2050)
    build.persist(505, PK, "worker-1", 4, 5).persist(510, PK, "worker-1", 1, 3)  # out of order
    build.acquire(600, PK, "worker-1", 2600, epoch=2)
    build.persist(605, PK, "worker-1", 2, epoch=2)  # a new ownership starts afresh
    build.at(5000, "run.stop", "harness")

    result = check_sequences(build.frame())

    assert result.details["out_of_order"] == 1 and row_of(result)["out_of_order"] == 1
    assert result.valid is False  # seq 2 stored twice


def test_no_emit_events_cannot_be_judged(build) -> None:
    build.run_start().persist(100, PK, "worker-1", 1)

    assert check_sequences(build.frame()).valid == UNKNOWN


def test_a_seq_that_is_not_a_sequence_number_is_left_out_and_makes_the_verdict_unknown(build) -> None:
    emitted(build.run_start(), seqs=range(1, 4))
    build.emit(PK, -5, 350).emit(PK, 2.5, 360).emit(PK, 2**40, 370)
    build.persist(305, PK, "worker-1", 1, 3).persist(380, PK, "worker-1", -1, 2)
    build.at(5000, "run.stop", "harness")

    result = check_sequences(build.frame())

    assert result.valid == UNKNOWN and "4 emit or msg.persist events" in result.details["reason"]
    assert result.details["emitted"] == 3 and result.details["lost_sequences"] == 0


def test_each_stream_is_judged_apart(build) -> None:
    emitted(build.run_start(), seqs=range(1, 4))
    emitted(build, pk="CONN#b", seqs=range(1, 4))
    build.persist(305, PK, "worker-1", 1, 3).persist(305, "CONN#b", "worker-2", 1, 2)
    build.at(5000, "run.stop", "harness")

    result = check_sequences(build.frame())

    assert result.details["lost_ranges"] == {"CONN#b": [[3, 3]]}
    assert [(r["pk"], r["lost"]) for r in result.tables["sequences"]] == [(PK, 0), ("CONN#b", 1)]


def scanned(build, stored: list[int], last_seq: int | None, **connection):
    """Seqs 1..10 emitted at 100..1000, the run stopped at 5000, then the final scan: ``stored`` in the
    table, the connection item checkpointed at ``last_seq`` (None: no item)."""
    emitted(build.run_start()).at(5000, "run.stop", "harness")
    build.at(5001, "final.persisted", "harness", pk=PK, seqs=stored)
    if last_seq is not None:
        build.at(5002, "final.connection", "harness", pk=PK, desired_state="STARTED", last_seq=last_seq,
                 **connection)
    return build


def test_a_tail_the_store_had_not_reached_at_the_final_scan_is_behind_not_lost(build) -> None:
    """Explore seeds 7104, 7108, 7109: the store fell behind a takeover's backlog on a loaded machine.  What
    nothing stored follows, above the checkpoint a resume starts from, was not yet stored: behind, which
    cannot be judged lost (unknown), and is not counted in ``lost_sequences``."""
    result = check_sequences(scanned(build, [1, 2, 3, 4, 5, 6], last_seq=4).frame())

    assert result.valid == UNKNOWN and "behind" in result.details["reason"]
    assert (result.details["lost_sequences"], result.details["behind_at_end"]) == (0, 4)
    assert result.details["behind_ranges"] == {PK: [[7, 10]]} and row_of(result)["behind"] == 4


def test_a_hole_the_store_has_moved_past_is_a_gap(build) -> None:
    result = check_sequences(scanned(build, [1, 2, 3, 5, 6], last_seq=2).frame())

    assert result.valid is False and result.details["lost_ranges"] == {PK: [[4, 4]]}
    assert result.details["behind_ranges"] == {PK: [[7, 10]]}


def test_a_missing_tail_the_checkpoint_has_passed_is_a_gap(build) -> None:
    """A resume starts after the checkpoint: what it passed is never read again."""
    result = check_sequences(scanned(build, [1, 2, 3, 4, 5, 6], last_seq=8).frame())

    assert result.valid is False and result.details["lost_ranges"] == {PK: [[7, 8]]}
    assert result.details["behind_at_end"] == 2


def test_a_missing_tail_the_upstream_could_no_longer_replay_is_a_gap(build) -> None:
    scanned(build, [1, 2, 3, 4, 5, 6], last_seq=6)
    build.at(4000, "sub.open", "upstream", pk=PK, session="s", worker="worker-2", from_seq=7, replay_from=9)

    result = check_sequences(build.frame())

    assert result.valid is False and result.details["lost_ranges"] == {PK: [[7, 8]]}


def test_without_the_connection_item_a_missing_tail_is_lost(build) -> None:
    result = check_sequences(scanned(build, [1, 2, 3, 4, 5, 6], last_seq=None).frame())

    assert result.valid is False and result.details["lost_ranges"] == {PK: [[7, 10]]}


def test_a_write_answered_after_the_final_scan_began_is_behind_not_a_gap(build) -> None:
    """The scan read the table before that write landed: stored, late."""
    scanned(build, [1, 2, 3, 5, 6, 7, 8, 9, 10], last_seq=2)
    build.persist(5003, PK, "worker-1", 4, 4, sent=4900)

    result = check_sequences(build.frame())

    assert result.valid == UNKNOWN and result.details["behind_ranges"] == {PK: [[4, 4]]}
    assert result.details["lost_sequences"] == 0
