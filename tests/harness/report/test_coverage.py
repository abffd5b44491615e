"""The report's coverage table: counts per run and in all, and the transitions no run reached marked."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from harness.checkers.coverage import TRANSITIONS
from harness.report.build import build_report
from harness.report.coverage import NOT_COVERED, coverage_frame
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
