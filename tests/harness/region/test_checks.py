"""Tests of harness.region.checks over literal histories: each checker finds what broke, and finds nothing
in the same history with that one thing right (so each can fail)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.region.checks import (
    activation_overlaps,
    early_failbacks,
    flapping_moves,
    lost_starts,
    moves_while_unhealthy,
)

REGIONS = {"east": "us-east-1", "west": "us-west-2"}


def history(*events: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(list(events))


def control(t: float, region: str, state: str) -> dict[str, Any]:
    return {"t": t, "src": "route53", "type": "gate.state", "region": region, "state": state}


def health(t: float, region: str, healthy: bool) -> dict[str, Any]:
    return {"t": t, "src": "route53", "type": "health.check", "region": region, "healthy": healthy}


def stats(t: float, backlog: int, behind_ms: float) -> dict[str, Any]:
    return {"t": t, "src": "replication", "type": "replication.stats", "backlog": backlog, "behind_ms": behind_ms}


def test_two_regions_on_at_once_are_an_overlap_and_the_hold_is_no_region() -> None:
    """Two overlapping failovers (A: east Off, B: west Off, A: west On, B: east On) leave both On."""
    raced = history(control(0, "us-east-1", "On"), control(100, "us-east-1", "Off"),
                    control(100, "failover-hold", "On"), control(150, "us-west-2", "Off"),
                    control(2_100, "us-west-2", "On"), control(2_150, "us-east-1", "On"))
    assert activation_overlaps(raced, end_ms=9_000) == [
        {"from_ms": 2_150, "to_ms": 9_000, "regions": ["us-east-1", "us-west-2"]}]
    serialised = history(control(0, "us-east-1", "On"), control(100, "us-east-1", "Off"),
                         control(100, "failover-hold", "On"), control(2_100, "us-west-2", "On"))
    assert activation_overlaps(serialised, end_ms=9_000) == []


def test_an_activation_of_a_region_whose_check_fails_is_flagged_both_unhealthy_said() -> None:
    """Both regions unhealthy: Route 53 answers the primary again, and an automation following the answer
    turns the primary On though it cannot serve."""
    frame = history(health(1_000, "east", False), control(1_000, "us-east-1", "Off"), control(3_000, "us-west-2", "On"),
                    health(5_000, "west", False), control(5_000, "us-west-2", "Off"),
                    control(7_000, "us-east-1", "On"))
    assert moves_while_unhealthy(frame, REGIONS) == [{"t": 7_000, "region": "east", "both_unhealthy": True}]
    held = history(*[e for e in frame.to_dict("records") if e["t"] < 5_000])
    assert moves_while_unhealthy(held, REGIONS) == []


def fault(t: float, action: str, kind: str, target: str) -> dict[str, Any]:
    return {"t": t, "src": "harness", "type": f"fault.{action}", "kind": kind, "target": target}


def test_the_standby_activated_while_its_own_check_fails_is_no_finding_unless_its_store_was_out() -> None:
    """Seed 23: both regions' gray failures (both checks failing) and the standby activated: its failing check
    says only that clients cannot reach its API.  Activated while its region was cut off (its DynamoDB out
    too), it could not serve: a finding."""
    gray = history(fault(0, "start", "gray_failure", "east"), fault(0, "start", "gray_failure", "west"),
                   health(1_000, "east", False), control(1_000, "us-east-1", "Off"), health(1_000, "west", False),
                   control(3_000, "us-west-2", "On"))
    assert moves_while_unhealthy(gray, REGIONS) == []
    for kind in ("region_cut", "dynamodb_outage"):
        out = history(*gray.to_dict("records"), fault(2_000, "start", kind, "west"))
        assert moves_while_unhealthy(out, REGIONS) == [{"t": 3_000, "region": "west", "both_unhealthy": True}], kind
        back = history(*out.to_dict("records"), fault(2_500, "stop", kind, "west"))
        assert moves_while_unhealthy(back, REGIONS) == [], kind


def test_a_failback_before_replication_caught_up_for_the_whole_hysteresis_is_early() -> None:
    moves = [control(0, "us-east-1", "On"), control(1_000, "us-east-1", "Off"), control(3_000, "us-west-2", "On"),
             control(20_000, "us-west-2", "Off"), control(22_000, "us-east-1", "On")]
    behind = history(*moves, stats(19_000, 40, 100), stats(20_000, 40, 900), stats(21_000, 3, 150))
    assert early_failbacks(behind, "us-east-1", lag_bound_ms=500, hysteresis_ms=3_000, standby="west") == [
        {"t": 22_000, "reports": 3, "max_behind_ms": 900.0}]
    unknown = history(*moves)  # no report at all: not known to have caught up
    assert len(early_failbacks(unknown, "us-east-1", lag_bound_ms=500, hysteresis_ms=3_000, standby="west")) == 1
    caught_up = history(*moves, stats(19_000, 0, 100), stats(20_000, 0, 120), stats(21_000, 0, 150))
    assert early_failbacks(caught_up, "us-east-1", lag_bound_ms=500, hysteresis_ms=3_000, standby="west") == []


def test_activations_closer_than_the_hysteresis_are_flapping() -> None:
    frame = history(control(-10_000, "us-east-1", "On"), control(1_000, "us-east-1", "Off"),
                    control(3_000, "us-west-2", "On"), control(4_000, "us-west-2", "Off"),
                    control(6_000, "us-east-1", "On"))
    assert flapping_moves(frame, min_gap_ms=5_000) == [{"t": 6_000, "region": "us-east-1", "gap_ms": 3_000}]
    assert flapping_moves(frame, min_gap_ms=2_000) == []


def event(t: float, src: str, kind: str, pk: str, status: int = 200) -> dict[str, Any]:
    return {"t": t, "src": src, "type": "event", "kind": kind, "pk": pk, "status": status}


def acquire(t: float, src: str, pk: str) -> dict[str, Any]:
    return {"t": t, "src": src, "type": "lease.acquire", "outcome": "ok", "pk": pk}


def test_a_start_acknowledged_during_the_failover_that_the_active_region_never_took_is_lost() -> None:
    frame = history(event(11_000, "east-router", "START", "CONN#a"),   # acknowledged by the old region: lost
                    event(12_000, "west-router", "START", "CONN#b"),   # taken by the standby
                    acquire(13_000, "west-worker-1", "CONN#b"),
                    event(12_500, "east-router", "START", "CONN#c", status=503),  # refused: not acknowledged
                    event(12_600, "west-router", "START", "CONN#d"),
                    event(12_700, "west-router", "STOP", "CONN#d"),    # stopped again: nothing to take
                    event(5_000, "east-router", "START", "CONN#e"),    # before the window
                    acquire(11_500, "east-worker-1", "CONN#a"),        # the old region's acquire does not count
                    event(11_200, "east-router", "START", "CONN#f", status=202))  # recorded, not notified: lost
    assert lost_starts(frame, since_ms=10_000, active="west") == [
        {"pk": "CONN#a", "acknowledged_ms": 11_000, "by": "east-router"},
        {"pk": "CONN#f", "acknowledged_ms": 11_200, "by": "east-router"}]
    taken = history(*frame.to_dict("records"), acquire(14_000, "west-worker-2", "CONN#a"),
                    acquire(14_100, "west-worker-1", "CONN#f"))
    assert lost_starts(taken, since_ms=10_000, active="west") == []


def test_a_failback_is_judged_when_it_began_not_when_its_activation_wait_ended() -> None:
    """Seed 61 of the 100-schedule batch (a quiet run, times from 1796436260000 ms): the automation decided
    the failback at 10 220 (the standby Off, generation 83) after 2 s of reports within the 300 ms bound; the
    primary turned On 2 s later, and a write in the lag's tail (323 ms) was reported during that wait.  The
    move began caught up: not early.  A report beyond the bound before it began still makes it early."""
    def move(t: float, region: str, state: str, generation: int) -> dict[str, Any]:
        return {**control(t, region, state), "generation": generation}

    moves = [move(-3_564, "us-east-1", "On", 81), move(4_149, "us-east-1", "Off", 82),
             move(4_149, "failover-hold", "On", 82), move(6_149, "us-west-2", "On", 82),
             move(10_220, "us-west-2", "Off", 83), move(10_220, "failover-hold", "On", 83),
             move(12_220, "us-east-1", "On", 83)]
    reports = [stats(6_502, 11, 100.2), stats(7_502, 6, 206.3), stats(8_506, 4, 108.5), stats(9_511, 2, 40.1),
               stats(10_519, 1, 323.3), stats(11_521, 0, 0.0), stats(12_525, 7, 99.3)]
    seed_61 = history(*moves, *reports)
    assert early_failbacks(seed_61, "us-east-1", lag_bound_ms=300, hysteresis_ms=2_000, standby="west") == []
    behind_before = history(*moves, *reports, stats(9_900, 3, 301.0))
    assert early_failbacks(behind_before, "us-east-1", lag_bound_ms=300, hysteresis_ms=2_000, standby="west") == [
        {"t": 12_220, "reports": 3, "max_behind_ms": 301.0}]


def test_a_failback_decided_while_the_standbys_store_was_out_is_not_early() -> None:
    """The automation moves back at once when the standby, active, is cut off or its DynamoDB is out: its
    writes cannot be delivered before it returns, so the backlog never clears.  Such a failback is no
    finding; the same failback with the standby's store back before it began, or out in the primary, is."""
    moves = [control(0, "us-east-1", "On"), control(1_000, "us-east-1", "Off"), control(3_000, "us-west-2", "On"),
             control(20_000, "us-west-2", "Off"), control(22_000, "us-east-1", "On")]
    reports = [stats(t, 40, 5_000.0) for t in (18_000, 19_000, 20_000)]
    for kind in ("region_cut", "dynamodb_outage"):
        out = history(*moves, *reports, fault(10_000, "start", kind, "west"))
        assert early_failbacks(out, "us-east-1", lag_bound_ms=500, hysteresis_ms=3_000, standby="west") == [], kind
        back = history(*out.to_dict("records"), fault(19_500, "stop", kind, "west"))
        primary = history(*moves, *reports, fault(10_000, "start", kind, "east"))
        for judged in (back, primary):
            assert len(early_failbacks(judged, "us-east-1", lag_bound_ms=500, hysteresis_ms=3_000,
                                       standby="west")) == 1, kind
