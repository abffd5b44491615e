"""Recovery phases computed exactly from hand-made fault histories."""

from __future__ import annotations

import pytest

from harness.checkers.recovery import PHASE_COLUMNS, check_recovery
from harness.checkers.result import UNKNOWN

PK = "CONN#a"


def owned_by_worker_1(build, *, bound_ms: float | None = 5000.0, worker_level: bool = False,
                      renew_until: float = 4600.0, session_end: float | None = 5010.0):
    """worker-1 owns PK from 100 (lease 2000 ms, renewed every 500 ms), consumes from 200 and persists
    every seq live; the upstream emits seq k at k*100 until 12000; the run stops at 12500."""
    build.run_start(bound_ms=bound_ms, profile="hardened" if worker_level else "blog")
    build.at(0, "conn.started", "harness", pk=PK)
    for seq in range(1, 121):
        build.emit(PK, seq, seq * 100)
    build.acquire(100, PK, "worker-1", 2100)
    t = 600.0 if not worker_level else 500.0
    while t <= renew_until:
        build.renew(t, "worker-1", t + 2000, pk=None if worker_level else PK)
        t += 500
    build.session(PK, "worker-1", 200, session_end, reason="error")
    for seq in range(1, 50):
        build.persist(seq * 100 + 5, PK, "worker-1", seq)
    build.at(12500, "run.stop", "harness")
    return build


def taken_over_by_worker_2(build, claim_t: float = 6700, worker: str = "worker-2"):
    """``worker`` claims at ``claim_t``, connects 100 ms later, persists the backlog 50..71 every 10 ms from
    200 ms after the claim, then every seq live."""
    build.acquire(claim_t, PK, worker, claim_t + 2000, epoch=2)
    build.session(PK, worker, claim_t + 100)
    for seq in range(50, 72):
        build.persist(claim_t + 200 + (seq - 50) * 10, PK, worker, seq, epoch=2)
    for seq in range(72, 121):
        build.persist(seq * 100 + 5, PK, worker, seq, epoch=2)
    return build


def only_row(result) -> dict:
    [row] = result.tables["phases"]
    assert set(row) == set(PHASE_COLUMNS)
    return row


def test_a_crash_takeover_has_every_phase_exactly(build) -> None:
    taken_over_by_worker_2(owned_by_worker_1(build).fault(5000, "kill", "worker-1"))

    result = check_recovery(build.frame())
    row = only_row(result)

    assert result.valid is True
    assert (row["pk"], row["old_worker"], row["new_worker"], row["t0"], row["old_end_t"]) == (
        PK, "worker-1", "worker-2", 5000, 5010)
    # detect: the last renew (4600) promised 6600; the highest seq emitted before the connect (6800) is 67,
    # which worker-2 persisted at 6900 + 17 * 10
    assert [row[f"{p}_t"] for p in ("detect", "claim", "connect", "resume", "caught_up")] == [
        6600, 6700, 6800, 6900, 7070]
    assert [row[f"{p}_ms"] for p in ("detect", "claim", "connect", "resume", "caught_up")] == [
        1600, 1700, 1800, 1900, 2070]
    assert [row[f"step_{p}_ms"] for p in ("detect", "claim", "connect", "resume", "caught_up")] == [
        1600, 100, 100, 100, 170]
    assert (row["gap_ms"], row["recovery_ms"], row["within_bound"]) == (1790, 2070, True)
    assert (row["disrupted"], row["reconnect_in_place"], row["recovered"], row["stopped"]) == (
        True, False, True, False)
    assert result.details["recovery_ms"] == {"p50": 2070, "p95": 2070, "max": 2070}
    assert result.details["phases_ms"]["claim"] == {"p50": 1700, "p95": 1700, "max": 1700}
    assert result.details["phases_ms"]["gap"]["max"] == 1790


def test_worker_level_leases_detect_at_the_expiry_plus_the_clock_tolerance(build) -> None:
    owned_by_worker_1(build, worker_level=True, renew_until=4500).fault(5000, "kill", "worker-1")
    taken_over_by_worker_2(build)

    row = only_row(check_recovery(build.frame()))

    assert row["detect_t"] == 4500 + 2000 + 100  # config clock_tolerance_ms


def test_a_release_detects_at_once(build) -> None:
    owned_by_worker_1(build).fault(5000, "term", "worker-1")
    build.at(5100, "lease.release", "worker-1", pk=PK, worker="worker-1", epoch=1, outcome="ok")
    taken_over_by_worker_2(build, claim_t=5300)

    row = only_row(check_recovery(build.frame()))

    assert (row["detect_t"], row["claim_t"], row["step_claim_ms"]) == (5100, 5300, 200)


