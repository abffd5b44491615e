"""Tests of harness.region.automation's failback decision: it moves the activation back only after the
primary's check passes and replication has caught up for the whole hysteresis, and any break restarts the
wait."""

from __future__ import annotations

from harness.region.automation import Failback

GOOD = {"answers_primary": True, "primary_healthy": True, "behind_ms": 100.0}


def test_a_failback_waits_for_replication_caught_up_for_the_whole_hysteresis() -> None:
    failback = Failback(lag_bound_ms=300, hysteresis_s=2.0)
    assert not failback.observe(0.0, **{**GOOD, "behind_ms": 4_000.0})  # a backlog from the outage
    assert not failback.observe(1.0, **GOOD)       # caught up from here
    assert not failback.observe(2.5, **GOOD)
    assert failback.observe(3.0, **GOOD)           # 2 s without a break


def test_each_break_restarts_the_wait() -> None:
    for broken in ({"answers_primary": False}, {"primary_healthy": False}, {"behind_ms": 301.0}):
        failback = Failback(lag_bound_ms=300, hysteresis_s=2.0)
        assert not failback.observe(0.0, **GOOD)
        assert not failback.observe(1.0, **{**GOOD, **broken}), broken
        assert not failback.observe(2.5, **GOOD), broken  # 1.5 s since the break
        assert failback.observe(4.5, **GOOD), broken


def test_both_regions_unhealthy_never_fail_back() -> None:
    """Route 53 answers the primary when both checks fail: that answer alone moves nothing."""
    failback = Failback(lag_bound_ms=300, hysteresis_s=2.0)
    assert not any(failback.observe(t, **{**GOOD, "primary_healthy": False}) for t in (0.0, 5.0, 50.0))
