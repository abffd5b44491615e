"""Tests of harness.region.automation's decisions: the failback moves the activation back only after the
primary's check has passed for the whole hysteresis (a break restarts the wait) and the 90th percentile of
replication's reports over that window is within the lag's 99th percentile (one write in the tail does not
hold it back, a backlog does); the automation fails over on the primary's health, and back without waiting
for replication when the standby's store is out; after its activation wait a move waits for what the target
lacks of the old region's writes while they can still arrive, up to a bound."""

from __future__ import annotations

from collections.abc import Callable

from harness.region.automation import (
    ABANDON,
    ACTIVATE,
    FAILBACK_QUANTILE,
    PRIMARY,
    REPLICATION_WAIT_P99S,
    STANDBY,
    UNREPLICATED,
    WAIT,
    Automation,
    Failback,
    after_wait,
    fit_after_wait,
)


def every_tenth(start: float, end: float, behind_ms: float) -> list[tuple[float, float]]:
    """A report each 0.1 s from ``start`` to ``end`` (inclusive), each ``behind_ms``."""
    return [(round(start + i / 10, 3), behind_ms) for i in range(round((end - start) * 10) + 1)]


def test_one_report_over_the_lags_p99_among_many_under_it_fails_back_now() -> None:
    """About 1 % of writes take longer than the lag's 99th percentile: at tens of writes a second a window of
    reports often holds one over the bound.  Every report within the bound (the old rule) restarted the wait
    at each; the 90th percentile lets one through."""
    assert FAILBACK_QUANTILE == 0.9
    failback = Failback(lag_bound_ms=300, hysteresis_s=2.0)
    assert not failback.observe(0.0, True, [(0.0, 120.0)])
    window = [(t, 350.0 if t == 1.0 else 120.0) for t, _ in every_tenth(0.1, 2.0, 0)]
    assert not failback.observe(1.9, True, window[:-1])  # the check has not passed for 2 s yet
    assert failback.observe(2.0, True, window[-1:])


def test_a_window_whose_90th_percentile_is_over_the_bound_does_not_fail_back_until_it_is_within() -> None:
    """A backlog draining (an outage's writes delivered) holds every report over the bound until it has
    drained: with more than a tenth of the window's reports over it, no failback; once the window holds at
    most a tenth, the failback."""
    failback = Failback(lag_bound_ms=300, hysteresis_s=2.0)
    assert not failback.observe(0.0, True, every_tenth(0.0, 0.0, 4_000.0))
    assert not failback.observe(0.4, True, every_tenth(0.1, 0.4, 4_000.0))  # draining until 0.4 s
    assert not failback.observe(2.05, True, every_tenth(0.5, 2.0, 120.0))  # 0.1-0.4: 4 of 20 over
    assert not failback.observe(2.15, True, every_tenth(2.1, 2.1, 120.0))  # 0.2-0.4: 3 of 20 over
    assert failback.observe(2.25, True, every_tenth(2.2, 2.2, 120.0))      # 0.3-0.4: 2 of 20 over


def test_a_break_in_the_primarys_check_restarts_the_wait() -> None:
    failback = Failback(lag_bound_ms=300, hysteresis_s=2.0)
    assert not failback.observe(0.0, True, every_tenth(0.0, 0.0, 120.0))
    assert not failback.observe(1.0, False, every_tenth(0.1, 1.0, 120.0))
    assert not failback.observe(1.1, True, every_tenth(1.1, 1.1, 120.0))
    assert not failback.observe(3.0, True, every_tenth(1.2, 3.0, 120.0))  # 1.9 s since the check passed again
    assert failback.observe(3.1, True, every_tenth(3.1, 3.1, 120.0))


def test_no_report_in_the_window_is_not_known_to_have_caught_up() -> None:
    failback = Failback(lag_bound_ms=300, hysteresis_s=2.0)
    assert not failback.observe(0.0, True, [(0.0, 120.0)])
    assert not failback.observe(2.5, True)  # the last report is older than the window


def test_both_regions_unhealthy_never_fail_back() -> None:
    """Route 53 answers the primary when both checks fail: only the primary's own check moves it back."""
    failback = Failback(lag_bound_ms=300, hysteresis_s=2.0)
    assert not any(failback.observe(t, False, [(t, 100.0)]) for t in (0.0, 5.0, 50.0))


def automation() -> Automation:
    return Automation(Failback(lag_bound_ms=300, hysteresis_s=2.0))