def test_a_confirmed_death_notice_detects_at_the_burial(build) -> None:
    """A death notice buried worker-1's incarnation 100 ms after the kill, long before its lease lapsed (6600):
    detected then.  A refuted notice, or one burying someone else, detects nothing."""
    owned_by_worker_1(build, worker_level=True, renew_until=4500).fault(5000, "kill", "worker-1")
    build.at(5050, "death.notice", "worker-3", worker="worker-3", task="t/other", outcome="refuted", buried=[])
    build.at(5080, "death.notice", "worker-3", worker="worker-3", task="t/x", outcome="confirmed",
             buried=["worker-3@old"])
    build.at(5100, "death.notice", "worker-2", worker="worker-2", task="t/1", outcome="confirmed",
             buried=["worker-1"])
    taken_over_by_worker_2(build, claim_t=5300)

    row = only_row(check_recovery(build.frame()))

    assert (row["detect_t"], row["claim_t"]) == (5100, 5300)


def test_a_reconnect_in_place_has_no_claim(build) -> None:
    owned_by_worker_1(build, renew_until=12000).fault(5000, "partition_upstream", "worker-1", stop_t=5400)
    build.session(PK, "worker-1", 5500)
    for seq in range(50, 60):
        build.persist(5600 + (seq - 50) * 10, PK, "worker-1", seq)

    row = only_row(check_recovery(build.frame()))

    assert (row["claim_t"], row["detect_t"], row["new_worker"], row["reconnect_in_place"]) == (
        None, None, "worker-1", True)
    # highest seq emitted before 5500 is 54, persisted at 5600 + 4 * 10
    assert (row["connect_t"], row["resume_t"], row["caught_up_t"], row["gap_ms"]) == (5500, 5600, 5640, 490)
    assert row["step_connect_ms"] == 500  # steps skip the phases that did not happen


def test_the_same_worker_id_claiming_after_its_restart_is_a_claim(build) -> None:
    owned_by_worker_1(build).fault(5000, "kill", "worker-1")
    build.at(5500, "worker.start", "worker-1", worker="worker-1", profile="blog", pid=2)
    taken_over_by_worker_2(build, worker="worker-1")

    row = only_row(check_recovery(build.frame()))

    assert (row["new_worker"], row["claim_t"], row["detect_t"], row["reconnect_in_place"]) == (
        "worker-1", 6700, 6600, False)


@pytest.mark.parametrize(("new_gen", "claim_t"), [("b2", 6700), ("a1", None)])
def test_a_new_incarnation_of_the_same_worker_is_a_claim(build, new_gen: str, claim_t) -> None:
    # worker-1 (gen a1) stops consuming at 5010 after a network fault; an acquire at 6700 by gen b2 is a
    # takeover by another consumer, one by gen a1 is the same consumer getting its lease back
    build.run_start(bound_ms=5000).at(0, "conn.started", "harness", pk=PK)
    for seq in range(1, 121):
        build.emit(PK, seq, seq * 100)
    build.acquire(100, PK, "worker-1", 2100, gen="a1").session(PK, "worker-1", 200, 5010, reason="error", gen="a1")
    build.fault(5000, "partition_upstream", "worker-1", stop_t=5005)
    build.acquire(6700, PK, "worker-1", 8700, epoch=2, gen=new_gen).session(PK, "worker-1", 6800, gen=new_gen)
    for seq in range(50, 121):
        build.persist(6900 + (seq - 50) * 10, PK, "worker-1", seq, epoch=2, gen=new_gen)
    build.at(12500, "run.stop", "harness")

    row = only_row(check_recovery(build.frame()))

    assert (row["claim_t"], row["new_worker"]) == (claim_t, "worker-1")


def test_a_fault_on_another_component_affects_the_sessions_it_ended(build) -> None:
    owned_by_worker_1(build, renew_until=12000).fault(5000, "reset_upstream", "upstream", stop_t=5001)
    build.session(PK, "worker-1", 5100)
    build.persist(5150, PK, "worker-1", 50)
    build.session("CONN#b", "worker-2", 100, 9000)  # ends long after the fault: not affected

    row = only_row(check_recovery(build.frame()))

    assert (row["pk"], row["connect_t"], row["caught_up_t"], row["reconnect_in_place"]) == (
        PK, 5100, 5150, True)


