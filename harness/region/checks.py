"""The activation's checkers over a region run's history, pure (a history frame in, what broke out): the cases
a failover must survive besides the outage itself, each judged from the events the run wrote, never from
live state.

- ``activation_overlaps``: spans during which two regions' routing controls were On at once (route53
  ``gate.state`` events; the hold control is not a region).  Overlapping failovers, a flapping health check
  or an operator racing the automation must never leave two regions active.
- ``moves_while_unhealthy``: activation moves (a region's control turned On) to a region that could not
  take it: the primary while its own health check was failing (with both regions unhealthy, Route 53
  answers the primary again; an automation that follows that answer activates a region that cannot
  serve: route53 ``health.check`` events), the standby while a fault had its DynamoDB out (harness
  ``fault.start`` / ``fault.stop`` of ``STORE_FAULTS``).  The standby's own check failing is no finding:
  it says only that clients cannot reach its API, and the gate, not DNS, decides which region consumes.
- ``early_failbacks``: activation moves back to the primary made before replication had caught up: each
  needs the ``quantile`` (nearest rank) of the ``replication.stats`` reports of the ``hysteresis_ms``
  before it was decided to show no backlog beyond the lag (the oldest undelivered write younger than
  ``lag_bound_ms``: ``behind_ms``, on the harness's one clock, not the regions' skewed ones), and at least
  one report.  Not every report: a write in the lag's tail holds one over the bound now and then; a backlog
  holds them all.  Decided: the automation's ``failback.ready`` (or ``failback.forced``) since the primary
  went Off, at its ``decided_ms`` (the instant whose reports it judged), else when the move began.
  A failback before that activates a primary whose tables lack what the standby wrote; one decided while a
  fault had the standby's DynamoDB out is none (``STORE_FAULTS``: its writes could not be delivered before
  it returned, and it could not serve: the automation moves back without waiting, losing what the lag at the
  standby's cut carried, as a failover does).
- ``flapping_moves``: activation moves closer than ``min_gap_ms`` to the previous one (hysteresis).
- ``activation_gaps``: at each activation (a region's control turned On after it had been Off), what the
  activated region's tables lacked of the other region's writes at that instant (route53
  ``activation.missing``), each item by kind (``missing_kind``): what can matter (``MATTERS``: a lease of
  a higher epoch, a desired state, a checkpoint, a log item, the router's control journal) and what cannot
  (a write of the same lease, a worker's liveness: superseded heartbeats).  An activation that lacked
  something that matters while the other region's DynamoDB answered (no ``STORE_FAULTS`` fault on it) is
  a finding: the activation wait was meant to let the other region's last writes arrive first, and did
  not.  With the other region's DynamoDB out its writes could not arrive (a failover's RPO, by design):
  counted apart.  So is what an activation the automation said it made unreplicated lacked (route53
  ``failover.unreplicated`` of its generation: it waited for replication up to its bound, then chose to
  activate; RPO by choice).  An activation with no record is a finding too (nothing says what it lacked).
- ``lost_starts``: STARTs a router acknowledged (``event`` status 2xx: a 202 was recorded but not notified) at
  or after ``since_ms`` whose stream no worker of the region active at the end acquired after the START
  (``lease.acquire`` ok), unless a later acknowledged STOP of the stream explains it: a START acknowledged
  during a failover and dropped.

Each literal test of tests/harness/region/test_checks.py shows its checker counting and not counting.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pandas as pd

from fleet.schema import CONN_PREFIX, JOURNAL_PREFIX
from harness.region.routing_control import HOLD

STORE_FAULTS = ("region_cut", "region_outage", "dynamodb_outage")  # the faults that take a region's DynamoDB out
# what an activated region may lack that can matter (``missing_kind``); the rest are superseded heartbeats
MATTERS = ("lease_epoch", "desired_state", "checkpoint", "log", "journal")


def _of(history: pd.DataFrame, kind: str, src: str | None = None) -> pd.DataFrame:
    if history.empty or "type" not in history.columns:
        return history.iloc[0:0]
    rows = history[history["type"] == kind]
    if src is not None:
        rows = rows[rows["src"].astype(str) == src]
    return rows.sort_values("t", kind="stable")


def _controls(history: pd.DataFrame) -> list[tuple[float, str, str]]:
    """(t, region, state) of every region's control change, in order."""
    rows = _of(history, "gate.state", "route53")
    return [(float(r.t), str(r.region), str(r.state)) for r in rows.itertuples() if r.region != HOLD]


