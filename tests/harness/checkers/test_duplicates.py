"""I1 duplicate claims: overlapping sessions, zombie writes, zombie time, unknown outcomes, lease overlaps."""

from __future__ import annotations

import pytest

from harness.checkers.duplicates import check_duplicate_claims
from harness.checkers.result import UNKNOWN

PK = "CONN#a"


def test_a_clean_handover_is_valid(build) -> None:
    build.run_start().session(PK, "worker-1", 100, 1000).session(PK, "worker-2", 1100, 2000)
    build.persist(500, PK, "worker-1", 1).persist(1500, PK, "worker-2", 2)

    result = check_duplicate_claims(build.frame())

    assert result.valid is True
    assert result.details["duplicate_claims"] == 0 and result.details["duplicate_overlap_ms"] == 0
    assert not any(row["overlap"] for row in result.tables["claims"])


def test_two_workers_sessions_overlapping_are_one_claim_with_its_duration(build) -> None:
    build.run_start().session(PK, "worker-1", 100, 1500).session(PK, "worker-2", 1000, 2000)

    result = check_duplicate_claims(build.frame())

    assert result.valid is False
    assert result.details["duplicate_claims"] == 1
    assert result.details["duplicate_overlap_ms"] == 500
    [episode] = result.tables["episodes"]
    assert (episode["pk"], episode["worker_a"], episode["worker_b"]) == (PK, "worker-1", "worker-2")
    assert (episode["start"], episode["end"], episode["overlap_ms"]) == (1000, 1500, 500)
    assert episode["certain"] is True
    upstream = [row for row in result.tables["claims"] if row["source"] == "upstream"]
    assert [row["overlap"] for row in upstream] == [True, True]


def test_a_zombie_write_after_the_takeover_is_a_claim_of_zero_duration(build) -> None:
    build.run_start().session(PK, "worker-1", 100, 1000).session(PK, "worker-2", 1100, 3000)
    build.persist(1500, PK, "worker-1", 7)

    result = check_duplicate_claims(build.frame())

    assert result.valid is False
    assert result.details["duplicate_claims"] == 1 and result.details["duplicate_overlap_ms"] == 0
    [episode] = result.tables["episodes"]
    assert episode["writes"] == 1 and episode["start"] == episode["end"] == 1500
    writes = [row for row in result.tables["claims"] if row["source"] == "write"]
    assert [(row["worker"], row["start"], row["overlap"]) for row in writes] == [("worker-1", 1500, True)]


def test_a_burst_of_zombie_writes_is_one_claim_within_the_merge_gap(build) -> None:
    build.run_start().session(PK, "worker-1", 100, 1000).session(PK, "worker-2", 1100, 3000)
    for t in (1500, 1600, 1700):
        build.persist(t, PK, "worker-1", 7)

    assert check_duplicate_claims(build.frame()).details["duplicate_claims"] == 1  # gap: one lease (2000)
    assert check_duplicate_claims(build.frame(), merge_gap_ms=0).details["duplicate_claims"] == 3


def test_a_keepalive_zombie_that_read_nothing_after_the_takeover_is_zombie_time_not_a_claim(build) -> None:
    build.run_start()
    build.session(PK, "worker-1", 100, 4000, reason="keepalive_timeout", last_pong_t=1000)
    build.session(PK, "worker-2", 2500, 5000)

    result = check_duplicate_claims(build.frame())

    assert result.valid is True and result.details["duplicate_claims"] == 0
    assert result.details["zombie_sessions"] == 1
    assert result.details["zombie_ms"] == 3000
    assert result.details["zombie_overlapping_ms"] == 1500  # worker-2 consumed from 2500
    [zombie] = result.tables["zombies"]
    assert (zombie["cause"], zombie["start"], zombie["end"], zombie["overlaps_other"]) == (
        "keepalive_timeout", 1000, 4000, True)


def test_a_keepalive_zombie_whose_write_was_accepted_after_the_takeover_is_a_claim(build) -> None:
    build.run_start()
    build.session(PK, "worker-1", 100, 4000, reason="keepalive_timeout", last_pong_t=1000)
    build.session(PK, "worker-2", 2500, 5000).persist(3000, PK, "worker-1", 9)

    assert check_duplicate_claims(build.frame()).valid is False


def test_a_write_with_an_unknown_outcome_as_the_only_evidence_makes_it_unknown(build) -> None:
    build.run_start().session(PK, "worker-1", 100, 1000).session(PK, "worker-2", 1100, 3000)
    build.persist(1500, PK, "worker-1", 7, outcome="info")

    result = check_duplicate_claims(build.frame())

    assert result.valid == UNKNOWN
    assert result.details["duplicate_claims"] == 0 and result.details["possible_claims"] == 1