def test_a_connection_the_fault_did_not_disrupt_recovers_when_it_catches_up(build) -> None:
    owned_by_worker_1(build, renew_until=12000, session_end=None).fault(5000, "latency", "worker-1",
                                                                        stop_t=6000)
    for seq in range(50, 61):
        build.persist(6100 + (seq - 50) * 10, PK, "worker-1", seq)

    row = only_row(check_recovery(build.frame()))

    # caught up: the highest seq emitted before the fault stopped (59) persisted at 6100 + 9 * 10
    assert (row["disrupted"], row["connect_t"]) == (False, None)
    assert (row["resume_t"], row["caught_up_t"]) == (6100, 6190)
    assert (row["recovery_ms"], row["gap_ms"]) == (1190, 0)


def test_a_session_ending_long_after_the_fault_does_not_make_it_disrupted(build) -> None:
    owned_by_worker_1(build, renew_until=12000, session_end=11000).fault(5000, "latency", "worker-1",
                                                                         stop_t=6000)
    build.session(PK, "worker-2", 11500)
    for seq in range(50, 61):
        build.persist(6100 + (seq - 50) * 10, PK, "worker-1", seq)

    row = only_row(check_recovery(build.frame()))

    assert (row["disrupted"], row["new_worker"], row["caught_up_t"], row["gap_ms"]) == (
        False, "worker-1", 6190, 0)


def test_a_handoff_long_after_the_old_owner_caught_up_is_not_the_faults_recovery(build) -> None:
    # a forged death notice changes nothing; worker-1 hands the stream to worker-2 for balance 6 s later
    owned_by_worker_1(build, renew_until=12000, session_end=11000).fault(5000, "forged_death_notice",
                                                                         "worker-1")
    build.at(11000, "lease.release", "worker-1", pk=PK, worker="worker-1", epoch=1, outcome="ok",
             reason="rebalance", to="worker-2")
    for seq in range(50, 111):
        build.persist(seq * 100 + 5, PK, "worker-1", seq)
    taken_over_by_worker_2(build, claim_t=11050)

    row = only_row(check_recovery(build.frame()))

    # caught up when seq 50 (the head at the notice) persisted at 5005, not when worker-2 caught up at 11xxx
    assert (row["disrupted"], row["new_worker"], row["claim_t"]) == (False, "worker-1", None)
    assert (row["caught_up_t"], row["recovery_ms"]) == (5005, 5)


def test_a_stream_another_worker_already_consumed_when_the_fault_began_was_not_disrupted(build) -> None:
    # worker-2 took the stream at 3000 while worker-1, superseded (a zombie), read on; a partition of
    # worker-1 at 5000 cuts its session, but worker-2 has been consuming it throughout
    owned_by_worker_1(build, renew_until=12000, session_end=5200).fault(5000, "partition_aws", "worker-1",
                                                                       stop_t=6000)
    build.acquire(3000, PK, "worker-2", 5000, epoch=2).session(PK, "worker-2", 3010)
    for seq in range(30, 121):
        build.persist(seq * 100 + 5, PK, "worker-2", seq, epoch=2)

    row = only_row(check_recovery(build.frame()))

    # caught up when worker-2 stored seq 59 (the head when the partition ended) at 5905
    assert (row["disrupted"], row["new_worker"], row["claim_t"]) == (False, "worker-2", None)
    assert (row["caught_up_t"], row["recovered"]) == (5905, True)


def test_a_pause_its_session_survives_recovers_on_that_session(build) -> None:
    owned_by_worker_1(build, renew_until=12000, session_end=None)
    build.fault(5000, "pause", "worker-1", stop_t=5800)
    for seq in range(50, 60):
        build.persist(5900 + (seq - 50) * 10, PK, "worker-1", seq)

    row = only_row(check_recovery(build.frame()))

    # not consuming while frozen: the gap is the pause; caught up with seq 57 (emitted before 5800)
    assert (row["disrupted"], row["old_end_t"], row["gap_ms"]) == (False, 5000, 800)
    assert (row["resume_t"], row["caught_up_t"], row["recovery_ms"]) == (5900, 5970, 970)


def test_a_paused_worker_that_wakes_and_leaves_is_taken_over(build) -> None:
    owned_by_worker_1(build, session_end=8850).fault(5000, "pause", "worker-1", stop_t=8800)
    taken_over_by_worker_2(build)

    row = only_row(check_recovery(build.frame()))

    assert (row["disrupted"], row["new_worker"], row["old_end_t"], row["gap_ms"]) == (
        True, "worker-2", 5000, 1800)


