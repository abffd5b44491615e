"""The region failover experiment (scenario ``region_failover``): a standby region behind Route 53 failover
and Global Tables (``harness.region.regions``), measured for split brain under a replication pause, then,
with the region activation gate, for recovery from the primary region's outage.

One run of a ``Variant``:

1. ``streams`` streams STARTed through the failover name, consumed by the primary's (east's) workers, and
   their leases replicated to the standby (west);
2. **replication pause** (both regions up) for ``3 x lease + reconcile``: what the standby needs to take
   the primary's streams over, had it nothing to stop it.  Split brain is a stream some east session and
   some west session consumed at once, by the simulator's sessions (the ground truth: it saw both read);
3. replication resumed and caught up (a variant without the gate stops here: its two regions now fight
   over the streams, and what they do is not a recovery);
4. **region outage**: east cut off (its router stops answering, its workers reach nothing, its writes not
   yet replicated stay behind); the harness moves the activation when the zone's answer changes, as an
   operator's automation would on the health check's alarm.  Or (variant ``dynamodb``) only east's
   DynamoDB goes out: its router still answers the shallow health check, so nothing fails over by itself;
   after the window a region's outage takes, the operator moves the activation.  Phases (``PHASES``),
   seconds after the cut, from the history (per stream, the last stream's):

   - ``detected``: east's health check turns unhealthy (failure threshold x interval, the 18 % rule);
   - ``answer``: the zone answers west;
   - ``activated``: west's routing control turns On (east's went Off a gate's lease earlier);
   - ``claimed``, ``connected``, ``resumed``: west's acquire, its upstream session, its first stored
     message; ``resumed`` is the RTO as the streams see it;
   - ``client``: a client resolving the name reaches west (its cached answer's TTL ran out).

   RPO as data lost (``harness.region.rpo``): the sequences east's workers had acknowledged before the
   cut that west's messages table lacks once it has taken over, and the STARTs and STOPs east's router
   acknowledged just before the cut (``LATE_STREAMS`` STARTs, the last STOPped again) that west's
   connections table lost or reverted.  Beside it, named as such: the replication backlog at the cut
   (writes made and not delivered, superseded heartbeats included), the sequences east had stored that
   west stored again (re-delivered by the upstream's replay from west's checkpoint), and lost: once west
   has stored up to each stream's head, the sequences from 1 to it that west's messages table lacks.
   Conflicts: the pairs last-writer-wins resolved.  Split brain is measured here too (sessions of both
   regions reading one stream at once after the cut), as in the pause and the failback.

5. **failback** (after a region outage): east healed, its health check passes, the zone answers it again,
   the activation moves back, and east's workers take every stream over; split brain during it, and east's
   tables, replicated from west's, must hold every sequence (the replicas converged).

``run_region_failover`` returns the result (also written as ``region.json`` in the run folder);
``harness.report.region`` turns several into one report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from fleet.config import FleetConfig
from fleet.region_gate import activation_wait_s
from fleet.schema import CONN_PREFIX
from harness.backends.resources import client
from harness.history import HistoryTail, read_history
from harness.message_log import every_entry
from harness.region.automation import FAILBACK_QUANTILE, REPLICATION_WAIT_P99S
from harness.region.checks import (
    activation_gaps,
    activation_overlaps,
    early_failbacks,
    flapping_moves,
    gap_totals,
    moves_while_unhealthy,
)
from harness.region.regions import AWS_REGIONS, RegionsPool, RegionsSpec, TwoRegions
from harness.region.route53 import RECORD_TTL_S, HealthCheckSpec
from harness.region.rpo import lost_control_writes, lost_messages

RESULT_FILE = "region.json"
TARGET_RTO_S = 60.0       # at scale 1 (the acceptance)
# Of that, the work that does not shrink with the time scale: claims, handshakes, the backlog's fenced writes
# (one request per message on dynalite), about 1.5 s for 6 streams on 2 cores.
UNSCALED_WORK_S = 3.0
LATE_STREAMS = 2  # STARTed through the primary just before the cut (the last STOPped again): its RPO in writes
FAULT_KINDS = {"region": "region_outage", "gray": "gray_failure", "dynamodb": "dynamodb_outage"}  # in the history
PHASES = ("detected", "answer", "activated", "claimed", "connected", "resumed", "caught_up")  # in this order
Progress = Callable[[str], None]


class FailoverError(RuntimeError):
    """A step of the experiment did not happen in time; the message says which."""


@dataclass(frozen=True)
class Variant:
    name: str
    profile: str
    gate: bool
    description: str
    # after the pause: "region" (the primary cut off), "gray" (unreachable for Route 53 only), "dynamodb"
    # (only its DynamoDB out), or None (without the gate the pause's split brain has left both regions
    # claiming: nothing to recover from to measure)
    outage: str | None = None
    # Global Tables' replication lag, median and 99th percentile at scale 1 (None: RegionsSpec's, 1 s and 3 s)
    lag_ms: tuple[float, float] | None = None
    pause: bool = True  # the replication pause first (its split brain); without it, only the outage (the RTO run)
    # the failover's wait between the old region Off and the new one On (None: the old region's gate's
    # ``activation_wait_s``); shorter is unsafe
    activation_wait_s: float | None = None
    # then the longest wait for replication (``RegionsSpec.replication_wait_s``; None: the default bound;
    # 0: none, unsafe)
    replication_wait_s: float | None = None

    def lag(self) -> tuple[float, float]:
        """The replication lag's median and 99th percentile at scale 1 this variant runs with."""
        return self.lag_ms or (RegionsSpec.lag_ms, RegionsSpec.lag_p99_ms)


