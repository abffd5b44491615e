"""The report's coverage table: counts per run and in all, and the transitions no run reached marked."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from harness.checkers.coverage import TRANSITIONS
from harness.report import coverage
from harness.report.build import build_report
from harness.report.coverage import NOT_COVERED, coverage_frame
from harness.report.model import RunData, load_run
from harness.report.render import Table
from tests.harness.report.histories import small_run


def test_the_frame_counts_each_run_and_marks_what_no_run_reached() -> None:
    frame = coverage_frame({"run 1": Counter({"burial": 2, "transfer": 0}), "run 2": Counter({"transfer": 0,
                                                                                            "burial": 1})})
    rows = {row["transition"]: row for row in frame.to_dict("records")}
    assert rows["burial"] == {"transition": "burial", "run 1": 2, "run 2": 1, "total": 3, "covered": "yes"}
    assert rows["transfer"]["covered"] == NOT_COVERED


def test_a_reports_coverage_table_lists_every_transition(tmp_path: Path) -> None:
    small_run(tmp_path)
    build_report([tmp_path], None, lambda _: None)
    markdown = (tmp_path / "report.md").read_text()
    section = markdown[markdown.index("## Coverage"):]
    assert all(name in section for name in TRANSITIONS)
    assert "not covered: " in section and NOT_COVERED in section
    assert "Coverage" in (tmp_path / "report.html").read_text()


@pytest.fixture(scope="module")
def long_named(tmp_path_factory: pytest.TempPathFactory) -> RunData:
    """A run whose folder's name is 150 characters without a break, read once for the tests below."""
    run_dir = tmp_path_factory.mktemp("coverage") / f"crash-{'x' * 150}"
    small_run(run_dir)
    return load_run(run_dir, lambda _: None)


def test_runs_are_columns_by_number_and_the_note_names_each(long_named: RunData) -> None:
    """A long run folder name goes in the note, which wraps, and its column is headed by its number."""
    table = coverage.coverage_section([long_named, long_named]).blocks[0]
    assert isinstance(table, Table)
    assert list(table.frame.columns) == ["transition", "run 1", "run 2", "total", "covered"]
    assert table.note is not None and table.note.endswith(f"run 1: {long_named.label}; run 2: {long_named.label}")


def test_more_runs_than_fit_are_counted_per_transition_and_the_note_says_so(
        long_named: RunData, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coverage, "MAX_RUN_COLUMNS", 2)  # three runs are more than fit: as 21 would be
    few = coverage.coverage_section([long_named]).blocks[0]
    many = coverage.coverage_section([long_named] * 3).blocks[0]
    assert isinstance(few, Table) and isinstance(many, Table)
    assert list(many.frame.columns) == ["transition", "runs", "total", "covered"]
    assert (many.frame["runs"] == (few.frame["run 1"] > 0) * 3).all()
    assert (many.frame["total"] == few.frame["total"] * 3).all()
    assert many.note is not None and "3 runs: each column would not fit" in many.note