def activation_overlaps(history: pd.DataFrame, end_ms: float) -> list[dict[str, Any]]:
    """Each span (until ``end_ms`` if it never ended) during which two or more regions were On."""
    on: set[str] = set()
    spans: list[dict[str, Any]] = []
    began: float | None = None
    for t, region, state in _controls(history):
        (on.add if state == "On" else on.discard)(region)
        if len(on) > 1 and began is None:
            began, regions = t, sorted(on)
        elif len(on) <= 1 and began is not None:
            spans.append({"from_ms": began, "to_ms": t, "regions": regions})
            began = None
    if began is not None:
        spans.append({"from_ms": began, "to_ms": end_ms, "regions": regions})
    return spans


def _store_faults(history: pd.DataFrame) -> pd.DataFrame:
    """The starts and stops (harness ``fault.start`` / ``fault.stop``) of the faults in ``STORE_FAULTS``."""
    faults = pd.concat([_of(history, "fault.start", "harness"), _of(history, "fault.stop", "harness")])
    return faults[faults["kind"].isin(STORE_FAULTS)] if not faults.empty else faults


def _open_faults(faults: pd.DataFrame, target: str, t: float) -> bool:
    """Whether a fault of ``faults`` on ``target`` had started and not stopped by ``t``."""
    if faults.empty:
        return False
    before = faults[(faults["target"] == target) & (faults["t"] <= t)]
    return bool((before["type"] == "fault.start").sum() > (before["type"] == "fault.stop").sum())


def moves_while_unhealthy(history: pd.DataFrame, aws_regions: dict[str, str]) -> list[dict[str, Any]]:
    """``aws_regions``: the run's region name -> its AWS region (the controls' names), the primary first.  A
    move is judged at its decision, the instant the automation's looks that let it turn the region On began
    (its ``activation.missing``'s ``decided_ms``), else at the On: a fault that begins between the looks and
    the On is the automation's to answer afterwards (a forced failback), not a move it should not have made
    (gate seed 38: the standby's DynamoDB out 8.7 ms before its On, after the look that found it answering)."""
    names = {aws: name for name, aws in aws_regions.items()}
    primary = next(iter(aws_regions))
    healthy = {name: True for name in aws_regions}
    store_out: set[str] = set()
    decided = {_move(row): float(row.decided_ms) for row in _of(history, "activation.missing", "route53").itertuples()
               if pd.notna(getattr(row, "decided_ms", None))}
    judged = [(decided.get(_move(row), float(row.t)), 1, row)
              for row in _of(history, "gate.state", "route53").itertuples()
              if row.state == "On" and row.region in names]
    states = pd.concat([_of(history, "health.check", "route53"), _store_faults(history)])
    found = []
    for _, _, row in sorted([(float(row.t), 0, row) for row in states.itertuples()] + judged, key=lambda e: e[:2]):
        if row.type == "health.check":
            healthy[str(row.region)] = bool(row.healthy)
        elif row.type.startswith("fault."):
            (store_out.add if row.type == "fault.start" else store_out.discard)(str(row.target))
        else:
            name = names[str(row.region)]
            if (not healthy[name]) if name == primary else (name in store_out):
                found.append({"t": float(row.t), "region": name, "both_unhealthy": not any(healthy.values())})
    return sorted(found, key=lambda f: f["t"])


def _move(row: Any) -> tuple[str, int | None]:
    """A move's key: its AWS region and the generation that made it (None: not recorded)."""
    generation = getattr(row, "generation", None)
    return str(row.region), None if generation is None or pd.isna(generation) else int(generation)


