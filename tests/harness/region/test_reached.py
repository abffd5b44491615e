"""Tests of harness.region.reached over literal histories: each transition and interleaving is named when
the history shows it, and not when one event of it is missing or out of place."""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.region.reached import reached


def history(*events: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(list(events))


def control(t: float, region: str, state: str, generation: int = 1) -> dict[str, Any]:
    return {"t": t, "src": "route53", "type": "gate.state", "region": region, "state": state,
            "generation": generation}


def fault(t: float, action: str, kind: str, target: str = "east") -> dict[str, Any]:
    return {"t": t, "src": "harness", "type": f"fault.{action}", "kind": kind, "target": target}


def start(t: float) -> dict[str, Any]:
    return {"t": t, "src": "router", "type": "event", "kind": "START", "status": 200, "pk": f"CONN#{t}"}


def health(t: float, region: str, healthy: bool) -> dict[str, Any]:
    return {"t": t, "src": "route53", "type": "health.check", "region": region, "healthy": healthy}


INITIAL = (control(0, "us-east-1", "On", 0), control(0, "us-west-2", "Off", 0))
FAILOVER = (control(100, "us-east-1", "Off", 1), control(200, "us-west-2", "On", 1))
FAILBACK = (control(300, "us-west-2", "Off", 2), control(400, "us-east-1", "On", 2))


def names(*events: dict[str, Any]) -> list[str]:
    return reached(history(*events), "us-east-1", "us-west-2")


def test_a_failover_then_a_failback_are_named_and_the_initial_controls_are_neither() -> None:
    assert names(*INITIAL) == []
    assert names(*INITIAL, *FAILOVER) == ["failover"]
    assert names(*INITIAL, *FAILOVER, *FAILBACK) == ["failback", "failover"]
    again = (control(500, "us-east-1", "Off", 3), control(600, "us-west-2", "On", 3))
    assert names(*INITIAL, *FAILOVER, *FAILBACK, *again) == ["failback", "failover", "repeated failover"]


def test_a_failover_that_a_later_one_superseded_while_it_waited_is_named() -> None:
    """Generation 1 turned east Off and waited; generation 2 began meanwhile and is the one that turned a
    region On: one failover at a time, the first superseded.  Two failovers one after the other are not."""
    superseded = (control(100, "us-east-1", "Off", 1), control(150, "us-west-2", "Off", 2),
                  control(250, "us-east-1", "On", 2))
    assert "failover superseded" in names(*INITIAL, *superseded)
    assert "failover superseded" not in names(*INITIAL, *FAILOVER, *FAILBACK)
    assert "failover superseded" not in names(*INITIAL, control(100, "us-east-1", "Off", 1))  # still waiting


def test_a_failover_that_gave_up_after_its_wait_is_named_abandoned_not_superseded() -> None:
    """Generation 1 turned east Off; after its wait west could no longer take the activation, so it gave up
    (``failover.abandoned``); generation 2 later turned east On again."""
    abandoned = (control(100, "us-east-1", "Off", 1),
                 {"t": 300, "src": "route53", "type": "failover.abandoned", "region": "us-west-2", "generation": 1},
                 control(900, "us-west-2", "Off", 2), control(1_100, "us-east-1", "On", 2))
    assert names(*INITIAL, *abandoned) == ["failover abandoned"]
    assert "failover abandoned" not in names(*INITIAL, *FAILOVER, *FAILBACK)


def test_a_start_during_a_fault_or_a_failover_is_named_only_inside_it() -> None:
    cut = (fault(50, "start", "region_cut"), fault(350, "stop", "region_cut"))
    assert names(*INITIAL, *cut, *FAILOVER, start(150)) == \
        ["failover", "fault:region_cut", "start during failover", "start during fault"]
    assert names(*INITIAL, *cut, *FAILOVER, start(250)) == ["failover", "fault:region_cut", "start during fault"]
    assert names(*INITIAL, *cut, *FAILOVER, start(360)) == ["failover", "fault:region_cut"]


def test_a_start_refused_or_only_sent_while_no_region_is_on_is_a_start_during_failover() -> None:
    """With the gate no router acknowledges a START while no region is On: one a router refused then, or one
    the workload sent then to a region that was cut (no router recorded it), is what reaches that case."""
    refused = {**start(150), "status": 503}
    sent = {"t": 150, "src": "harness", "type": "workload.start", "pk": "CONN#f0", "in_failover": True}
    assert names(*INITIAL, *FAILOVER, refused) == ["failover", "start during failover"]
    assert names(*INITIAL, *FAILOVER, sent) == ["failover", "start during failover"]
    assert names(*INITIAL, *FAILOVER, {**refused, "t": 250}, {**sent, "t": 90}) == ["failover"]
    cut = (fault(50, "start", "region_cut"), fault(350, "stop", "region_cut"))
    assert "start during fault" not in names(*INITIAL, *cut, *FAILOVER, refused)  # a fault's START: acknowledged


def test_a_worker_pause_counts_only_when_it_overlaps_a_region_fault() -> None:
    cut = (fault(50, "start", "region_cut"), fault(150, "stop", "region_cut"))
    worker = "west-worker-1"
    overlapping = (fault(140, "start", "worker_pause", worker), fault(160, "stop", "worker_pause", worker))
    after = (fault(151, "start", "worker_pause", worker), fault(160, "stop", "worker_pause", worker))
    assert "worker pause during region fault" in names(*cut, *overlapping)
    assert "worker pause during region fault" not in names(*cut, *after)


def test_both_regions_unhealthy_and_a_flapping_answer_are_named() -> None:
    both = (health(10, "east", False), health(20, "west", False))
    assert "both unhealthy" in names(*both)
    assert "both unhealthy" not in names(*both, health(15, "east", True))
    answers = [{"t": t, "src": "route53", "type": "dns.answer", "region": r}
               for t, r in ((10, "west"), (20, "east"), (30, "west"))]
    assert "answer flapped" in names(*answers)
    assert "answer flapped" not in names(*answers[:2])


def test_a_skewed_region_clock_is_named_and_none_is_not() -> None:
    config = {"t": 0, "src": "replication", "type": "replication.config"}
    assert names({**config, "clock_offsets_ms": {"west": -290.0}}) == ["clock skew"]
    assert names({**config, "clock_offsets_ms": {}}) == []


def test_a_failback_the_automation_forced_with_the_standby_out_is_named_once_the_primary_is_on() -> None:
    forced = {"t": 250, "src": "route53", "type": "failback.forced", "backlog": 12, "behind_ms": 4_000.0}
    assert "forced failback" in names(*INITIAL, *FAILOVER, forced, *FAILBACK)
    assert "forced failback" not in names(*INITIAL, *FAILOVER, *FAILBACK)  # a failback by replication
    assert "forced failback" not in names(*INITIAL, *FAILOVER, forced)  # decided, the primary not On yet


def test_a_move_that_waited_for_replication_and_one_that_reached_its_bound_are_named() -> None:
    """After its activation wait a move waited for the old region's last writes (``activation.missing``'s
    ``waited_ms``), or reached its bound and activated unreplicated (``failover.unreplicated``)."""
    def lacking(waited_ms: float | None) -> dict[str, Any]:
        return {"t": 200, "src": "route53", "type": "activation.missing", "region": "us-west-2", "generation": 1,
                "items": [], "waited_ms": waited_ms}

    unreplicated = {"t": 200, "src": "route53", "type": "failover.unreplicated", "region": "us-west-2",
                    "generation": 1, "waited_ms": 600.0, "items": []}
    assert names(*INITIAL, *FAILOVER, lacking(150.0)) == ["failover", "waited for replication"]
    assert names(*INITIAL, *FAILOVER, unreplicated, lacking(600.0)) == [
        "activated unreplicated", "failover", "waited for replication"]
    assert names(*INITIAL, *FAILOVER, lacking(0.0)) == names(*INITIAL, *FAILOVER, lacking(None)) == ["failover"]