VARIANTS = {v.name: v for v in (
    Variant("gate", "hardened", True, "hardened with the region activation gate", "region"),
    Variant("no-gate", "hardened", False, "hardened without the gate"),
    Variant("blog", "blog", False, "the published design (no gate)"),
    Variant("dynamodb", "hardened", True, "hardened with the gate; only the primary's DynamoDB goes out",
            "dynamodb"),
    # deliberately unsafe: replication far slower than the writes it carries, so what the primary acknowledged
    # just before the cut is still in flight (its RPO, in messages and control writes, can be non-zero)
    Variant("slow-replication", "hardened", True, "hardened with the gate; replication lag 20 s (p99 40 s)",
            "region", lag_ms=(20_000.0, 40_000.0)),
    # deliberately unsafe: no activation wait nor replication wait, so a region is turned On while the other's
    # last writes (and its consumers, until their next gate read) are still on their way: the activation gap
    # checker's case
    Variant("no-wait", "hardened", True, "hardened with the gate but no activation or replication wait (unsafe)",
            "region", activation_wait_s=0.0, replication_wait_s=0.0),
    # the RTO at the timings terraform deploys (``--timescale 1``): the gated outage and failback alone
    # a gray failure: Route 53 cannot reach the primary's API while its workers work on
    Variant("gray", "hardened", True, "hardened with the gate; Route 53 cannot reach the primary, its workers "
            "keep their upstream", "gray", pause=False),
    Variant("rto", "hardened", True, "hardened with the gate: the primary cut off, no replication pause first",
            "region", pause=False),
)}


@dataclass(frozen=True)
class FailoverSetup:
    variant: Variant
    run_dir: Path
    timescale: float = 0.1
    streams: int = 6
    workers: int = 2       # per region
    seed: int = 0

    def ids(self) -> list[str]:
        """Named after the variant: variants run on one ``RegionsPool`` share its simulator."""
        return [f"{self.variant.name}-c{i:03d}" for i in range(self.streams)]


def rto_budget_s(config: FleetConfig, health: HealthCheckSpec | None = None, ttl_s: float = RECORD_TTL_S,
                 lag_p99_ms: float = RegionsSpec.lag_p99_ms) -> dict[str, float]:
    """The RTO the timings terraform deploys allow at scale 1 (``health``: the health checks, by default
    ``DEPLOYED``'s; ``config``: the fleet's durations; ``lag_p99_ms``: the replication lag's 99th
    percentile), each phase's end in seconds after the primary stops answering: ``detected`` (failure
    threshold x interval), ``activation_wait`` (plus the old region's activation wait), ``replication_wait``
    (plus, at most, the wait for the old region's last writes while its DynamoDB answers, a gray failure's:
    ``REPLICATION_WAIT_P99S`` x the lag's p99; the standby On at the latest), ``resumed`` (plus the work that
    does not scale), ``client`` (a client's cached answer runs out: detection plus the TTL)."""
    health = health or HealthCheckSpec()
    at_scale_1 = config.with_changes(timescale=1.0)
    detected = health.failure_threshold * health.request_interval_s
    waited = detected + activation_wait_s(at_scale_1)
    replicated = waited + REPLICATION_WAIT_P99S * lag_p99_ms / 1000.0
    return {"detected": detected, "activation_wait": waited, "replication_wait": replicated,
            "resumed": replicated + UNSCALED_WORK_S, "client": detected + ttl_s}


