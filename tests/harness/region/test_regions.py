"""Two regions end to end (``harness.region.regions``), both fleets warm, Global Tables between them.

Without the region activation gate, a replication pause makes the standby read the primary's workers as
expired and claim their streams while they still consume them: both regions consume one stream (split brain,
measured at the simulator).  With the gate, the standby claims nothing, however long replication stalls; on a
primary outage the health check fails, the failover name answers the standby after the TTL, the activation
moves, and the standby's fleet takes every stream over from the replicated tables, with no moment where both
regions consumed one stream."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.backends.resources import client
from harness.cluster import http_json, send_event
from harness.history import read_history
from harness.region.regions import RegionsSpec, TwoRegions

IDS = ["c000", "c001", "c002"]


def _until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``condition``: the simulator's sessions and the tables have no signal to wait on."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.05)


def _sessions(regions: TwoRegions) -> dict[str, list[dict[str, Any]]]:
    return {i: s.get("sessions", []) for i, s in regions.clusters["east"].streams().items()}


def _overlaps(regions: TwoRegions) -> list[str]:
    """The streams some east session and some west session consumed at once.  A session consumes from its
    opening to its close, or to its last answered ping when the client stopped reading (the simulator's
    ground truth, as ``harness.checkers.consuming`` reads it)."""
    def spans(sessions: list[dict[str, Any]], region: str) -> list[tuple[float, float]]:
        now = time.time() * 1000
        return [(s["opened"], now if s["closed"] is None else min(s["closed"], s["last_pong_t"] + 1))
                for s in sessions if s["worker"].startswith(f"{region}-")]
    return sorted(i for i, sessions in _sessions(regions).items()
                  if any(a < d and c < b for a, b in spans(sessions, "east") for c, d in spans(sessions, "west")))


def _west_holds_east_leases(regions: TwoRegions) -> bool:
    backend = regions.backends["west"]
    items = client(backend.env(), "dynamodb").scan(TableName=backend.tables["connections"],
                                                    ConsistentRead=True)["Items"]
    return len(items) == len(IDS) and all(i.get("lease_owner", {}).get("S", "").startswith("east-") for i in items)


def _start(regions: TwoRegions) -> None:
    east = regions.clusters["east"]
    for connection_id in IDS:
        http_json("POST", f"{east.upstream_control_url}/streams/{connection_id}")
        send_event(regions.router_url(), "START", connection_id, f"{east.upstream_url}/streams/{connection_id}")
    _until(lambda: regions.consumed_by("east", IDS), 30, "the primary's workers consume every stream")


def test_without_the_gate_a_replication_pause_lets_both_regions_consume_one_stream(tmp_path: Path) -> None:
    with TwoRegions(RegionsSpec(workers=2, timescale=0.1, run_dir=tmp_path, gate=False)) as regions:
        _start(regions)
        assert regions.tables is not None
        regions.tables.pause()
        _until(lambda: bool(_overlaps(regions)), 30, "a stream consumed in both regions at once")


def test_with_the_gate_the_standby_waits_then_takes_over_after_an_outage(tmp_path: Path) -> None:
    spec = RegionsSpec(workers=2, timescale=0.1, run_dir=tmp_path)
    with TwoRegions(spec) as regions:
        _start(regions)
        _until(lambda: _west_holds_east_leases(regions), 10, "the items, with their east leases, replicated")
        assert regions.tables is not None
        regions.tables.pause()
        config = regions.clusters["west"].config
        time.sleep(3 * config.lease_s + config.reconcile_s)  # what the standby needs to claim, had it no gate
        assert not _overlaps(regions) and not any(
            s["worker"].startswith("west-") for sessions in _sessions(regions).values() for s in sessions)
        regions.tables.resume()

        cut = time.monotonic()
        regions.outage("east")
        west_router = regions.clusters["west"].router_url
        _until(lambda: regions.router_url() == west_router, 30, "the name answers the standby")
        answered = time.monotonic() - cut
        regions.fail_over("east", "west")
        _until(lambda: regions.consumed_by("west", IDS), 60, "the standby's workers consume every stream")
        assert _overlaps(regions) == []

    # detection takes the failure threshold's probes (3 intervals of 1 s at this scale), then the cached
    # answer lives out its TTL (3 s)
    assert answered >= 3 * spec.health.request_interval_s * spec.timescale
    history = read_history(tmp_path)
    route53 = history[history["src"] == "route53"]
    assert [(r.type, r.region, r.state if r.type == "gate.state" else None) for r in route53.itertuples()
            if r.type in ("dns.answer", "dns.resolved", "gate.state")][2:] == [
        ("dns.resolved", "east", None), ("dns.answer", "west", None), ("dns.resolved", "west", None),
        ("gate.state", "us-east-1", "Off"), ("gate.state", "us-west-2", "On")]