def test_a_connection_nobody_takes_over_never_recovers(build) -> None:
    owned_by_worker_1(build).fault(5000, "kill", "worker-1")

    bounded = check_recovery(build.frame())
    row = only_row(bounded)

    assert (row["recovered"], row["recovery_ms"], row["claim_t"], row["gap_ms"], row["within_bound"]) == (
        False, None, None, None, False)
    assert row["detect_t"] == 6600  # the lease lapsed; nobody claimed it
    assert bounded.valid is False and bounded.details["unrecovered"] == 1
    assert bounded.details["never_recovered"][0]["pk"] == PK


def test_never_recovering_without_a_bound_is_unknown(build) -> None:
    owned_by_worker_1(build, bound_ms=None).fault(5000, "kill", "worker-1")

    assert check_recovery(build.frame()).valid == UNKNOWN


def test_a_connection_stopped_during_its_recovery_is_not_judged(build) -> None:
    owned_by_worker_1(build).fault(5000, "kill", "worker-1").at(5500, "conn.stopped", "harness", pk=PK)

    result = check_recovery(build.frame())

    assert result.valid is True and only_row(result)["stopped"] is True
    assert result.details["stopped"] == 1 and result.details["recovery_ms"]["max"] is None


def test_a_connection_stopped_before_the_fault_is_not_judged(build) -> None:
    """A worker still consuming a STOPPED stream breaks I5; nobody should take the stream over."""
    owned_by_worker_1(build).at(4000, "conn.stopped", "harness", pk=PK).fault(5000, "kill", "worker-1")

    result = check_recovery(build.frame())

    assert result.valid is True and only_row(result)["stopped"] is True


def test_only_the_connections_the_target_was_consuming_are_affected(build) -> None:
    taken_over_by_worker_2(owned_by_worker_1(build).fault(5000, "kill", "worker-1"))
    build.session("CONN#b", "worker-2", 100, 12000)
    build.session("CONN#c", "worker-1", 100, 4000)  # worker-1 had let it go before the fault

    result = check_recovery(build.frame())

    assert [row["pk"] for row in result.tables["phases"]] == [PK]
    assert result.details["faults"] == [{"fault": 0, "kind": "kill", "target": "worker-1", "start_t": 5000,
                                         "stop_t": None, "affected": 1}]


def test_the_kinds_filter_restricts_the_faults(build) -> None:
    taken_over_by_worker_2(owned_by_worker_1(build).fault(5000, "kill", "worker-1"))

    assert check_recovery(build.frame(), kinds={"pause"}).tables["phases"] == []


@pytest.mark.parametrize("target", ["*", "all"])
def test_a_fault_on_every_worker_affects_everything_they_consumed(build, target: str) -> None:
    taken_over_by_worker_2(owned_by_worker_1(build).fault(5000, "kill", target))

    assert [row["pk"] for row in check_recovery(build.frame()).tables["phases"]] == [PK]


def test_a_claimer_cut_off_before_catching_up_passes_the_recovery_on(build) -> None:
    # worker-3 claims at 6700 but never opens a session (its upstream is cut, then it dies); worker-2
    # takes over at 9000 and catches up: the stream recovered then, counted from the fault
    owned_by_worker_1(build).fault(5000, "term", "worker-1")
    build.acquire(6700, PK, "worker-3", 8700, epoch=2)
    taken_over_by_worker_2(build, claim_t=9000)

    result = check_recovery(build.frame())
    row = only_row(result)

    # the head emitted before worker-2's connect (9100) is 90; its first write after that reaches 91
    assert (row["new_worker"], row["claim_t"], row["connect_t"], row["caught_up_t"]) == (
        "worker-2", 9000, 9100, 9105)
    assert (row["recovered"], row["recovery_ms"], row["step_claim_ms"]) == (True, 4105, 9000 - 6600)
    assert result.valid is True


def test_a_chain_of_claimers_none_of_which_catches_up_never_recovers(build) -> None:
    owned_by_worker_1(build).fault(5000, "term", "worker-1")
    build.acquire(6700, PK, "worker-3", 8700, epoch=2)
    build.acquire(9000, PK, "worker-2", 11000, epoch=3)
    build.session(PK, "worker-2", 9100)

    result = check_recovery(build.frame())
    row = only_row(result)

    assert (row["new_worker"], row["claim_t"], row["recovered"]) == ("worker-3", 6700, False)
    assert result.valid is False
