"""One run as the report sees it: its history (indexed by event type), the checkers' analysis of it, and the
few raw series the figures draw (STARTED periods, persisted and emitted sequences of chosen streams).

Nothing here decides anything the checkers decide: verdicts, phases, claims, lost and duplicated ranges all
come from ``harness.checkers.verdict.analyse``.  ``load_run`` turns every reason a folder is not a run into
a ``ReportError`` with a message that names the folder.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.checkers.events import Events, Fault, RunInfo, faults, read_events, select, worker_of
from harness.checkers.verdict import VERDICT_FILE, Analysis, analyse
from harness.history import HistoryError

Progress = Callable[[str], None]


class ReportError(ValueError):
    """A report cannot be built (a folder is not a run, an output folder cannot be written); the message
    says which and why.  A ``ValueError``: bad input, not a bug."""


class RunData:
    """A run folder read and analysed."""

    def __init__(self, run_dir: Path, label: str, events: Events, analysis: Analysis,
                 saved_verdict: dict[str, Any] | None) -> None:
        self.run_dir = run_dir
        self.label = label
        self.events = events
        self.analysis = analysis
        self.saved_verdict = saved_verdict

    @property
    def info(self) -> RunInfo:
        return self.analysis.info

    @property
    def verdict(self) -> dict[str, Any]:
        return self.analysis.verdict

    @property
    def scenario(self) -> str:
        return self.info.scenario or "?"

    @property
    def profile(self) -> str:
        """The profile, with the reconnect policy when the run chose one (``hardened/none``), so runs that
        differ only in their policy are compared side by side."""
        policy = self.info.settings.get("reconnect_policy")
        base = self.info.profile or "?"
        return f"{base}/{policy}" if policy and policy != "profile" else base

    @property
    def origin_t(self) -> float:
        """Time zero of every figure and relative time in the report: ``run.start``, else the first event."""
        return self.info.start_t if self.info.start_t is not None else self.info.first_t

    def seconds(self, t: Any) -> Any:
        """Unix ms (scalar or array) as seconds since ``origin_t``."""
        return (np.asarray(t, dtype="float64") - self.origin_t) / 1000.0

    @cached_property
    def faults(self) -> list[Fault]:
        return faults(self.events)

    @cached_property
    def connections(self) -> list[str]:
        """Every pk the checkers' tables name, sorted."""
        names: set[str] = set()
        for table in ("sequences", "claims", "phases"):
            names.update(str(row["pk"]) for row in self.analysis.table(table) if row.get("pk") is not None)
        return sorted(names)

    @cached_property
    def started_periods(self) -> dict[str, list[tuple[float, float]]]:
        """Per pk, the [conn.started, conn.stopped] periods (a pk without such events: the whole run)."""
        conn = select(self.events, ["conn.started", "conn.stopped"], ["t", "pk", "type"])
        conn = conn.dropna(subset=["pk"])
        periods: dict[str, list[tuple[float, float]]] = {}
        for pk, group in conn.groupby("pk", sort=False):
            opened: float | None = None
            for t, kind in zip(group["t"].tolist(), group["type"].tolist(), strict=True):
                if kind == "conn.started" and opened is None:
                    opened = t
                elif kind == "conn.stopped":
                    began = opened if opened is not None else self.origin_t
                    periods.setdefault(str(pk), []).append((began, t))
                    opened = None
            if opened is not None:
                periods.setdefault(str(pk), []).append((opened, self.info.end_t))
        whole = (self.origin_t, self.info.end_t)
        return {pk: periods.get(pk, [whole]) for pk in self.connections}

    def persisted(self, pks: Collection[str]) -> pd.DataFrame:
        """``msg.persist`` events with outcome ok of these pks: t, pk, worker, seq_from, seq_to."""
        frame = select(self.events, "msg.persist", ["t", "src", "pk", "worker", "seq_from", "seq_to", "outcome"])
        frame = frame.loc[(frame["outcome"] == "ok") & frame["pk"].isin(list(pks))]
        return frame.assign(worker=worker_of(frame))[["t", "pk", "worker", "seq_from", "seq_to"]]

    def emitted(self, pks: Collection[str]) -> pd.DataFrame:
        """``emit`` events of these pks: t, pk, seq."""
        frame = select(self.events, "emit", ["t", "pk", "seq"])
        return frame.loc[frame["pk"].isin(list(pks))].dropna(subset=["seq"])


def load_run(run_dir: Path, progress: Progress, label: str | None = None) -> RunData:
    """Read and analyse the run in ``run_dir``."""
    if not run_dir.exists():
        raise ReportError(f"{run_dir}: no such folder")
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir} is not a run folder: it is a file")
    files = sorted((run_dir / "history").glob("*.jsonl"))
    if files:
        size = sum(path.stat().st_size for path in files)
        progress(f"{run_dir}: reading the history ({len(files)} files, {size / 1e6:.1f} MB)")
    started = time.perf_counter()
    try:
        events = read_events(run_dir)
    except HistoryError as exc:
        raise ReportError(str(exc)) from None
    if not len(events):
        raise ReportError(f"{run_dir} is not a run folder: its history holds no events")
    progress(f"{run_dir}: read {len(events):,} events in {time.perf_counter() - started:.1f} s; checking")
    started = time.perf_counter()
    analysis = analyse(events)
    progress(f"{run_dir}: checked in {time.perf_counter() - started:.1f} s "
             f"(valid: {analysis.verdict['valid']})")
    return RunData(run_dir, label or run_dir.name, events, analysis, _saved_verdict(run_dir))


def _saved_verdict(run_dir: Path) -> dict[str, Any] | None:
    """The run's ``verdict.json`` when there is a readable one (the report notes a disagreement)."""
    path = run_dir / VERDICT_FILE
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return saved if isinstance(saved, dict) else None


def labels_for(run_dirs: list[Path]) -> list[str]:
    """Short unique names for runs: the folder name, or the path when two folders share a name."""
    names = [path.name or str(path) for path in run_dirs]
    if len(set(names)) == len(names):
        return names
    return [str(path) for path in run_dirs]
