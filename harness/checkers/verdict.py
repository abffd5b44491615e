"""One run's verdict: every checker over one history, composed (false beats unknown beats true), and the
verdict file ``RUN_DIR/verdict.json`` with exactly the DESIGN §7 keys plus the wave-2 ones (§11):

- ``zombie_writes``: I6, items stored or writes acknowledged from a superseded epoch (``zombies``), plus,
  where the messages are stored as a batch log (hardened: the history has ``final.log``), the log entries the
  ``log`` checker finds out of place (an earlier holder's after a later one's mark, a decreasing epoch, a
  takeover without a mark); the ``log`` checker runs only then (or when a stored item is unreadable, which
  fails it), and ``zombies`` leaves those streams' messages to it;
- ``outcomes``: per event type, how many events had outcome ``ok``, ``fail`` and ``info``;
- ``fault_model``: ``{"stated", "within", "flag"}``: what ``run.start`` says of the schedule (``"within"``,
  ``"outside: <why>"``, or ``"outside for I1: <why>"``; null when it says nothing), whether that is within
  the model (null: unknown), and ``flag`` "outside the fault model" when the run is invalid under faults
  outside the model, and, for a schedule outside for I1 only, when I1 (``duplicate_claims``) is all it fails.
  ``valid`` stays false then: a violation is never hidden, only labelled.

``analyse(history)`` returns an ``Analysis``: the verdict dict, each ``CheckResult``, and the row tables the
report generator writes (``TABLE_COLUMNS`` gives each table's columns, so an empty table still has a header).
``verdict_line`` is the verdict as people read it on one line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from harness.checkers.balance import check_balance
from harness.checkers.bounds import check_bounds
from harness.checkers.consuming import consumption
from harness.checkers.duplicates import (
    CLAIM_COLUMNS,
    EPISODE_COLUMNS,
    LEASE_OVERLAP_COLUMNS,
    ZOMBIE_COLUMNS,
    check_duplicate_claims,
)
from harness.checkers.events import Events, RunInfo, read_events, run_info
from harness.checkers.handshakes import check_handshakes
from harness.checkers.log import LOG_COLUMNS, applies, check_log, logged_pks, lost_by_pk
from harness.checkers.recovery import PHASE_COLUMNS, check_recovery
from harness.checkers.result import CheckResult, Row, compose, json_safe
from harness.checkers.sequences import SEQUENCE_COLUMNS, check_sequences
from harness.checkers.stop import STOP_COLUMNS, check_stop
from harness.checkers.zombies import ZOMBIE_WRITE_COLUMNS, check_zombie_writes

VERDICT_FILE = "verdict.json"
VERDICT_KEYS = (
    "scenario", "profile", "dynamodb", "timescale", "config", "connections", "workers", "valid", "duplicate_claims",
    "duplicate_overlap_ms", "lost_sequences", "duplicate_deliveries", "zombie_writes", "recovery_ms", "phases_ms",
    "bound_ms", "outcomes", "fault_model", "checkers",
)
OUTCOMES = ("ok", "fail", "info")
OUTSIDE_FLAG = "outside the fault model"
OUTSIDE_FOR_I1 = "outside for I1:"  # a stated fault model that lifts I1 only (``harness.scenarios.runner``)
TABLE_COLUMNS: dict[str, list[str]] = {
    "phases": PHASE_COLUMNS,
    "claims": CLAIM_COLUMNS,
    "episodes": EPISODE_COLUMNS,
    "zombies": ZOMBIE_COLUMNS,
    "lease_overlaps": LEASE_OVERLAP_COLUMNS,
    "sequences": SEQUENCE_COLUMNS,
    "stops": STOP_COLUMNS,
    "zombie_writes": ZOMBIE_WRITE_COLUMNS,
    "log": LOG_COLUMNS,
}


@dataclass(frozen=True)
class Analysis:
    """Everything the checkers found in one history."""

    info: RunInfo
    checks: dict[str, CheckResult]
    verdict: dict[str, Any]

    def table(self, name: str) -> list[Row]:
        """A row table by name (a key of ``TABLE_COLUMNS``)."""
        if name not in TABLE_COLUMNS:
            raise KeyError(f"no table {name!r}; tables: {', '.join(TABLE_COLUMNS)}")
        for check in self.checks.values():
            if name in check.tables:
                return check.tables[name]
        return []

    def frame(self, name: str) -> pd.DataFrame:
        """A row table as a DataFrame with its columns in order (also when empty)."""
        return pd.DataFrame(self.table(name), columns=TABLE_COLUMNS[name])

    @property
    def phases(self) -> list[Row]:
        return self.table("phases")

    @property
    def claims(self) -> list[Row]:
        return self.table("claims")

    @property
    def sequences(self) -> list[Row]:
        return self.table("sequences")


def analyse(history: Events, *, settle_ms: float | None = None, merge_gap_ms: float | None = None,
            thaw_grace_ms: float | None = None, fault_grace_ms: float | None = None,
            fault_kinds: Collection[str] | None = None) -> Analysis:
    """Run every checker over ``history`` (``read_events``).
    The keyword arguments override the checkers' defaults, which come from ``run.start``."""
    info = run_info(history)
    consumed = consumption(history, info, thaw_grace_ms=thaw_grace_ms)
    # Recovery is judged within the experiment: the teardown after run.stop (every worker handing its
    # streams off) is not a recovery from the faults.  Safety is judged over everything.
    experiment, experiment_info, experiment_consumed = history, info, consumed
    if info.stop_t is not None and info.last_t > info.stop_t:
        experiment = history.until(info.stop_t)
        experiment_info = replace(info, last_t=info.stop_t)
        answered = consumed.writes["answered_t"].to_numpy() <= info.stop_t  # answered_t: the event's t
        experiment_consumed = consumption(experiment, experiment_info, thaw_grace_ms=thaw_grace_ms,
                                          writes=consumed.writes.loc[answered].reset_index(drop=True))
    recovery = check_recovery(experiment, kinds=fault_kinds, fault_grace_ms=fault_grace_ms, info=experiment_info,
                              consumed=experiment_consumed)
    sequences = check_sequences(history, settle_ms=settle_ms, info=info)
    logged = logged_pks(history)
    checks = {
        check.name: check
        for check in (
            check_duplicate_claims(history, merge_gap_ms=merge_gap_ms, info=info, consumed=consumed),
            sequences,
            recovery,
            check_bounds(history, recovery=recovery, info=info),
            check_stop(history, info=info, consumed=consumed),
            check_zombie_writes(history, info=info, writes=consumed.writes, logged=logged),
            check_handshakes(history, info=info),
            check_balance(history, info=info),
            *([check_log(history, lost_by_pk(sequences.tables["sequences"]))] if applies(history) else []),
        )
    }
    return Analysis(info, checks, _verdict(info, checks, outcome_counts(history)))


