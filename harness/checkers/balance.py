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
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from harness.checkers.events import Events, RunInfo, faults, run_info, select
from harness.checkers.result import UNKNOWN, CheckResult, Validity, compose

REPORTS_WITHIN_HEARTBEATS = 2
REQUIRED_BAND = 1.2  # scale-out's requirement: max / min streams per worker at most this once balanced


def within_band(counts: Iterable[int], band: float) -> bool:
    """max / min at most ``band``, or at most one stream apart."""
    ordered = sorted(counts)
    return ordered[-1] <= max(ordered[0] + 1, band * ordered[0])


def check_balance(history: Events, *, info: RunInfo | None = None) -> CheckResult:
    info = info if info is not None else run_info(history)
    joins = [f for f in faults(history) if f.kind == "join" and f.stop_t is not None]
    if not joins:
        return CheckResult("balance", True, {"applies": False, "message": "no worker joined"})
    band = float(info.settings.get("balance_band", REQUIRED_BAND))
    heartbeat_ms = info.duration("heartbeat_ms")
    if heartbeat_ms is None:
        return CheckResult("balance", UNKNOWN, {"applies": True, "band": band, "joins": [],
                                                "message": "the history names no heartbeat_ms to date reports by"})
    reports = select(history, "requests", ["t", "worker", "held"])
    judged: list[dict[str, Any]] = []
    for join in joins:
        assert join.stop_t is not None
        recent = reports[(reports["t"] <= join.stop_t)
                         & (reports["t"] > join.stop_t - REPORTS_WITHIN_HEARTBEATS * heartbeat_ms)]
        counts = {str(w): int(float(held)) for w, held in
                  recent.sort_values("t").groupby("worker")["held"].last().items()}
        valid: Validity = UNKNOWN if len(counts) < 2 else (not band or within_band(counts.values(), band))
        judged.append({"joined": join.target, "at_t": join.stop_t, "within_ms": join.stop_t - join.start_t,
                       "counts": counts, "valid": valid})
    verdict = compose(j["valid"] for j in judged)
    unbalanced = [j for j in judged if j["valid"] is False]
    if verdict is True:
        message = f"balanced after every join (band {band:g})"
    elif unbalanced:
        message = (f"{len(unbalanced)} of {len(judged)} joins left the fleet out of the band {band:g}: "
                   + "; ".join(f"{j['joined']}: {j['counts']}" for j in unbalanced))
    else:
        message = "too few workers reporting to judge"
    details: dict[str, Any] = {"applies": True, "band": band, "joins": judged, "message": message}
    return CheckResult("balance", verdict, details)