def test_the_automation_fails_over_on_the_primarys_health_alone_while_the_standbys_store_answers() -> None:
    """Seed 21: a region cut and the standby's gray failure together, both checks failing; Route 53 answers
    the primary, which an automation following the answer kept active (nothing consumed, 1,566 lost).  The
    standby's failing check says only that clients cannot reach its API: the primary's failing check moves
    the activation while the standby's control store answers, and not while it does not."""
    moving = automation()
    assert moving.step(0.0, primary_healthy=False, reports=[(0.0, 5_000.0)], standby_answers=lambda: True) == STANDBY
    assert moving.active == STANDBY
    assert moving.step(0.1, primary_healthy=False, reports=[(0.1, 5_000.0)],
            standby_answers=lambda: True) is None  # moved
    store_out = automation()
    assert store_out.step(0.0, primary_healthy=False, reports=[(0.0, 0.0)], standby_answers=lambda: False) is None
    assert store_out.active == PRIMARY
    asked: list[bool] = []
    healthy = automation()  # a healthy primary: the standby is not even asked
    assert healthy.step(0.0, primary_healthy=True, reports=[(0.0, 0.0)],
            standby_answers=lambda: asked.append(True) or True) \
        is None
    assert asked == []


def test_the_automation_fails_back_through_failback_and_again_after_a_failover_it_gave_up() -> None:
    moved = automation()
    assert moved.step(0.0, primary_healthy=False, reports=[(0.0, 0.0)], standby_answers=lambda: True) == STANDBY
    assert moved.step(1.0, primary_healthy=True, reports=[(1.0, 100.0)], standby_answers=lambda: True) is None
    assert moved.step(3.0, primary_healthy=True, reports=[(3.0, 100.0)], standby_answers=lambda: True) == PRIMARY
    moved.gave_up(PRIMARY)  # the primary failed during the activation wait: no region is active
    assert moved.active is None
    assert moved.step(3.5, primary_healthy=False, reports=[(3.5, 0.0)], standby_answers=lambda: True) == STANDBY
    moved.gave_up(PRIMARY)  # a give-up of an earlier move changes nothing decided since
    assert moved.active == STANDBY


def test_after_the_activation_wait_a_target_that_can_no_longer_take_it_is_given_up() -> None:
    """Seed 23: the failover already under way turned its target On though it could no longer serve.  After
    the wait the target is read again: the primary needs its check passing, the standby its control store
    answering (its own check failing does not stop it)."""
    assert fit_after_wait(PRIMARY, primary_healthy=True, standby_answers=lambda: False)
    assert not fit_after_wait(PRIMARY, primary_healthy=False, standby_answers=lambda: True)
    assert fit_after_wait(STANDBY, primary_healthy=False, standby_answers=lambda: True)
    assert fit_after_wait(STANDBY, primary_healthy=True, standby_answers=lambda: True)  # failback decides that
    assert not fit_after_wait(STANDBY, primary_healthy=False, standby_answers=lambda: False)


def test_with_the_standby_out_the_automation_fails_back_at_once_without_waiting_for_replication() -> None:
    """The mirror of seed 21: the standby active, then cut off (or its DynamoDB out) while the primary is
    healthy.  Its writes can never be delivered until it returns, so the backlog holds the failback by
    replication for as long as it is out (nothing consumes).  The standby's store not answering for the
    hysteresis moves the activation back, the primary's check passing, without waiting for replication;
    not while the primary's check fails, not on one read that did not answer, and not while the store
    answers (the healthy case waits for replication, as before)."""
    out = automation()
    assert out.step(0.0, primary_healthy=False, reports=[(0.0, 0.0)], standby_answers=lambda: True) == STANDBY
    assert out.step(5.0, primary_healthy=False, reports=[(5.0, 4_000.0)], standby_answers=lambda: False) is None
    assert out.step(6.0, primary_healthy=True, reports=[(6.0, 4_000.0)], standby_answers=lambda: False) is None
    assert out.step(7.0, primary_healthy=True, reports=[(7.0, 4_000.0)],
            standby_answers=lambda: True) is None  # a break
    assert out.step(7.5, primary_healthy=True, reports=[(7.5, 4_000.0)], standby_answers=lambda: False) is None
    assert out.step(9.0, primary_healthy=True, reports=[(9.0, 4_000.0)], standby_answers=lambda: False) is None
    assert out.step(9.5, primary_healthy=True, reports=[(9.5, 4_000.0)], standby_answers=lambda: False) == PRIMARY
    assert (out.active, out.forced) == (PRIMARY, True)
    assert out.step(9.6, primary_healthy=True, reports=[(9.6, 4_000.0)], standby_answers=lambda: False) is None  # moved
    answering = automation()
    assert answering.step(0.0, primary_healthy=False, reports=[(0.0, 0.0)], standby_answers=lambda: True) == STANDBY
    assert not any(answering.step(t, primary_healthy=True, reports=[(t, 4_000.0)], standby_answers=lambda: True)
                   for t in (6.0, 9.0, 30.0))  # replication behind: wait
    assert answering.step(31.0, primary_healthy=True, reports=[(31.0, 100.0)], standby_answers=lambda: True) is None
    assert answering.step(33.0, primary_healthy=True, reports=[(33.0, 100.0)], standby_answers=lambda: True) == PRIMARY
    assert (answering.active, answering.forced) == (PRIMARY, False)


