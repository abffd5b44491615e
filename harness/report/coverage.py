"""The report's coverage table (DESIGN §12: a claim of safety names what its runs reached): each transition of
``harness.checkers.coverage.TRANSITIONS`` (and any other release reason a run showed), how often each run
reached it and in all, and the ones no run reached, marked not covered.

Run folder names can be long (150 characters without a break), so the per-run columns are headed by the
run's number (``run 1``, ...) and the note under the table names each number's run; with more runs than
``MAX_RUN_COLUMNS`` the table says how many runs reached each transition instead, and the note says so."""

from __future__ import annotations

from collections import Counter

import pandas as pd

from harness.checkers.coverage import coverage, not_covered
from harness.report.model import RunData
from harness.report.render import Section, Table

NOT_COVERED = "NOT COVERED"
MAX_RUN_COLUMNS = 20  # per-run columns that fit a 1,300 px page beside the transition's name


def coverage_frame(counts: dict[str, Counter[str]]) -> pd.DataFrame:
    """One row per transition: its count in each run (columns named by the run's label), the total, and
    whether any run reached it."""
    names = list(dict.fromkeys(name for run in counts.values() for name in run))
    frame = pd.DataFrame({"transition": names,
                          **{label: [run.get(name, 0) for name in names] for label, run in counts.items()}})
    frame["total"] = frame[list(counts)].sum(axis=1) if counts else 0
    frame["covered"] = ["yes" if total else NOT_COVERED for total in frame["total"]]
    return frame


def coverage_section(runs: list[RunData]) -> Section:
    """The "Coverage" section: the table, and under it the transitions no run reached and which run each
    column is."""
    counts = {f"run {number}": coverage(run.events) for number, run in enumerate(runs, 1)}
    missing = not_covered(sum(counts.values(), Counter()))
    notes = [("not covered: " + ", ".join(missing)) if missing else "every transition was reached"]
    frame = coverage_frame(counts)
    if len(counts) > MAX_RUN_COLUMNS:
        frame = frame.drop(columns=list(counts)).assign(runs=(frame[list(counts)] > 0).sum(axis=1))
        frame = frame[["transition", "runs", "total", "covered"]]
        notes.append(f"{len(counts)} runs: each column would not fit the page, so runs says how many reached "
                     "the transition (each run's own report has its counts)")
    else:
        notes.append("; ".join(f"{name}: {run.label}" for name, run in zip(counts, runs, strict=True)))
    return Section("Coverage", [Table("Transitions reached, per run and in all (from the history)", frame,
                                      "; ".join(notes))], "coverage")
