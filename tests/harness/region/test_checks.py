"""Tests of harness.region.checks over literal histories: each checker finds what broke, and finds nothing
in the same history with that one thing right (so each can fail)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.region.checks import (
    activation_gaps,
    activation_overlaps,
    early_failbacks,
    flapping_moves,
    gap_totals,
    lost_starts,
    missing_kind,
    moves_while_unhealthy,
)

REGIONS = {"east": "us-east-1", "west": "us-west-2"}
WEST: dict[str, Any] = {"standby": "west", "quantile": 0.9}  # the standby, the failback's quantile


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


def test_a_move_is_judged_at_the_looks_that_decided_it_not_at_its_on() -> None:
    """Gate seed 38: the automation looked at the standby's DynamoDB (answering), then a fault took it out
    8.7 ms before the On.  Judged at the On, that is a finding; the automation could not have known, and its
    forced failback answered it.  Out before the looks began, it is still a finding."""
    def decided(t: float, decided_ms: float) -> list[dict[str, Any]]:
        on = {**control(t, "us-west-2", "On"), "generation": 130}
        return [on, {"t": t, "src": "route53", "type": "activation.missing", "region": "us-west-2",
                     "generation": 130, "decided_ms": decided_ms}]

    moves = [control(0, "us-east-1", "On"), {**control(1_000, "us-east-1", "Off"), "generation": 130}]
    raced = history(*moves, fault(2_991.3, "start", "dynamodb_outage", "west"), *decided(3_000, 2_985))
    assert moves_while_unhealthy(raced, REGIONS) == []
    undated = history(*[e for e in raced.to_dict("records") if e["type"] != "activation.missing"])
    assert moves_while_unhealthy(undated, REGIONS) == [{"t": 3_000, "region": "west", "both_unhealthy": False}]
    known = history(*moves, fault(2_900, "start", "dynamodb_outage", "west"), *decided(3_000, 2_985))
    assert moves_while_unhealthy(known, REGIONS) == [{"t": 3_000, "region": "west", "both_unhealthy": False}]


def test_a_failback_before_replication_caught_up_for_the_whole_hysteresis_is_early() -> None:
    moves = [control(0, "us-east-1", "On"), control(1_000, "us-east-1", "Off"), control(3_000, "us-west-2", "On"),
             control(20_000, "us-west-2", "Off"), control(22_000, "us-east-1", "On")]
    behind = history(*moves, stats(19_000, 40, 100), stats(20_000, 40, 900), stats(21_000, 3, 150))
    assert early_failbacks(behind, "us-east-1", lag_bound_ms=500, hysteresis_ms=3_000, **WEST) == [
        {"t": 22_000, "reports": 3, "max_behind_ms": 900.0}]
    unknown = history(*moves)  # no report at all: not known to have caught up
    assert len(early_failbacks(unknown, "us-east-1", lag_bound_ms=500, hysteresis_ms=3_000, **WEST)) == 1
    caught_up = history(*moves, stats(19_000, 0, 100), stats(20_000, 0, 120), stats(21_000, 0, 150))
    assert early_failbacks(caught_up, "us-east-1", lag_bound_ms=500, hysteresis_ms=3_000, **WEST) == []


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
    assert early_failbacks(seed_61, "us-east-1", lag_bound_ms=300, hysteresis_ms=2_000, **WEST) == []
    behind_before = history(*moves, *reports, stats(9_900, 3, 301.0))
    assert early_failbacks(behind_before, "us-east-1", lag_bound_ms=300, hysteresis_ms=2_000, **WEST) == [
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
        assert early_failbacks(out, "us-east-1", lag_bound_ms=500, hysteresis_ms=3_000, **WEST) == [], kind
        back = history(*out.to_dict("records"), fault(19_500, "stop", kind, "west"))
        primary = history(*moves, *reports, fault(10_000, "start", kind, "east"))
        for judged in (back, primary):
            assert len(early_failbacks(judged, "us-east-1", lag_bound_ms=500, hysteresis_ms=3_000,
                                       **WEST)) == 1, kind


def lacked(pk: str, held: dict[str, Any] | None, coming: dict[str, Any] | None, sk: int | None = None,
           age_ms: float = 80.0) -> dict[str, Any]:
    """An item of ``activation.missing``: the activated region held ``held``, ``coming`` was on its way."""
    key = {"pk": pk} if sk is None else {"pk": pk, "sk": sk}
    table = "wsfleet-messages" if sk is not None else "wsfleet-connections"
    return {"table": table, "key": key, "age_ms": age_ms, "held": held, "coming": coming}


LEASE = {"pk": "CONN#a", "desired_state": "STARTED", "lease_owner": "east-worker-1", "epoch": 4, "last_seq": 90}


def test_what_an_activated_region_lacked_is_named_by_kind_heartbeats_apart() -> None:
    assert [missing_kind(item) for item in (
        lacked("CONN#a", LEASE, {**LEASE, "epoch": 5, "lease_owner": "east-worker-2"}),
        lacked("CONN#a", None, LEASE),                                   # a START the region never saw
        lacked("CONN#a", LEASE, {**LEASE, "desired_state": "STOPPED"}),
        lacked("CONN#a", LEASE, {**LEASE, "last_seq": 120}),
        lacked("CONN#a", LEASE, {**LEASE, "lease_owner": "", "lease_expires_at_ms": 0}),  # a release, same lease
        lacked("CONN#a", {"pk": "CONN#a", "seq": 3}, {"pk": "CONN#a", "seq": 4}, sk=2),
        lacked("CTL#a", None, {"pk": "CTL#a", "desired_state": "STARTED"}),
        lacked("east-worker-1", {"pk": "east-worker-1", "expires_at_ms": 10}, {"pk": "east-worker-1",
                                                                               "expires_at_ms": 20}),
    )] == ["lease_epoch", "desired_state", "desired_state", "checkpoint", "same_lease", "log", "journal",
           "liveness"]


def test_an_activation_that_lacked_a_write_that_matters_while_the_other_region_answered_is_a_finding() -> None:
    """A gray failure (the primary's API unreachable, its DynamoDB answering) and a failover whose wait was
    too short: the standby turned On lacking the primary's last log item and lease.  Lacking only superseded
    heartbeats is no finding; neither is lacking anything while the primary was cut off (its writes could
    not arrive: a failover's RPO), counted apart; an activation with no record is one."""
    def move(t: float, region: str, state: str, generation: int) -> dict[str, Any]:
        return {**control(t, region, state), "generation": generation}

    def missing(t: float, items: list[dict[str, Any]]) -> dict[str, Any]:
        return {"t": t, "src": "route53", "type": "activation.missing", "region": "us-west-2", "generation": 2,
                "other": "us-east-1", "items": items}

    moves = [move(0, "us-east-1", "On", 1), move(0, "us-west-2", "Off", 1), move(1_000, "us-east-1", "Off", 2),
             move(1_000, "failover-hold", "On", 2), move(1_100, "us-west-2", "On", 2)]
    matters = [lacked("CONN#a", None, {"pk": "CONN#a", "seq": 9}, sk=3, age_ms=95.0),
               lacked("CONN#a", LEASE, {**LEASE, "epoch": 5}, age_ms=40.0),
               lacked("east-worker-1", {"pk": "east-worker-1"}, {"pk": "east-worker-1", "expires_at_ms": 1})]
    gray = history(fault(500, "start", "gray_failure", "east"), *moves, missing(1_100, matters))
    [gap] = activation_gaps(gray, REGIONS)
    assert gap == {"t": 1_100, "region": "west", "recorded": True, "other_out": False, "unreplicated": False,
                   "kinds": {"lease_epoch": 1, "liveness": 1, "log": 1},
                   "tables": {"wsfleet-messages": {"items": 1, "oldest_ms": 95.0},
                              "wsfleet-connections": {"items": 2, "oldest_ms": 80.0}}, "finding": True}
    heartbeats = history(*moves, missing(1_100, matters[2:]))
    assert [g["finding"] for g in activation_gaps(heartbeats, REGIONS)] == [False]
    cut = history(fault(500, "start", "region_cut", "east"), *moves, missing(1_100, matters))
    assert gap_totals(activation_gaps(cut, REGIONS)) == {
        "activations": 1, "findings": 0, "answering": {}, "unreplicated": {},
        "other_out": {"lease_epoch": 1, "liveness": 1, "log": 1}}
    unrecorded = history(*moves)
    assert [(g["recorded"], g["finding"]) for g in activation_gaps(unrecorded, REGIONS)] == [(False, True)]


def test_one_report_in_the_lags_tail_among_many_within_it_is_not_early_a_tenth_over_is() -> None:
    """The automation's rule (``Failback``), judged again from the history: the 90th percentile of the reports
    of the window before the failback was decided (``failback.ready``'s ``decided_ms``, not its Off a little
    later) within the lag's 99th percentile.  One report of twenty over it (a write in the tail) is within
    the rule; every report within it (the old rule) made that failback early.  Three of twenty over it, a
    backlog still draining, are not."""
    moves = [control(0, "us-east-1", "On"), control(1_000, "us-east-1", "Off"), control(3_000, "us-west-2", "On"),
             control(20_030, "us-west-2", "Off"), control(22_030, "us-east-1", "On")]
    decided = {"t": 20_010, "src": "route53", "type": "failback.ready", "backlog": 3, "behind_ms": 120.0,
               "decided_ms": 20_005.0}
    window = [18_100 + 100 * i for i in range(20)]  # 18 100 .. 20 000

    def judged(over: set[int], *extra: dict[str, Any]) -> list[dict[str, Any]]:
        reports = [stats(t, 3, 350.0 if t in over else 120.0) for t in window]
        return early_failbacks(history(*moves, decided, *reports, *extra), "us-east-1", lag_bound_ms=300,
                               hysteresis_ms=2_000, **WEST)

    assert judged({19_000}) == []
    assert judged({18_100, 18_200, 18_300}) == [{"t": 22_030, "reports": 20, "max_behind_ms": 350.0}]
    # reports after the decision (before its Off) are not what it decided on
    assert judged({19_000}, stats(20_020, 3, 4_000.0), stats(20_025, 3, 4_000.0)) == []


def test_an_activation_the_automation_made_unreplicated_counts_what_it_lacked_apart_not_as_a_finding() -> None:
    """A gray failure under a replication pause: the failover waited for the primary's last writes up to its
    bound, then activated the standby without them and said so (``failover.unreplicated``, its generation):
    RPO by choice, counted apart.  The same activation with the record of another failover (an earlier
    generation's) is a finding, as is one with none."""
    def move(t: float, region: str, state: str, generation: int) -> dict[str, Any]:
        return {**control(t, region, state), "generation": generation}

    def event(kind: str, t: float, generation: int, **fields: Any) -> dict[str, Any]:
        return {"t": t, "src": "route53", "type": kind, "region": "us-west-2", "generation": generation, **fields}

    items = [lacked("CONN#a", None, {"pk": "CONN#a", "seq": 9}, sk=3, age_ms=900.0),
             lacked("CONN#a", LEASE, {**LEASE, "epoch": 5}, age_ms=850.0)]
    moves = [move(0, "us-east-1", "On", 1), move(0, "us-west-2", "Off", 1), move(1_000, "us-east-1", "Off", 2),
             move(1_000, "failover-hold", "On", 2), move(3_600, "us-west-2", "On", 2)]
    lacking = event("activation.missing", 3_600, 2, other="us-east-1", items=items)

    def gaps(generation: int) -> list[dict[str, Any]]:
        return activation_gaps(history(fault(500, "start", "gray_failure", "east"), *moves,
                                       event("failover.unreplicated", 3_600, generation, waited_ms=600.0,
                                             items=items), lacking), REGIONS)

    [gap] = gaps(2)
    assert (gap["unreplicated"], gap["finding"], gap["kinds"]) == (True, False, {"lease_epoch": 1, "log": 1})
    assert gap_totals([gap]) == {"activations": 1, "findings": 0, "answering": {},
                                 "unreplicated": {"lease_epoch": 1, "log": 1}, "other_out": {}}
    [other] = gaps(1)
    assert (other["unreplicated"], other["finding"]) == (False, True)
    assert gap_totals([other])["answering"] == {"lease_epoch": 1, "log": 1}
