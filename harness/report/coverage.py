"""The report's coverage table (DESIGN §12: a claim of safety names what its runs reached): each transition of
``harness.checkers.coverage.TRANSITIONS`` (and any other release reason a run showed), how often each run
reached it and in all, and the ones no run reached, marked not covered."""

from __future__ import annotations

from collections import Counter

import pandas as pd

from harness.checkers.coverage import coverage, not_covered
from harness.report.model import RunData
from harness.report.render import Section, Table

NOT_COVERED = "NOT COVERED"


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
    """The "Coverage" section: the table, and the transitions no run reached named under it."""
    counts = {run.label: coverage(run.events) for run in runs}
    missing = not_covered(sum(counts.values(), Counter()))
    note = ("not covered: " + ", ".join(missing)) if missing else "every transition was reached"
    return Section("Coverage", [Table("Transitions reached, per run and in all (from the history)",
                                      coverage_frame(counts), note)], "coverage")