def rto_bound_s(timescale: float) -> float:
    """The RTO a run at ``timescale`` must meet: the 60 s target's timers (health checks, TTL, the gate's
    lease) scale, its work does not; at scale 1 the target itself."""
    return (TARGET_RTO_S - UNSCALED_WORK_S) * timescale + UNSCALED_WORK_S


def run_region_failover(setup: FailoverSetup, progress: Progress = lambda line: None,
                        pool: RegionsPool | None = None) -> dict[str, Any]:
    """``pool``: run on it (fresh state) instead of starting and stopping the regions' backends."""
    variant, ids = setup.variant, setup.ids()
    spec = RegionsSpec(workers=setup.workers, profile=variant.profile, timescale=setup.timescale,
                       run_dir=setup.run_dir, seed=setup.seed, gate=variant.gate, automate=variant.gate,
                       lag_ms=variant.lag()[0], lag_p99_ms=variant.lag()[1],
                       activation_wait_s=variant.activation_wait_s, replication_wait_s=variant.replication_wait_s)
    began = time.monotonic()

    def say(line: str) -> None:
        progress(f"[{time.monotonic() - began:6.1f}s] region_failover/{variant.name}: {line}")

    result: dict[str, Any] = {"variant": variant.name, "description": variant.description,
                              "profile": variant.profile, "gate": variant.gate, "timescale": setup.timescale,
                              "streams": len(ids), "workers_per_region": setup.workers,
                              "run_dir": str(setup.run_dir), "outage": None}
    say(f"starting two regions ({setup.workers} workers each, time scale {setup.timescale:g})")
    with TwoRegions(spec, pool) as regions:
        config = regions.clusters["west"].config
        result["route53"] = regions.zone_records()
        # health checks, TTL, lease and reconcile, at this scale: long enough for any step to happen
        patience_s = 10 * spec.health.request_interval_s * spec.timescale + 4 * spec.ttl_s * spec.timescale \
            + 3 * config.lease_s + config.reconcile_s
        for connection_id in ids:
            regions.start_stream(connection_id)
        _wait(lambda: regions.consumed_by("east", ids), patience_s, "the primary consumes every stream")
        _wait(lambda: _replicated_to_standby(regions, len(ids)), patience_s,
              "the items, with their east leases, replicated to the standby")
        tables = regions.tables
        assert tables is not None

        result["pause_s"], result["split_brain"] = 0.0, {"streams": 0, "overlap_ms": 0, "pks": []}
        if variant.pause:
            result.update(_pause(regions, ids, 3 * config.lease_s + config.reconcile_s, say))
            _wait(tables.caught_up, patience_s, "replication caught up after the pause")  # its conflicts resolved
        if variant.outage is not None:
            result["outage"] = _outage(regions, ids, patience_s, say, variant.outage, f"{variant.name}-")
        result["conflicts"] = tables.stats()["conflicts"]
        history = read_history(setup.run_dir)
        result["activation_gaps"] = activation_gap_totals(history)
        result["activation"] = activation_checks(history, spec, result["activation_gaps"])
    _write_result(setup.run_dir, result)
    return result


def _pause(regions: TwoRegions, ids: list[str], pause_s: float, say: Progress) -> dict[str, Any]:
    """Replication paused for ``pause_s`` with both regions up: the streams both regions consumed in it."""
    tables = regions.tables
    assert tables is not None
    say(f"{len(ids)} streams consumed in east; pausing replication for {pause_s:.1f} s")
    regions.harness.emit("fault.start", kind="replication_pause", target="global-tables")
    paused_at = time.time() * 1000.0
    tables.pause()
    time.sleep(pause_s)  # a fixed window: split brain is what happens in it, there is no event to await
    overlaps = cross_region_overlaps(regions, since_ms=paused_at)
    tables.resume()
    regions.harness.emit("fault.stop", kind="replication_pause", target="global-tables")
    say(f"replication resumed: {len(overlaps)} stream(s) consumed in both regions at once")
    split_brain = {"streams": len(overlaps), "overlap_ms": round(sum(overlaps.values()), 1), "pks": sorted(overlaps)}
    return {"pause_s": pause_s, "split_brain": split_brain}


