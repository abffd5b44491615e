"""Tests of harness.region.failover's RTO budget (the timings terraform deploys, terraform/modules/failover's
timings.json, meet the 60 s target at scale 1 with the replication wait's share, and the standard 30 s
health checks or a lag's longer tail would not) and of its
phases over a literal history."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fleet.config import FleetConfig
from harness.region.failover import TARGET_RTO_S, FailoverError, _phases, router_events, rto_budget_s
from harness.region.route53 import DEPLOYED, HealthCheckSpec
from harness.region.rpo import lost_control_writes

HARDENED = FleetConfig(profile="hardened", worker_id="w", timescale=0.1)


def test_the_deployed_timings_meet_the_rto_target_at_scale_1() -> None:
    budget = rto_budget_s(HARDENED)
    assert budget["detected"] == DEPLOYED["failure_threshold"] * DEPLOYED["request_interval_s"] == 30
    assert budget["activation_wait"] == pytest.approx(30 + 15 + 3 + 2)  # the old region's gate lease, timeout, margin
    # then, a gray failure's, the wait for the primary's last writes: at most 2 x the lag's p99 (3 s)
    assert budget["replication_wait"] == pytest.approx(50 + 6)
    assert budget["resumed"] == pytest.approx(59) and budget["resumed"] <= TARGET_RTO_S
    assert budget["client"] == 30 + DEPLOYED["record_ttl_s"]


def test_a_replication_lag_with_a_longer_tail_spends_the_rto_on_the_replication_wait() -> None:
    """The slow-replication variant's lag (p99 40 s): its replication wait alone (80 s) misses the target."""
    budget = rto_budget_s(HARDENED, lag_p99_ms=40_000.0)
    assert budget["replication_wait"] - budget["activation_wait"] == pytest.approx(80)
    assert budget["resumed"] > TARGET_RTO_S


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


def test_the_takeover_phases_end_when_each_stream_is_stored_up_to_its_head_at_the_takeover() -> None:
    """``caught_up``: the standby's first stored batch reaching the head the stream had when the standby
    consumed every stream; a standby that never stores that far is an error, not a phase."""
    def row(t: float, kind: str, pk: str, **fields: object) -> dict[str, object]:
        return {"t": t, "src": "west-worker-1", "type": kind, "pk": pk, "outcome": "ok", **fields}

    zone = [{"t": 1_000.0 + t, "src": "route53", "type": kind, "region": region, **fields}
            for t, kind, region, fields in ((3_000, "health.check", "east", {"healthy": False}),
                                            (3_000, "dns.answer", "west", {}),
                                            (5_000, "gate.state", "us-west-2", {"state": "On"}))]
    streams = [event for pk in ("CONN#a", "CONN#b") for event in (
        row(6_000.0, "lease.acquire", pk), row(6_100.0, "ws.open", pk),
        row(7_000.0, "msg.persist", pk, seq_from=1, seq_to=5), row(9_000.0, "msg.persist", pk, seq_from=6, seq_to=9))]
    history = pd.DataFrame(zone + streams)
    phases = _phases(history, 1_000.0, {"a": 5, "b": 8})
    assert phases["resumed"] == {"p50_s": 6.0, "last_s": 6.0}
    assert phases["caught_up"] == {"p50_s": 7.0, "last_s": 8.0}
    with pytest.raises(FailoverError, match="never stored up to the head of 1 stream"):
        _phases(history, 1_000.0, {"a": 5, "b": 10})