def early_failbacks(history: pd.DataFrame, primary: str, lag_bound_ms: float,
                    hysteresis_ms: float, standby: str, quantile: float) -> list[dict[str, Any]]:
    """``primary``: the primary's AWS region (its control's name); ``standby``: the standby's run name (as
    faults name their target).  A move back is an On of the primary's control after it had been Off; it is
    judged when it was decided (the automation's decision, else its generation's first change: the standby
    Off), not when its activation wait ended (writes in the lag's tail reported during that wait were made
    before it and change nothing decided)."""
    stats = _of(history, "replication.stats", "replication")
    faults = _store_faults(history)
    rows = _of(history, "gate.state", "route53")
    began = rows.groupby("generation")["t"].min().to_dict() if "generation" in rows.columns else {}
    decisions = pd.concat([_of(history, "failback.ready", "route53"), _of(history, "failback.forced", "route53")])
    found = []
    off_at: float | None = None
    for row in rows[rows["region"] == primary].itertuples() if not rows.empty else ():
        if row.state == "Off":
            off_at = float(row.t)
            continue
        if off_at is None:
            continue
        t = float(row.t)
        decided = float(began.get(getattr(row, "generation", None), t))
        made = decisions[(decisions["t"] >= off_at) & (decisions["t"] <= decided)] if not decisions.empty \
            else decisions
        off_at = None
        if not made.empty:
            last = made.sort_values("t", kind="stable").iloc[-1]
            stamp = last.get("decided_ms")
            decided = float(last["t"]) if stamp is None or pd.isna(stamp) else float(stamp)
        if _open_faults(faults, standby, decided):
            continue  # the standby's store out: nothing it wrote could be delivered before it returned
        window = stats[(stats["t"] >= decided - hysteresis_ms) & (stats["t"] <= decided)] if not stats.empty else stats
        behind = window["behind_ms"].dropna() if "behind_ms" in window.columns else pd.Series(dtype=float)
        ranked = sorted(float(b) for b in behind)
        caught_up = not window.empty and len(ranked) == len(window) \
            and ranked[math.ceil(quantile * len(ranked)) - 1] <= lag_bound_ms
        if not caught_up:
            found.append({"t": t, "reports": len(window),
                          "max_behind_ms": float(behind.max()) if not behind.empty else None})
    return found


def flapping_moves(history: pd.DataFrame, min_gap_ms: float) -> list[dict[str, Any]]:
    """Activations (a control turned On) less than ``min_gap_ms`` after the previous activation."""
    ons = [(t, region) for t, region, state in _controls(history) if state == "On"]
    return [{"t": t, "region": region, "gap_ms": t - before}
            for (before, _), (t, region) in itertools.pairwise(ons) if t - before < min_gap_ms]


def lost_starts(history: pd.DataFrame, since_ms: float, active: str) -> list[dict[str, Any]]:
    """``active``: the run's name of the region active at the end (its workers are ``<active>-...``)."""
    events = _of(history, "event")
    events = events[events["status"].between(200, 299) & events["kind"].isin(["START", "STOP"])]
    acquires = _of(history, "lease.acquire")
    if not acquires.empty:
        acquires = acquires[(acquires["outcome"] == "ok")
                            & acquires["src"].astype(str).str.startswith(f"{active}-")]
    found = []
    for row in events[(events["kind"] == "START") & (events["t"] >= since_ms)].itertuples():
        later = events[(events["pk"] == row.pk) & (events["t"] > row.t)]
        if (later["kind"] == "STOP").any():
            continue  # stopped again: nothing to consume
        taken = acquires[(acquires["pk"] == row.pk) & (acquires["t"] > row.t)] if not acquires.empty else acquires
        if taken.empty:
            found.append({"pk": row.pk, "acknowledged_ms": float(row.t), "by": str(row.src)})
    return found


