"""Tests of harness.region.failover's RTO budget: the timings terraform deploys (terraform/modules/failover's
timings.json) meet the 60 s target at scale 1, and the standard 30 s health checks would not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleet.config import FleetConfig
from harness.region.failover import TARGET_RTO_S, router_events, rto_budget_s
from harness.region.route53 import DEPLOYED, HealthCheckSpec
from harness.region.rpo import lost_control_writes

HARDENED = FleetConfig(profile="hardened", worker_id="w", timescale=0.1)


def test_the_deployed_timings_meet_the_rto_target_at_scale_1() -> None:
    budget = rto_budget_s(HARDENED)
    assert budget["detected"] == DEPLOYED["failure_threshold"] * DEPLOYED["request_interval_s"] == 30
    assert budget["activated"] == pytest.approx(30 + 15 + 3 + 2)  # the old region's gate lease, timeout, margin
    assert budget["resumed"] <= TARGET_RTO_S
    assert budget["client"] == 30 + DEPLOYED["record_ttl_s"]


def test_standard_health_checks_would_miss_the_target() -> None:
    budget = rto_budget_s(HARDENED, HealthCheckSpec(request_interval_s=30))
    assert budget["detected"] == 90 and budget["resumed"] > TARGET_RTO_S


def test_the_routers_events_are_attributed_to_their_region_by_their_history_file(tmp_path: Path) -> None:
    """A router writes src ``router`` in either region: read by src, the primary's acknowledged START below
    was never found, so lost control writes were 0 end to end whatever the standby lost."""
    (tmp_path / "history").mkdir()
    start = {"t": 9_000.0, "src": "router", "type": "event", "kind": "START", "pk": "CONN#a", "status": 200}
    (tmp_path / "history" / "east-router.jsonl").write_text(json.dumps(start) + "\n", encoding="utf-8")
    (tmp_path / "history" / "west-router.jsonl").write_text(json.dumps({**start, "pk": "CONN#b"}) + "\n",
                                                             encoding="utf-8")
    events = router_events(tmp_path)
    assert sorted(zip(events["src"], events["pk"], strict=True)) == [("east-router", "CONN#a"),
                                                                      ("west-router", "CONN#b")]
    assert lost_control_writes(events, 10_000.0, "east", 5_000.0, {})["starts"] == 1
    assert lost_control_writes(events, 10_000.0, "east", 5_000.0, {"CONN#a": "STARTED"})["starts"] == 0