def _outage(regions: TwoRegions, ids: list[str], patience_s: float, say: Progress, kind: str,
            prefix: str) -> dict[str, Any]:
    """Cut the primary off (``kind`` region), make it unreachable for Route 53 only (``gray``: its workers
    keep their upstream and DynamoDB, so only the gate stops them), or take only its DynamoDB out
    (``dynamodb``); measure the standby's takeover.  DynamoDB alone out leaves the primary's router
    answering its (shallow) health check: the zone keeps answering the primary and the activation stays, so
    after the window a region's outage needs to fail over, the operator moves the activation (what was
    consumed meanwhile is recorded)."""
    tables, east, spec = regions.tables, regions.clusters["east"], regions.spec
    assert tables is not None
    time.sleep(east.config.lease_s)  # a lease of steady running, so the cut lands mid-stream
    late = [f"{prefix}late{i}" for i in range(LATE_STREAMS)]  # STARTed (the last STOPped again) just before the cut
    control_since_ms = time.time() * 1000.0
    for connection_id in late:
        regions.start_stream(connection_id)
    regions.stop_stream(late[-1])
    backlog = tables.stats()["backlog"]
    cut_ms, cut = time.time() * 1000.0, time.monotonic()
    regions.harness.emit("fault.start", kind=FAULT_KINDS[kind], target="east")
    operator: dict[str, Any] = {}
    if kind == "region":
        regions.outage("east")
        say(f"cut off the primary (replication backlog {backlog} writes)")
    elif kind == "gray":
        regions.unreachable.add("east")
        say("Route 53 cannot reach the primary; its workers keep their upstream and DynamoDB")
    else:
        tables.dynamodb_outage("east")
        say(f"the primary's DynamoDB is out (replication backlog {backlog} writes)")
        health = spec.health
        time.sleep((health.failure_threshold * health.request_interval_s + spec.ttl_s) * spec.timescale
                   + 2 * east.config.lease_s)  # a fixed window: what did not happen in it is the finding
        operator = {"zone_answer": regions.zone.answer(), "operator_s": round(time.monotonic() - cut, 3),
                    "consumed_at_operator": sum(regions.consumed_by(r, [i]) for i in ids for r in ("east", "west"))}
        say(f"after {operator['operator_s']:.1f} s the zone answers {operator['zone_answer']}, "
            f"{operator['consumed_at_operator']} streams consumed; the operator moves the activation")
        regions.fail_over("east", "west")
    west_router, client_s = regions.clusters["west"].router_url, None
    deadline = time.monotonic() + patience_s
    while (client_s is None and kind != "dynamodb") or not regions.consumed_by("west", ids):
        if client_s is None and regions.router_url() == west_router:
            client_s = time.monotonic() - cut
        if time.monotonic() > deadline:
            raise FailoverError(f"the standby did not take over within {patience_s:.0f} s")
        time.sleep(0.05)
    heads = {i: s.get("head_seq") or 0 for i, s in east.streams().items() if i in ids}
    lost = _lost_once_stored(regions, "west", heads, patience_s, "the standby stores what the streams had emitted")
    say(f"the standby consumes every stream; {lost} sequences lost")
    history = read_history(regions.spec.run_dir)
    rpo = {"messages": lost_messages(history, cut_ms, "east",
                                     {f"CONN#{i}": set(seqs) for i, seqs in _stored(regions, "west").items()}),
           "control": lost_control_writes(router_events(regions.spec.run_dir), cut_ms, "east",
                                          cut_ms - control_since_ms, _desired_states(regions, "west"))}
    say(f"RPO: {rpo['messages']['lost']} acknowledged sequences and {rpo['control']['starts']} STARTs, "
        f"{rpo['control']['stops']} STOPs acknowledged in the primary lost or reverted in the standby")
    overlaps = cross_region_overlaps(regions, since_ms=cut_ms)  # the cut primary's sessions, if any still read
    phases = {**_phases(history, cut_ms, heads), "client": {"p50_s": client_s, "last_s": client_s}}
    failback = _failback(regions, ids, heads, patience_s, say, kind) if kind != "dynamodb" else None
    return {"kind": kind, "phases": phases, "failback": failback,
            "client_s": None if client_s is None else round(client_s, 3),
            "rto_s": phases["resumed"]["last_s"],
            "rto_bound_s": rto_bound_s(spec.timescale) if kind != "dynamodb" else None,
            "target_rto_s_at_scale_1": TARGET_RTO_S,
            "rto_budget_s_at_scale_1": rto_budget_s(east.config, spec.health, spec.ttl_s, spec.lag_p99_ms),
            "rpo": rpo,
            "split_brain": {"streams": len(overlaps), "overlap_ms": round(sum(overlaps.values()), 1)},
            "replication_backlog_at_cut": backlog,
            "redelivered": _redelivered(history, cut_ms), "lost": lost, **operator}


