"""The reaper: children of a harness killed outright are stopped (SIGTERM, then SIGKILL past the grace),
and a child the harness stopped itself is forgotten."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest

from harness import reaper
from harness.processes import REPO_ROOT

HARNESS = """
import sys, time
from pathlib import Path
from harness.processes import spawn
child = spawn("sleeper", ["python", "-c", "import time; time.sleep(600)"], Path(sys.argv[1]), ready_line=False)
print(child.pid, flush=True)
time.sleep(600)
"""


def test_the_children_of_a_harness_killed_outright_are_stopped(tmp_path: Path) -> None:
    harness = subprocess.Popen([sys.executable, "-c", HARNESS, str(tmp_path / "sleeper.log")], cwd=REPO_ROOT,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert harness.stdout is not None
        child = psutil.Process(int(harness.stdout.readline()))
        assert child.is_running()
        harness.kill()  # no clean-up of its own runs
        harness.wait()
        child.wait(timeout=15)  # raises psutil.TimeoutExpired if the child outlived its harness
    finally:
        harness.kill()
        harness.wait()


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    stubborn = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                               "print('ready', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert stubborn.stdout is not None and stubborn.stdout.readline() == "ready\n"

    reaper.reap({stubborn.pid}, grace_s=0.3)

    assert stubborn.wait(timeout=10) == -signal.SIGKILL


def test_a_child_the_harness_stopped_is_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    reaped: list[set[int]] = []
    monkeypatch.setattr(reaper, "reap", lambda groups: reaped.append(set(groups)))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"+101\n+102\n-101\nnoise\n+x\n")))

    assert reaper.main() == 0

    assert reaped == [{102}]
