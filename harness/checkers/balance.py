"""Balanced scale-out: by the end of each ``join`` fault (a worker joining the fleet; the fault's duration is
the time the fleet has to balance), the workers' streams are within the band.

Each worker reports how many streams it holds at every heartbeat (``requests`` events, field ``held``).  At
the join's ``fault.stop`` the counts are each worker's latest report within the last two heartbeats (the
run's ``heartbeat_ms``; a worker that stopped reporting is gone); the fleet is balanced when max / min is at
most the band, or the counts are at most one stream apart (the best whole streams allow).  The band is the
run's ``balance_band`` setting, else the scale-out requirement (``REQUIRED_BAND``); 0 turns the check off.
Band and predicate are this checker's own, never the fleet's code, so a bug there can be caught.  Not
applicable without a ``join`` fault that stopped; a join whose end has fewer than two workers reporting, or
a history without the heartbeat, is unknown.

The requirement is scale-out's: a balanced fleet, left alone while a worker joins.  A join is not judged
(``judged`` false, ``disturbed_by`` says why) when another fault overlapped its window, when a STOP or START
was accepted in it, or when a worker already there held less than an even share of the streams after the
join (rounded up) at its start: a takeover, a STOP or a START burst leaves an imbalance the fleet does not
undo (it moves streams from workers above their share to joiners only), so the join's end would judge
those, not the scale-out.  Generated schedules (explore) compose joins with such
faults; the catalog's ``scale_out`` is the quiet case.  A run whose joins were all disturbed is valid here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from harness.checkers.events import STOPPED, Events, Fault, RunInfo, desired_states, faults, run_info, select
from harness.checkers.result import UNKNOWN, CheckResult, Validity, compose

REPORTS_WITHIN_HEARTBEATS = 2
REQUIRED_BAND = 1.2  # scale-out's requirement: max / min streams per worker at most this once balanced


def within_band(counts: Iterable[int], band: float) -> bool:
    """max / min at most ``band``, or at most one stream apart."""
    ordered = sorted(counts)
    return ordered[-1] <= max(ordered[0] + 1, band * ordered[0])


def _counts(reports: pd.DataFrame, at_t: float, heartbeat_ms: float, leaving_out: str = "") -> dict[str, int]:
    """Each worker's latest report within the last heartbeats before ``at_t``."""
    recent = reports[(reports["t"] <= at_t) & (reports["t"] > at_t - REPORTS_WITHIN_HEARTBEATS * heartbeat_ms)]
    return {str(w): int(float(held)) for w, held in
            recent.sort_values("t").groupby("worker")["held"].last().items() if str(w) != leaving_out}


def _disturbances(join: Fault, fault_list: list[Fault], states: pd.DataFrame, before: dict[str, int],
                  end_t: float) -> list[str]:
    """Why the fleet was not left alone to balance while ``join`` lasted (empty: it was)."""
    assert join.stop_t is not None
    found = [f"{f.kind} on {f.target}" for f in fault_list if f is not join and f.start_t <= join.stop_t
             and (f.stop_t if f.stop_t is not None else end_t) >= join.start_t]
    changes = states[(states["t"] >= join.start_t) & (states["t"] <= join.stop_t)]
    found += [f"{'STOP' if kind == STOPPED else 'START'} {pk}" for pk, kind in zip(changes["pk"], changes["type"],
                                                                                   strict=True)]
    # each worker already there must be able to give the joiner its share: none may hold less than an even
    # share after the join (the fleet fills joiners from surpluses, never a worker already there)
    share = -(-sum(before.values()) // (len(before) + 1))
    short = {w: n for w, n in before.items() if n < share}
    if short:
        found.append(f"held less than an even share ({share}) before the join: {short}")
    return found


def check_balance(history: Events, *, info: RunInfo | None = None) -> CheckResult:
    info = info if info is not None else run_info(history)
    fault_list = faults(history)
    joins = [f for f in fault_list if f.kind == "join" and f.stop_t is not None]
    if not joins:
        return CheckResult("balance", True, {"applies": False, "message": "no worker joined"})
    band = float(info.settings.get("balance_band", REQUIRED_BAND))
    heartbeat_ms = info.duration("heartbeat_ms")
    if heartbeat_ms is None:
        return CheckResult("balance", UNKNOWN, {"applies": True, "band": band, "joins": [],
                                                "message": "the history names no heartbeat_ms to date reports by"})
    reports = select(history, "requests", ["t", "worker", "held"])
    states = desired_states(history)
    judged: list[dict[str, Any]] = []
    for join in joins:
        assert join.stop_t is not None
        counts = _counts(reports, join.stop_t, heartbeat_ms)
        before = _counts(reports, join.start_t, heartbeat_ms, leaving_out=join.target)
        disturbed = _disturbances(join, fault_list, states, before, info.last_t)
        valid: Validity = UNKNOWN if len(counts) < 2 else (not band or within_band(counts.values(), band))
        judged.append({"joined": join.target, "at_t": join.stop_t, "within_ms": join.stop_t - join.start_t,
                       "counts": counts, "judged": not disturbed, "disturbed_by": disturbed,
                       "valid": True if disturbed else valid})
    verdict = compose(j["valid"] for j in judged)
    unbalanced = [j for j in judged if j["valid"] is False]
    if not any(j["judged"] for j in judged):
        message = "no join was judged: the fleet was not left alone to balance (" + "; ".join(
            f"{j['joined']}: {', '.join(j['disturbed_by'])}" for j in judged) + ")"
    elif verdict is True:
        message = f"balanced after every join judged (band {band:g})"
    elif unbalanced:
        message = (f"{len(unbalanced)} of {len(judged)} joins left the fleet out of the band {band:g}: "
                   + "; ".join(f"{j['joined']}: {j['counts']}" for j in unbalanced))
    else:
        message = "too few workers reporting to judge"
    details: dict[str, Any] = {"applies": True, "band": band, "joins": judged, "message": message}
    return CheckResult("balance", verdict, details)