def missing_kind(item: dict[str, Any]) -> str:
    """What a write an activated region lacked was (``activation.missing``'s item: ``key``, and the item as
    the region ``held`` it and as it was ``coming``; None: no item): ``log`` (a messages item), ``journal``
    (the router's control journal), for a connection item ``desired_state`` (it changes), ``lease_epoch``
    (a later lease), ``checkpoint`` (a later ``last_seq``) or ``same_lease`` (a renewal or release of the lease
    it holds), and ``liveness`` for anything else (a worker's liveness item)."""
    key, held, coming = item["key"], item.get("held") or {}, item.get("coming") or {}
    pk = str(key.get("pk", ""))
    if "sk" in key:
        return "log"
    if pk.startswith(JOURNAL_PREFIX):
        return "journal"
    if not pk.startswith(CONN_PREFIX):
        return "liveness"
    if held.get("desired_state") != coming.get("desired_state"):
        return "desired_state"
    for name, kind in (("epoch", "lease_epoch"), ("last_seq", "checkpoint")):
        if (coming.get(name) or 0) > (held.get(name) or 0):
            return kind
    return "same_lease"


def activation_gaps(history: pd.DataFrame, aws_regions: dict[str, str]) -> list[dict[str, Any]]:
    """Each activation: ``t``, ``region`` (the run's name), ``recorded`` (its ``activation.missing`` found by
    generation), ``other_out`` (a ``STORE_FAULTS`` fault had the other region's DynamoDB out),
    ``unreplicated`` (a ``failover.unreplicated`` of its generation), ``kinds`` (kind -> items lacked),
    ``tables`` (table -> {``items``, ``oldest_ms``}), ``finding``."""
    names = {aws: name for name, aws in aws_regions.items()}
    records = {int(row.generation): row for row in _of(history, "activation.missing", "route53").itertuples()}
    chosen_by = _of(history, "failover.unreplicated", "route53")
    unreplicated = {int(g) for g in chosen_by["generation"].dropna()} if "generation" in chosen_by.columns else set()
    faults = _store_faults(history)
    state: dict[str, str] = {}
    found = []
    for row in _of(history, "gate.state", "route53").itertuples():
        region, was = str(row.region), state.get(str(row.region))
        state[region] = str(row.state)
        if region not in names or row.state != "On" or was != "Off":
            continue
        stamp = getattr(row, "generation", None)
        generation = None if stamp is None or pd.isna(stamp) else int(stamp)
        record = records.get(generation) if generation is not None else None
        chosen = generation in unreplicated
        items: list[dict[str, Any]] = list(record.items) if record is not None else []
        other = next((name for name in aws_regions if name != names[region]), "")
        kinds: dict[str, int] = {}
        tables: dict[str, dict[str, Any]] = {}
        for item in items:
            kind = missing_kind(item)
            kinds[kind] = kinds.get(kind, 0) + 1
            table = tables.setdefault(str(item["table"]), {"items": 0, "oldest_ms": 0.0})
            table["items"] += 1
            table["oldest_ms"] = max(table["oldest_ms"], float(item["age_ms"]))
        other_out = _open_faults(faults, other, float(row.t))
        matters = any(kind in MATTERS for kind in kinds)
        found.append({"t": float(row.t), "region": names[region], "recorded": record is not None,
                      "other_out": other_out, "unreplicated": chosen, "kinds": dict(sorted(kinds.items())),
                      "tables": tables, "finding": record is None or (matters and not other_out and not chosen)})
    return found


def gap_totals(gaps: list[dict[str, Any]]) -> dict[str, Any]:
    """``activation_gaps`` summed: activations, findings, and items lacked by kind, apart for those with the
    other region's DynamoDB answering (``answering``: what matters there is a finding), those the automation
    made unreplicated (``unreplicated``: RPO by choice) and those with it out (``other_out``: a failover's
    RPO)."""
    totals: dict[str, Any] = {"activations": len(gaps), "findings": sum(g["finding"] for g in gaps),
                              "answering": {}, "unreplicated": {}, "other_out": {}}
    for gap in gaps:
        into = totals["other_out" if gap["other_out"] else "unreplicated" if gap["unreplicated"] else "answering"]
        for kind, count in gap["kinds"].items():
            into[kind] = into.get(kind, 0) + count
    return totals