def activation_checks(history: pd.DataFrame, spec: RegionsSpec, gaps: dict[str, Any]) -> dict[str, int]:
    """What the activation's checkers (``harness.region.checks``) found over the whole run, counted: spans
    with two regions On, failbacks before replication caught up for the hysteresis, activations of a region
    whose check failed, activations closer than the hysteresis, activations that lacked a write of the other
    region that matters while its DynamoDB answered (``gaps``: the run's ``activation_gap_totals``, which say
    what they lacked)."""
    hysteresis_ms = spec.failback_hysteresis_s * spec.timescale * 1000.0
    return {"both_on": len(activation_overlaps(history, time.time() * 1000.0)),
            "missing_writes": gaps["findings"],
            "early_failbacks": len(early_failbacks(history, AWS_REGIONS["east"], spec.lag_p99_ms * spec.timescale,
                                                   hysteresis_ms, standby="west", quantile=FAILBACK_QUANTILE)),
            "activated_unhealthy": len(moves_while_unhealthy(history, AWS_REGIONS)),
            "flapping": len(flapping_moves(history, hysteresis_ms))}


def activation_gap_totals(history: pd.DataFrame) -> dict[str, Any]:
    """What each activation of the run lacked of the other region's writes, summed (``gap_totals``)."""
    return gap_totals(activation_gaps(history, AWS_REGIONS))


def cross_region_overlaps(regions: TwoRegions, since_ms: float,
                          ids: Collection[str] | None = None) -> dict[str, float]:
    """Per stream (of ``ids``, by default every one the simulator has), for how long (ms) some east session
    and some west session consumed it at once after ``since_ms``.  A session consumes from its opening to its
    close, or to its last answered ping when the client stopped reading (the simulator's ground truth, as
    ``harness.checkers.consuming`` reads it)."""
    now = time.time() * 1000.0

    def spans(sessions: list[dict[str, Any]], region: str) -> list[tuple[float, float]]:
        return [(max(s["opened"], since_ms), now if s["closed"] is None else min(s["closed"], s["last_pong_t"] + 1))
                for s in sessions if s["worker"].startswith(f"{region}-")]

    overlaps = {}
    for connection_id, stream in regions.clusters["east"].streams().items():
        if ids is not None and connection_id not in ids:
            continue
        sessions = stream.get("sessions", [])
        total = sum(max(0.0, min(b, d) - max(a, c))
                    for a, b in spans(sessions, "east") for c, d in spans(sessions, "west"))
        if total > 0:
            overlaps[connection_id] = total
    return overlaps


def router_events(run_dir: Path) -> pd.DataFrame:
    """Each region's router's ``event`` records, its region in ``src`` (``east-router``): a router writes
    ``src`` ``router`` whatever its region, which its history file's name says (read as ``rpo`` needs it:
    attributed by ``src``, the primary's acknowledged STARTs and STOPs were never found)."""
    rows = [{**event, "src": f"{region}-router"} for region in AWS_REGIONS
            for event in HistoryTail(run_dir, f"{region}-router.jsonl", ["event"]).new_events()]
    return pd.DataFrame(rows, columns=None if rows else ["t", "src", "type", "kind", "pk", "status"])


