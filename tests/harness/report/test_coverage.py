"""The report's coverage table: counts per run and in all, and the transitions no run reached marked."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from harness.checkers.coverage import TRANSITIONS
from harness.report.build import build_report
from harness.report.coverage import MAX_RUN_COLUMNS, NOT_COVERED, coverage_frame, coverage_section
from harness.report.model import load_run
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


def test_runs_are_columns_by_number_and_the_note_names_each(tmp_path: Path) -> None:
    """A run folder's name may be 150 characters without a break: it goes in the note, which wraps, and
    its column is headed by its number."""
    long_name = tmp_path / f"crash-{'x' * 150}"
    small_run(long_name)
    run = load_run(long_name, lambda _: None)
    table = coverage_section([run, run]).blocks[0]
    assert isinstance(table, Table)
    assert list(table.frame.columns) == ["transition", "run 1", "run 2", "total", "covered"]
    assert table.note is not None and table.note.endswith(f"run 1: {run.label}; run 2: {run.label}")


def test_more_runs_than_fit_are_counted_per_transition_and_the_note_says_so(tmp_path: Path) -> None:
    small_run(tmp_path)
    run = load_run(tmp_path, lambda _: None)
    few = coverage_section([run]).blocks[0]
    many = coverage_section([run] * (MAX_RUN_COLUMNS + 1)).blocks[0]
    assert isinstance(few, Table) and isinstance(many, Table)
    assert list(many.frame.columns) == ["transition", "runs", "total", "covered"]
    reached = few.frame["run 1"] > 0
    assert (many.frame["runs"] == reached * (MAX_RUN_COLUMNS + 1)).all()
    assert (many.frame["total"] == few.frame["total"] * (MAX_RUN_COLUMNS + 1)).all()
    assert many.note is not None and f"{MAX_RUN_COLUMNS + 1} runs: each column would not fit" in many.note
