"""``python -m harness.report``: the report's path on stdout, progress on stderr, a one-line error and exit
status 2 (never a traceback) for a folder that is not a run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.report.__main__ import main
from tests.harness.report.histories import small_run

REPO = Path(__file__).resolve().parents[3]


def test_writes_the_report_into_the_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small_run(tmp_path)
    assert main([str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == str(tmp_path / "report.html")
    assert "reading the history" in captured.err and "wrote" in captured.err
    assert {p.name for p in tmp_path.iterdir()} >= {"report.html", "report.md", "phases.csv", "claims.csv",
                                                    "sequences.csv", "figures"}


def test_out_and_quiet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir, out = tmp_path / "run", tmp_path / "out" / "deeper"
    small_run(run_dir)
    assert main([str(run_dir), "--out", str(out), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and (out / "report.html").is_file()
    assert not (run_dir / "report.html").exists()


def test_not_a_run_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    expected = f"wsfleet report: error: {tmp_path / 'empty'} is not a run folder: it has no history/ folder"
    assert err.strip() == expected


def test_several_runs_without_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path), str(tmp_path)]) == 2
    assert "several run folders need an output folder (--out DIR)" in capsys.readouterr().err


def test_no_traceback_from_the_command_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "harness.report", str(tmp_path / "missing")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == f"wsfleet report: error: {tmp_path / 'missing'}: no such folder"


def test_help_explains_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ("RUN_DIR", "--out", "--quiet"):
        assert option in text