def outcome_counts(history: Events) -> dict[str, dict[str, int]]:
    """Per event type with an ``outcome``, how many events had each of ``ok``, ``fail``, ``info`` (other
    values, if any, under their own name)."""
    counts: dict[str, dict[str, int]] = {}
    for kind in sorted(history.types):
        [table] = history.tables([kind])
        if not table.has("outcome"):
            continue
        outcomes = pd.Series(table.column("outcome", "raw"), dtype=object).dropna().astype(str)
        for outcome, number in sorted(outcomes.value_counts().items()):
            counts.setdefault(kind, dict.fromkeys(OUTCOMES, 0))[str(outcome)] = int(number)
    return counts


def fault_model(info: RunInfo, valid: Any, failing: Collection[str] = ()) -> dict[str, Any]:
    """The ``fault_model`` verdict entry (see the module docstring); ``failing``: the checkers that are false."""
    stated = info.fault_model
    within = None if stated is None else stated.strip().lower() == "within"
    lifted_only_i1 = stated is not None and stated.startswith(OUTSIDE_FOR_I1)
    excused = within is False and valid is False and (not lifted_only_i1 or set(failing) <= {"duplicate_claims"})
    return {"stated": stated, "within": within, "flag": OUTSIDE_FLAG if excused else None}


def _verdict(info: RunInfo, checks: dict[str, CheckResult], outcomes: dict[str, dict[str, int]]) -> dict[str, Any]:
    claims, sequences, recovery = checks["duplicate_claims"], checks["sequences"], checks["recovery"]
    valid = compose(check.valid for check in checks.values())
    verdict = {
        "scenario": info.scenario,
        "profile": info.profile,
        "dynamodb": info.dynamodb,
        "timescale": info.timescale,
        "config": info.config,
        "connections": info.connections,
        "workers": info.workers,
        "valid": valid,
        "duplicate_claims": claims.details["duplicate_claims"],
        "duplicate_overlap_ms": claims.details["duplicate_overlap_ms"],
        "lost_sequences": sequences.details["lost_sequences"],
        "duplicate_deliveries": sequences.details["duplicate_deliveries"],
        "zombie_writes": checks["zombie_writes"].details["zombie_writes"]
        + (checks["log"].details["zombie_entries"] if "log" in checks else 0),
        "recovery_ms": recovery.details["recovery_ms"],
        "phases_ms": recovery.details["phases_ms"],
        "bound_ms": info.bound_ms,
        "outcomes": outcomes,
        "fault_model": fault_model(info, valid, [name for name, c in checks.items() if c.valid is False]),
        "checkers": {name: check.to_json() for name, check in checks.items()},
    }
    safe: dict[str, Any] = json_safe(verdict)
    return safe