def unknown_log_write_while_another_consumes(build, item_7: tuple[object, ...]):
    """worker-1's put of log item 7 (seqs 7..9, epoch 1) got no answer while worker-2 consumed; the stored log
    holds ``item_7`` (batch, kind, worker, gen, epoch, seq_from, seq_to, written_ms) at that number."""
    build.run_start().session(PK, "worker-1", 100, 1000).session(PK, "worker-2", 1100, 3000)
    build.persist(1500, PK, "worker-1", 7, 9, outcome="info", gen="g1", b=7)
    return build.log(3500, PK, item_7)


def test_a_log_write_of_unknown_outcome_whose_number_holds_anothers_item_never_landed(build) -> None:
    takers_mark = (7, "mark", "worker-2", "g2", 2, 7, 6, 1400)
    result = check_duplicate_claims(unknown_log_write_while_another_consumes(build, takers_mark).frame())

    assert result.valid is True
    assert (result.details["duplicate_claims"], result.details["possible_claims"]) == (0, 0)


def test_a_log_write_of_unknown_outcome_whose_own_item_is_stored_landed(build) -> None:
    own_batch = (7, "batch", "worker-1", "g1", 1, 7, 9, 1400)
    result = check_duplicate_claims(unknown_log_write_while_another_consumes(build, own_batch).frame())

    assert result.valid is False
    assert (result.details["duplicate_claims"], result.details["possible_claims"]) == (1, 0)


def test_a_certain_overlap_beats_an_unknown_one(build) -> None:
    build.run_start().session(PK, "worker-1", 100, 1200).session(PK, "worker-2", 1100, 3000)
    build.persist(2500, PK, "worker-1", 7, outcome="info")

    result = check_duplicate_claims(build.frame(), merge_gap_ms=0)

    assert result.valid is False
    assert (result.details["duplicate_claims"], result.details["possible_claims"]) == (1, 1)


def test_failed_writes_are_not_consuming(build) -> None:
    build.run_start().session(PK, "worker-1", 100, 1000).session(PK, "worker-2", 1100, 3000)
    build.persist(1500, PK, "worker-1", 7, outcome="fail")

    assert check_duplicate_claims(build.frame()).valid is True


def test_a_frozen_worker_that_wakes_and_leaves_at_once_is_zombie_time(build) -> None:
    build.run_start().fault(1000, "pause", "worker-1", stop_t=5900)
    build.session(PK, "worker-1", 100, 6000).session(PK, "worker-2", 3000, 8000)

    result = check_duplicate_claims(build.frame())

    assert result.valid is True
    causes = {(z["cause"], z["start"], z["end"]) for z in result.tables["zombies"]}
    assert causes == {("frozen", 1000, 5900), ("thaw_close", 5900, 6000)}


def test_a_frozen_worker_that_keeps_reading_after_it_wakes_is_a_claim_from_its_wake(build) -> None:
    build.run_start().fault(1000, "pause", "worker-1", stop_t=5900)
    build.session(PK, "worker-1", 100, 7000).session(PK, "worker-2", 3000, 8000)

    result = check_duplicate_claims(build.frame())

    assert result.valid is False
    [episode] = result.tables["episodes"]
    assert (episode["start"], episode["end"], episode["overlap_ms"]) == (5900, 7000, 1100)


def test_a_session_still_open_at_the_end_runs_to_the_last_event(build) -> None:
    build.run_start().session(PK, "worker-1", 100).session(PK, "worker-2", 1100, 2000).at(3000, "run.stop",
                                                                                          "harness")

    result = check_duplicate_claims(build.frame())

    assert result.details["duplicate_overlap_ms"] == 900


@pytest.mark.parametrize(("ending", "belief_end"), [
    ("lease.lost", 1500.0),
    ("lease.release", 1500.0),
    ("worker.stop", 1500.0),
])
def test_lease_overlaps_are_reported_beside_and_do_not_decide(build, ending: str, belief_end: float) -> None:
    build.run_start().acquire(100, PK, "worker-1", 2100).acquire(1000, PK, "worker-2", 3000, epoch=2)
    build.at(1500, ending, "worker-1", pk=PK, worker="worker-1", epoch=1, outcome="ok")
    build.session(PK, "worker-1", 200, 900).session(PK, "worker-2", 1100, 2900)

    result = check_duplicate_claims(build.frame())

    assert result.valid is True
    assert result.details["lease_overlaps"] == 1
    [overlap] = result.tables["lease_overlaps"]
    assert (overlap["start"], overlap["end"], overlap["duration_ms"]) == (1000, belief_end, belief_end - 1000)
    leases = [row for row in result.tables["claims"] if row["source"] == "lease"]
    assert [row["overlap"] for row in leases] == [True, True]


