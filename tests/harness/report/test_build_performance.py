"""A 10-minute history of 100 connections (10 msg/s each: ~600k emit and ~600k msg.persist events) reports in
well under the 30 s goal on an idle machine; the assertion is generous (90 s) so a loaded CI machine does not
flake, and the measured time is printed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.report import build_report
from tests.harness.report.histories import write_large_history

GOAL_S = 30.0
LIMIT_S = 90.0


@pytest.mark.timeout(600)
def test_a_ten_minute_hundred_connection_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = write_large_history(tmp_path, connections=100, seconds=600, rate=10.0)
    assert events > 1_200_000
    messages: list[tuple[float, str]] = []
    started = time.perf_counter()
    cpu = time.process_time()
    path = build_report([tmp_path], None, lambda m: messages.append((time.perf_counter() - started, m)))
    elapsed, cpu_s = time.perf_counter() - started, time.process_time() - cpu
    with capsys.disabled():
        print(f"\nreport of {events:,} events: {elapsed:.1f} s wall, {cpu_s:.1f} s CPU (goal {GOAL_S:.0f} s)")
        for at, message in messages:
            print(f"  {at:6.1f} s  {message}")
    assert path.is_file()
    assert len(list((tmp_path / "figures").glob("*.png"))) == 5      # with the zoom around the crash
    assert elapsed < LIMIT_S