def verdict_line(verdict: dict[str, Any]) -> str:
    """``VALID: 0 duplicate claims, 0 lost sequences, recovery max 7.69 s, bound 8.0 s``: the verdict's
    headline, then its figures (``verdict_figures``)."""
    said = {True: "VALID", False: "INVALID"}.get(verdict.get("valid"), "UNKNOWN")  # type: ignore[arg-type]
    return f"{said}: {verdict_figures(verdict)}"


def verdict_figures(verdict: dict[str, Any]) -> str:
    """``0 duplicate claims, 0 lost sequences, recovery max 7.69 s, bound 8.0 s``: the verdict's figures in
    seconds, the bound per fault kind when there are several."""
    worst = (verdict.get("recovery_ms") or {}).get("max")
    given = verdict.get("bound_ms")
    given = {"any": given} if isinstance(given, int | float) else given or {}  # one number: a wave-1 history
    bounds = {kind: ms for kind, ms in given.items() if ms is not None}
    if not bounds:
        bound = "no bound"
    elif len(bounds) == 1:
        bound = f"bound {_seconds(next(iter(bounds.values())))}"
    else:
        bound = "bounds " + ", ".join(f"{kind} {_seconds(ms)}" for kind, ms in sorted(bounds.items()))
    return (f"{verdict.get('duplicate_claims', '?')} duplicate claims, "
            f"{verdict.get('lost_sequences', '?')} lost sequences, "
            f"{'no recovery measured' if worst is None else 'recovery max ' + _seconds(worst)}, {bound}")


def _seconds(ms: float) -> str:
    return f"{ms / 1000:.2f} s" if ms < 10_000 else f"{ms / 1000:.1f} s"


def check_run(run_dir: str | Path) -> dict[str, Any]:
    """The verdict of the run in ``run_dir`` (not written)."""
    return analyse(read_events(run_dir)).verdict


def write_verdict(run_dir: str | Path, analysis: Analysis | None = None) -> dict[str, Any]:
    """Analyse the run (unless given its analysis) and write ``RUN_DIR/verdict.json``; returns the verdict."""
    verdict = (analysis if analysis is not None else analyse(read_events(run_dir))).verdict
    path = Path(run_dir) / VERDICT_FILE
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(verdict, indent=2, allow_nan=False) + "\n")
    os.replace(temporary, path)
    return verdict