def _persisted_by(regions: TwoRegions, region: str, ids: list[str], since_ms: float) -> bool:
    """Whether a worker of ``region`` has stored a message of each stream since ``since_ms`` (its history)."""
    history = read_history(regions.spec.run_dir)
    rows = history[(history["type"] == "msg.persist") & (history["outcome"] == "ok") & (history["t"] > since_ms)
                   & history["src"].astype(str).str.startswith(f"{region}-")]
    return {f"CONN#{i}" for i in ids} <= set(rows["pk"])


def _replicated_to_standby(regions: TwoRegions, count: int) -> bool:
    backend = regions.backends["west"]
    items = client(backend.env(), "dynamodb").scan(TableName=backend.tables["connections"],
                                                    ConsistentRead=True)["Items"]
    items = [i for i in items if i["pk"]["S"].startswith(CONN_PREFIX)]  # not the router's control journal
    return len(items) == count and all(i.get("lease_owner", {}).get("S", "").startswith("east-") for i in items)


def _lost_once_stored(regions: TwoRegions, region: str, heads: dict[str, int], patience_s: float, what: str) -> int:
    """Wait until ``region``'s messages table reaches each stream's head (``heads``: stream id -> seq) and
    every write made until then has been replicated (order is kept per item only: a later batch can arrive
    before an earlier one), then count the sequences from 1 to the head it lacks."""
    _wait(lambda: all(max(stored.get(i, [0])) >= head for stored in [_stored(regions, region)]
                      for i, head in heads.items()), patience_s, what)
    tables, reached_ms = regions.tables, time.time() * 1000.0
    assert tables is not None
    _wait(lambda: tables.delivered_before(reached_ms), patience_s, f"{what}: replicated until then")
    stored = _stored(regions, region)
    return sum(len(set(range(1, head + 1)) - set(stored.get(i, []))) for i, head in heads.items())


def _desired_states(regions: TwoRegions, region: str) -> dict[str, str]:
    """Each stream's desired state as ``region``'s connections table holds it (not the control journal's)."""
    backend = regions.backends[region]
    pages = client(backend.env(), "dynamodb").get_paginator("scan").paginate(
        TableName=backend.tables["connections"], ConsistentRead=True)
    return {item["pk"]["S"]: item.get("desired_state", {}).get("S", "") for page in pages
            for item in page.get("Items", []) if item["pk"]["S"].startswith(CONN_PREFIX)}


def _stored(regions: TwoRegions, region: str) -> dict[str, list[int]]:
    """The seqs a region's messages table holds, per stream (its own writes and the replicated ones)."""
    backend = regions.backends[region]
    stored: dict[str, list[int]] = {}
    for entry in every_entry(client(backend.env(), "dynamodb"), backend.tables["messages"]):
        stored.setdefault(entry.pk.removeprefix("CONN#"), []).extend(
            message.seq for message in entry.messages() if message.seq is not None)
    return stored


