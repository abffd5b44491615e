"""Recovery from a primary region's outage, phase by phase: a standby region behind Route 53 failover, Global
Tables and the region activation gate (``harness.region.regions``), at a time scale (default 1).

N streams are STARTed through the failover name and consumed by the primary's workers; then the primary is
cut off (its router stops answering, its workers reach nothing).  The harness moves the activation when the
zone's answer changes, as an operator's automation would on the health check's alarm.  Phases, in seconds
after the cut, from the run's history (the last stream's, where it is per stream):

- ``detected``: the primary's health check turns unhealthy (failure threshold × interval, 18 % rule);
- ``answer``: the zone answers the standby;
- ``activated``: the standby's control turns On (the primary's was turned Off a gate's lease earlier);
- ``claimed``, ``connected``, ``resumed``: the standby's acquire, its upstream session, its first stored
  message;
- ``client``: a client resolving the name reaches the standby (its cached answer's TTL ran out).

RTO as the streams see it is ``resumed``; new STARTs reach the standby at ``client``.  Also printed: the
replication backlog at the cut (writes made in the primary and not yet in the standby: the RPO), the
sequences lost (once the standby has stored up to each stream's head, the seqs from 1 to it that its
messages table lacks: 0 when the upstream's replay from the standby's checkpoint re-delivered the backlog),
and the conflicts last-writer-wins resolved.

Usage: ``python -m bench.region_failover [--timescale 1] [--streams 10] [--run-dir DIR]`` from the repository
root; one line per phase, the last line the summary.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd

from harness.backends.resources import client
from harness.cluster import http_json, send_event
from harness.history import read_history
from harness.region.regions import RegionsSpec, TwoRegions

TARGET_S = 60.0


def _wait(condition: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"region_failover: not within {timeout_s:.0f} s: {what}")
        time.sleep(0.05)


def _stored(regions: TwoRegions) -> dict[str, list[int]]:
    """The seqs the standby's messages table holds, per stream (its own writes and the replicated ones)."""
    backend = regions.backends["west"]
    pages = client(backend.env(), "dynamodb").get_paginator("scan").paginate(
        TableName=backend.tables["messages"], ConsistentRead=True, ProjectionExpression="message_data")
    stored: dict[str, list[int]] = {}
    for page in pages:
        for item in page.get("Items", []):
            connection_id, _, seq = item["message_data"]["S"].rpartition(":")
            stored.setdefault(connection_id, []).append(int(seq))
    return stored


def _last_first(history: pd.DataFrame, kind: str, after_t: float, ids: list[str]) -> float:
    """Over the streams, the latest of each stream's first ``kind`` ok by a standby worker after ``after_t``."""
    rows = history[(history["type"] == kind) & (history["outcome"] == "ok") & (history["t"] > after_t)
                   & history["src"].astype(str).str.startswith("west-")]
    firsts = rows.groupby("pk")["t"].min()
    missing = [i for i in ids if f"CONN#{i}" not in firsts.index]
    if missing:
        raise SystemExit(f"region_failover: no {kind} by the standby for {', '.join(missing)}")
    return float(firsts.max())


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.region_failover", description=__doc__.split("\n\n")[0])
    parser.add_argument("--timescale", type=float, default=1.0)
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--run-dir", type=Path)
    args = parser.parse_args()
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="region-failover-"))
    ids = [f"c{i:03d}" for i in range(args.streams)]
    spec = RegionsSpec(workers=2, timescale=args.timescale, run_dir=run_dir, fail_over_on_answer=True)
    bound = max(10.0, 10 * spec.health.request_interval_s * spec.timescale + 4 * spec.ttl_s * spec.timescale)
    with TwoRegions(spec) as regions:
        east = regions.clusters["east"]
        for connection_id in ids:
            http_json("POST", f"{east.upstream_control_url}/streams/{connection_id}")
            send_event(regions.router_url(), "START", connection_id, f"{east.upstream_url}/streams/{connection_id}")
        _wait(lambda: regions.consumed_by("east", ids), bound, "the primary consumes every stream")
        time.sleep(east.config.lease_s)  # a lease of steady running
        assert regions.tables is not None
        backlog = regions.tables.stats()["backlog"]
        cut_t, cut = time.time() * 1000.0, time.monotonic()
        regions.outage("east")
        print(f"{0.0:7.1f} s  cut off the primary ({len(ids)} streams; replication backlog {backlog} writes)")
        west_router, client_s = regions.clusters["west"].router_url, None
        deadline = cut + bound
        while client_s is None or not regions.consumed_by("west", ids):
            if client_s is None and regions.router_url() == west_router:
                client_s = time.monotonic() - cut
            if time.monotonic() > deadline:
                raise SystemExit(f"region_failover: the standby did not take over within {bound:.0f} s")
            time.sleep(0.05)
        heads = {i: s.get("head_seq") or 0 for i, s in east.streams().items() if i in ids}
        _wait(lambda: all(max(stored.get(i, [0])) >= heads[i] for stored in [_stored(regions)] for i in ids),
              bound, "the standby stores what the streams had emitted")
        lost = sum(len(set(range(1, heads[i] + 1)) - set(_stored(regions).get(i, []))) for i in ids)
        conflicts = regions.tables.stats()["conflicts"]
    history = read_history(run_dir)
    route53 = history[history["src"] == "route53"]

    def first(kind: str, region: str, **match: object) -> float:
        rows = route53[(route53["type"] == kind) & (route53["region"] == region) & (route53["t"] > cut_t)]
        for name, value in match.items():
            rows = rows[rows[name] == value]
        return float(rows["t"].min())

    phases = {
        "detected": first("health.check", "east", healthy=False),
        "answer": first("dns.answer", "west"),
        "activated": first("gate.state", "us-west-2", state="On"),
        "claimed": _last_first(history, "lease.acquire", cut_t, ids),
        "connected": _last_first(history, "ws.open", cut_t, ids),
        "resumed": _last_first(history, "msg.persist", cut_t, ids),
    }
    for name, t in phases.items():
        print(f"{(t - cut_t) / 1000.0:7.1f} s  {name}")
    print(f"{client_s:7.1f} s  client (the cached answer's TTL ran out)")
    rto = (phases["resumed"] - cut_t) / 1000.0
    print(f"region failover at time scale {spec.timescale:g}, {len(ids)} streams: RTO {rto:.1f} s (streams resumed; "
          f"{rto / spec.timescale:.1f} s at scale 1, target {TARGET_S:.0f} s), clients at {client_s:.1f} s, "
          f"RPO {backlog} writes in flight at the cut (replayed: {lost} sequences lost), {conflicts} conflicts "
          f"resolved; run folder {run_dir}")


if __name__ == "__main__":
    main()