def test_a_failover_given_up_with_the_standby_out_fails_back_once_the_primary_is_healthy() -> None:
    """Both regions out: the failover to the standby gave up (no region active); the primary heals while the
    standby is still out, and the activation goes back to it without waiting for the backlog."""
    stranded = automation()
    assert stranded.step(0.0, primary_healthy=False, reports=[(0.0, 0.0)], standby_answers=lambda: True) == STANDBY
    stranded.gave_up(STANDBY)
    assert stranded.step(8.0, primary_healthy=True, reports=[(8.0, 6_000.0)], standby_answers=lambda: False) is None
    assert stranded.step(10.0, primary_healthy=True, reports=[(10.0, 6_000.0)],
            standby_answers=lambda: False) == PRIMARY
    assert stranded.forced


def test_the_standby_is_asked_only_while_a_failback_waits_for_replication() -> None:
    asked: list[float] = []
    moved = automation()
    assert moved.step(0.0, primary_healthy=False, reports=[(0.0, 0.0)], standby_answers=lambda: True) == STANDBY
    for t, behind in ((1.0, 100.0), (2.0, 4_000.0)):
        moved.step(t, primary_healthy=True, reports=[(t, behind)], standby_answers=lambda t=t: asked.append(t) or True)
    assert asked == [2.0]


def test_the_standby_out_before_the_primary_failed_again_counts_only_from_the_primarys_return() -> None:
    again = automation()
    assert again.step(0.0, primary_healthy=False, reports=[(0.0, 0.0)], standby_answers=lambda: True) == STANDBY
    assert again.step(1.0, primary_healthy=True, reports=[(1.0, 4_000.0)], standby_answers=lambda: False) is None
    assert again.step(2.0, primary_healthy=False, reports=[(2.0, 4_000.0)], standby_answers=lambda: False) is None
    assert again.step(9.0, primary_healthy=True, reports=[(9.0, 4_000.0)], standby_answers=lambda: False) is None
    assert again.step(11.0, primary_healthy=True, reports=[(11.0, 4_000.0)], standby_answers=lambda: False) == PRIMARY


def test_a_gray_failover_with_writes_pending_is_not_activated_until_they_land() -> None:
    """A gray failure with replication lagging: the primary Off, its activation wait over, its DynamoDB
    answering, and the standby still lacking its last writes.  The failover waits for them (AWS's evacuation
    of a region: stop its writes, let replication drain, then switch) and turns the standby On once nothing
    is lacking; the primary's store is not even asked once nothing is."""
    asked: list[float] = []

    def primary_answers(t: float) -> Callable[[], bool]:
        return lambda: asked.append(t) or True

    assert [after_wait(True, lacking, primary_answers(t), waited_s=t, limit_s=0.6)
            for t, lacking in ((0.0, 5), (0.2, 2), (0.4, 0))] == [WAIT, WAIT, ACTIVATE]
    assert asked == [0.0, 0.2]
    assert REPLICATION_WAIT_P99S == 2.0


def test_a_failover_whose_old_regions_store_is_out_activates_at_once() -> None:
    """The primary cut off or its DynamoDB out: what it had not replicated cannot arrive, so nothing is
    waited for (a failover's RPO, as before); a target that can no longer take the activation is given up,
    whatever is lacking."""
    assert after_wait(True, 7, lambda: False, waited_s=0.0, limit_s=0.6) == ACTIVATE
    assert after_wait(False, 7, lambda: True, waited_s=0.0, limit_s=0.6) == ABANDON
    assert after_wait(False, 0, lambda: True, waited_s=0.0, limit_s=0.6) == ABANDON


def test_a_failover_whose_replication_wait_reaches_its_bound_activates_and_says_so() -> None:
    """A replication pause under a gray failure: what is lacking never lands.  At the bound the failover
    activates anyway, saying it is unreplicated (RPO by choice, which the history records); a bound of 0
    is no replication wait at all (the unsafe no-wait variant's): it activates without a word."""
    assert after_wait(True, 3, lambda: True, waited_s=0.59, limit_s=0.6) == WAIT
    assert after_wait(True, 3, lambda: True, waited_s=0.6, limit_s=0.6) == UNREPLICATED
    assert after_wait(True, 3, lambda: True, waited_s=0.0, limit_s=0.0) == ACTIVATE