def _phases(history: pd.DataFrame, since_ms: float, heads: dict[str, int], check: tuple[str, bool] = ("east", False),
            taker: str = "west") -> dict[str, dict[str, float | None]]:
    """Each phase in seconds after ``since_ms``: the zone's events once (``check``: the health check's region
    and the state it turns to), the ``taker`` region's per stream (p50 and the last stream's); ``caught_up``:
    its first stored message at or past the stream's head when it consumed every stream (``heads``)."""
    ids = list(heads)
    route53 = history[(history["src"] == "route53") & (history["t"] > since_ms)]

    def first(kind: str, region: str, **match: object) -> float | None:
        rows = route53[(route53["type"] == kind) & (route53["region"] == region)]
        for name, value in match.items():
            rows = rows[rows[name] == value] if name in rows.columns else rows.iloc[0:0]
        return None if rows.empty else round((float(rows["t"].min()) - since_ms) / 1000.0, 3)

    zone = {"detected": first("health.check", check[0], healthy=check[1]), "answer": first("dns.answer", taker),
            "activated": first("gate.state", AWS_REGIONS[taker], state="On")}
    phases: dict[str, dict[str, float | None]] = {name: {"p50_s": t, "last_s": t} for name, t in zone.items()}
    standby = history[history["src"].astype(str).str.startswith(f"{taker}-") & (history["t"] > since_ms)]
    for name, kind in (("claimed", "lease.acquire"), ("connected", "ws.open"), ("resumed", "msg.persist")):
        rows = standby[(standby["type"] == kind) & (standby["outcome"] == "ok")]
        firsts = (rows.groupby("pk")["t"].min() - since_ms) / 1000.0
        missing = [i for i in ids if f"CONN#{i}" not in firsts.index]
        if missing:
            raise FailoverError(f"no {kind} by {taker} for {', '.join(missing)}")
        phases[name] = {"p50_s": round(float(firsts.median()), 3), "last_s": round(float(firsts.max()), 3)}
    stored = standby[(standby["type"] == "msg.persist") & (standby["outcome"] == "ok")]
    caught = [(float(rows["t"].min()) - since_ms) / 1000.0 for i, head in heads.items()
              if not (rows := stored[(stored["pk"] == f"CONN#{i}") & (stored["seq_to"] >= head)]).empty]
    if len(caught) < len(heads):
        raise FailoverError(f"{taker} never stored up to the head of {len(heads) - len(caught)} stream(s)")
    phases["caught_up"] = {"p50_s": round(float(pd.Series(caught).median()), 3), "last_s": round(max(caught), 3)}
    return phases


def _failback(regions: TwoRegions, ids: list[str], heads: dict[str, int], patience_s: float,
              say: Progress, kind: str) -> dict[str, Any]:
    """The primary back: its health check passes again, the zone answers it, the activation moves back,
    and its workers take every stream over from the standby's.  Split brain during it; and the primary's
    tables, replicated from the standby's, hold every sequence (the replicas converged)."""
    heal_ms = time.time() * 1000.0
    regions.harness.emit("fault.stop", kind=FAULT_KINDS[kind], target="east")
    regions.heal("east")
    regions.unreachable.discard("east")
    say("the primary is back: failing back")
    _wait(lambda: regions.consumed_by("east", ids), patience_s, "the primary consumes every stream again")
    lost = _lost_once_stored(regions, "east", heads, patience_s, "the primary's tables hold what the standby stored")
    _wait(lambda: _persisted_by(regions, "east", ids, heal_ms), patience_s, "the primary stores each stream again")
    heads_back = {i: s.get("head_seq") or 0 for i, s in regions.clusters["east"].streams().items() if i in ids}
    _wait(lambda: all(max(stored.get(i, [0])) >= head for stored in [_stored(regions, "east")]
                      for i, head in heads_back.items()), patience_s, "the primary catches up")
    phases = _phases(read_history(regions.spec.run_dir), heal_ms, heads_back, check=("east", True), taker="east")
    overlaps = cross_region_overlaps(regions, since_ms=heal_ms)
    say(f"failed back: {len(overlaps)} stream(s) consumed in both regions, {lost} sequences missing in the primary")
    return {"phases": phases, "rto_s": phases["resumed"]["last_s"], "split_brain": len(overlaps),
            "lost_in_primary": lost}


def _redelivered(history: pd.DataFrame, cut_ms: float) -> int:
    """Sequences east stored before the cut that west stored again after it: persisted in the primary,
    not replicated, delivered again by the upstream's replay (the RPO in sequences; none of them lost)."""
    persisted = history[(history["type"] == "msg.persist") & (history["outcome"] == "ok")]

    def seqs(rows: pd.DataFrame) -> set[tuple[str, int]]:
        return {(r.pk, seq) for r in rows.itertuples() for seq in range(int(r.seq_from), int(r.seq_to) + 1)}

    src = persisted["src"].astype(str)
    east = seqs(persisted[src.str.startswith("east-") & (persisted["t"] < cut_ms)])
    west = seqs(persisted[src.str.startswith("west-") & (persisted["t"] > cut_ms)])
    return len(east & west)


def _wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``condition``: the simulator's sessions and the tables have no signal to wait on."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise FailoverError(f"not within {timeout_s:.0f} s: {what}")
        time.sleep(0.05)


def _write_result(run_dir: Path, result: dict[str, Any]) -> None:
    (run_dir / RESULT_FILE).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")

