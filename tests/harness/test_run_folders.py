"""Run folders: absolute once, new per run by default (with a ``latest`` link), and never shared by two runs
unless the user forces it, which empties the folder first."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.cluster import ClusterSpec
from harness.run_folders import LATEST, RunFolderError, absolute, claim, new_run_folder


def test_a_relative_path_is_resolved_against_the_folder_the_command_started_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute("runs/x") == tmp_path.resolve() / "runs" / "x"
    # the worker and router processes run from the checkout: the spec they are given holds absolute paths
    assert ClusterSpec(run_dir=Path("here")).run_dir == tmp_path.resolve() / "here"


def test_default_folders_are_new_per_run_with_a_latest_link(tmp_path: Path) -> None:
    first, second = new_run_folder(tmp_path / "runs"), new_run_folder(tmp_path / "runs")
    assert first != second and first.is_dir() and second.is_dir() and first.parent == tmp_path / "runs"
    assert (tmp_path / "runs" / LATEST).resolve() == second


def test_a_folder_holding_anything_is_refused_unless_forced_and_then_emptied(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "history").mkdir(parents=True)
    (run / "history" / "harness.jsonl").write_text('{"type": "run.start"}\n')
    (run / "verdict.json").write_text("{}")
    with pytest.raises(RunFolderError, match=r"^--run-dir .*run is not empty .*add --force"):
        claim(run, force=False)
    assert (run / "verdict.json").exists()  # refused: nothing touched
    assert claim(run, force=True) == run.resolve() and list(run.iterdir()) == []
    assert claim(tmp_path / "new" / "deep", force=False).is_dir()  # a new folder is created
    assert claim(run, force=False) == run.resolve()  # an empty one is fine


def test_a_file_where_a_folder_is_expected_is_one_clear_line(tmp_path: Path) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    for force in (False, True):
        with pytest.raises(RunFolderError, match=r"^--out .*notes\.txt is a file, not a folder$"):
            claim(file, force=force, option="--out")
    assert file.read_text() == "mine"
    with pytest.raises(RunFolderError, match="is a file, not a folder"):
        new_run_folder(file)


# -- the commands, run from a folder outside the checkout -------------------------------------------------------
SHORT = """name: short
workers: 2
faults:
  - {at_s: 0.2, kind: kill, target: worker-1}
bounds:
  kill: {hardened: "1.1*lease + 1000", default: "lease + reconcile"}
"""


def wsfleet(cwd: Path, *argv: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout_s)


def run_starts(run_dir: Path) -> list[dict[str, Any]]:
    return [event for path in sorted((run_dir / "history").glob("*.jsonl"))
            for event in map(json.loads, path.read_text().splitlines()) if event["type"] == "run.start"]


@pytest.mark.e2e
def test_a_scenario_run_into_a_used_folder_from_outside_the_checkout(tmp_path: Path) -> None:
    """Relative paths name the folder the command was started in (the workers once wrote their history into
    the checkout's), and a run into a folder an earlier run left behind refuses it without --force; with it,
    the verdict reads the new run only.  The earlier run is written as it leaves its folder (history, logs,
    verdict), not run: what is tested is what a run does with the folder, which one run shows."""
    work = tmp_path / "mine"
    (work / "run" / "history").mkdir(parents=True)
    (work / "run" / "logs").mkdir()
    (work / "short.yaml").write_text(SHORT)
    earlier = {"type": "run.start", "t": 1.0, "src": "harness", "scenario": "short", "connections": 2}
    (work / "run" / "history" / "harness.jsonl").write_text(json.dumps(earlier) + "\n")
    (work / "run" / "history" / "worker-1.jsonl").write_text('{"type": "worker.start", "t": 2.0, "src": "worker-1"}\n')
    (work / "run" / "logs" / "worker-1.log").write_text("an earlier run's log\n")
    (work / "run" / "verdict.json").write_text(json.dumps({"valid": True, "connections": 2}))

    again = wsfleet(work, "scenario", "--from", "short.yaml", "--run-dir", "run", "--no-report",
                    "--connections", "3")
    assert again.returncode == 2 and "is not empty" in again.stderr and "--force" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    assert json.loads((work / "run" / "verdict.json").read_text())["connections"] == 2  # refused: untouched

    forced = wsfleet(work, "scenario", "--from", "short.yaml", "--run-dir", "run", "--no-report",
                     "--connections", "3", "--force")
    assert forced.returncode in (0, 1), forced.stderr[-2000:]  # it ran (valid or not: not what is tested here)
    assert json.loads((work / "run" / "verdict.json").read_text())["connections"] == 3
    assert [start["connections"] for start in run_starts(work / "run")] == [3]
    assert (work / "run" / "history" / "worker-2.jsonl").exists()
    assert "an earlier run's log" not in (work / "run" / "logs" / "worker-1.log").read_text()


@pytest.mark.e2e
def test_up_runs_from_outside_the_checkout_into_a_new_folder_per_run(tmp_path: Path) -> None:
    work = tmp_path / "mine"
    work.mkdir()
    up = subprocess.Popen([sys.executable, "-m", "harness.cli", "up", "--workers", "2"], cwd=work,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert up.stdout is not None
        line = up.stdout.readline()  # one JSON line once every worker is ready; EOF if it failed
        assert line, up.communicate(timeout=60)[1][-2000:]
        run_dir = Path(json.loads(line)["run_dir"])
        assert run_dir.is_absolute() and run_dir.parent == work.resolve() / "runs" / "up"
        assert (work / "runs" / "up" / "latest").resolve() == run_dir
        started = wsfleet(work, "start", "c1", timeout_s=60)  # finds the running fleet from this folder
        assert started.returncode == 0, started.stderr
        # the Locust recipe reads this folder's state file; its run folder must not depend on Locust's folder
        assert json.loads((work / ".wsfleet" / "up.json").read_text())["run_dir"] == str(run_dir)
    finally:
        up.send_signal(signal.SIGTERM)
        _, err = up.communicate(timeout=60)
    assert up.returncode == 0, err[-2000:]
    assert sorted(p.name for p in (run_dir / "history").glob("worker-*.jsonl")) == ["worker-1.jsonl",
                                                                                   "worker-2.jsonl"]
    # its report names what ran, not ``wsfleet report: ? / ?``
    reported = wsfleet(work, "report", "runs/up/latest", timeout_s=180)
    assert reported.returncode == 0, reported.stderr[-2000:]
    text = (run_dir / "report.md").read_text()
    assert text.startswith("# wsfleet report: up / hardened\n"), text[:200]
    assert "- **Scenario**: up, 5 msg/s per stream, streams STARTed by clients (seed 0)" in text
    assert "- **Time scale**: 0.1 " in text and " connections, 2 workers, " in text


def test_force_never_empties_the_current_folder_home_or_a_checkout(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    (work / "notes").mkdir(parents=True)
    (tmp_path / "checkout" / ".git").mkdir(parents=True)
    monkeypatch.chdir(work)
    for folder in (work, tmp_path, tmp_path / "checkout", Path.home()):
        with pytest.raises(RunFolderError, match="--force empties a run folder, not this one"):
            claim(folder, force=True)
    assert (work / "notes").is_dir() and (tmp_path / "checkout" / ".git").is_dir()