def test_a_lease_belief_survives_a_reconnect_in_place_but_not_a_final_close(build) -> None:
    build.run_start().acquire(100, PK, "worker-1", 2100)
    build.at(500, "ws.close", "worker-1", pk=PK, worker="worker-1", reason="error")
    build.at(600, "ws.open", "worker-1", pk=PK, worker="worker-1", epoch=1, outcome="ok")
    build.at(900, "ws.close", "worker-1", pk=PK, worker="worker-1", reason="stop")
    build.acquire(1000, PK, "worker-2", 3000, epoch=2).at(4000, "run.stop", "harness")

    result = check_duplicate_claims(build.frame())

    leases = [(row["worker"], row["start"], row["end"]) for row in result.tables["claims"]
              if row["source"] == "lease"]
    assert leases == [("worker-1", 100, 900), ("worker-2", 1000, 4000)]
    assert result.details["lease_overlaps"] == 0


def test_a_kill_fault_ends_the_killed_workers_beliefs(build) -> None:
    build.run_start().acquire(100, PK, "worker-1", 2100).fault(800, "kill", "worker-1")
    build.acquire(1000, PK, "worker-2", 3000, epoch=2)

    result = check_duplicate_claims(build.frame())

    assert result.details["lease_overlaps"] == 0


def test_two_incarnations_of_one_worker_overlapping_are_a_duplicate_claim(build) -> None:
    build.run_start().session(PK, "worker-1", 100, 3000, gen="a1").session(PK, "worker-1", 2000, 5000, gen="b2")

    result = check_duplicate_claims(build.frame())

    assert result.valid is False and result.details["duplicate_claims"] == 1
    [episode] = result.tables["episodes"]
    assert (episode["worker_a"], episode["worker_b"], episode["overlap_ms"]) == ("worker-1@a1", "worker-1@b2", 1000)


def test_one_incarnations_overlapping_sessions_are_not_a_claim(build) -> None:
    build.run_start().session(PK, "worker-1", 100, 3000, gen="a1").session(PK, "worker-1", 2000, 5000, gen="a1")
    build.persist(2500, PK, "worker-1", 3, gen="a1")

    assert check_duplicate_claims(build.frame()).valid is True


def test_events_without_gen_fall_back_to_the_worker_id(build) -> None:
    # an old fleet: no gen anywhere; a session with a gen beside a write without one is the same worker
    build.run_start().session(PK, "worker-1", 100, 3000).session(PK, "worker-1", 2000, 5000)
    build.session(PK, "worker-2", 6000, 7000, gen="c3").persist(6500, PK, "worker-2", 4)

    assert check_duplicate_claims(build.frame()).valid is True


def frozen_write(build, stored_by: str, newer_seq: int = 7):
    """worker-1 (epoch 1) builds a write of seq 7 at 900, then freezes 950..5000 (before its bytes leave, or
    after: the history cannot tell); worker-2 takes over (epoch 2) at 3000, consumes from 3100 and writes
    ``newer_seq`` ok at 3500 (sent 3400); worker-1's write is answered ok at 5010.  The final item of seq 7
    is ``stored_by``'s."""
    build.run_start().acquire(0, PK, "worker-1", 2000, epoch=1).session(PK, "worker-1", 100, 5020)
    build.fault(950, "pause", "worker-1", 5000).acquire(3000, PK, "worker-2", 5000, epoch=2)
    build.session(PK, "worker-2", 3100, 9000).persist(3500, PK, "worker-2", newer_seq, epoch=2, sent=3400)
    build.persist(5010, PK, "worker-1", 7, epoch=1, sent=900)
    epoch = 1 if stored_by == "worker-1" else 2
    items = [(7, stored_by, None, epoch, 900 if epoch == 1 else 3400)]
    if newer_seq != 7:
        items.append((newer_seq, "worker-2", None, 2, 3400))
    return build.stored(9500, PK, *items)


def test_a_write_frozen_between_sent_and_its_answer_that_landed_late_is_a_claim(build) -> None:
    result = check_duplicate_claims(frozen_write(build, stored_by="worker-1").frame())

    assert result.valid is False and result.details["duplicate_claims"] == 1
    [episode] = result.tables["episodes"]
    assert (episode["worker_a"], episode["worker_b"], episode["writes"]) == ("worker-1", "worker-2", 1)
    assert episode["start"] == 3400  # landed no earlier than the newer owner's write it overwrote


def test_a_frozen_write_the_newer_owner_rewrote_may_have_landed_late_a_possible_claim(build) -> None:
    result = check_duplicate_claims(frozen_write(build, stored_by="worker-2").frame())

    assert result.valid == UNKNOWN
    assert (result.details["duplicate_claims"], result.details["possible_claims"]) == (0, 1)


def test_a_frozen_write_nobody_rewrote_landed_before_the_takeover_and_is_not_a_claim(build) -> None:
    # worker-2 resumed above seq 7 (it was stored when worker-2 read the resume point): no overlap
    assert check_duplicate_claims(frozen_write(build, stored_by="worker-1", newer_seq=8).frame()).valid is True
