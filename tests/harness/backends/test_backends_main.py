"""``python -m harness.backends``: one JSON line, a working backend, a quiet exit on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil  # type: ignore[import-untyped]

from harness.backends import Backend
from harness.backends.resources import client

REPO = Path(__file__).resolve().parents[3]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.backends", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=60, check=False)


def test_help_explains_every_option() -> None:
    result = _run("--help")
    assert result.returncode == 0
    for option in ("--dynamodb", "--region", "--log-dir", "dynalite", "moto", "SIGTERM"):
        assert option in result.stdout


def test_unknown_engine_is_a_usage_error() -> None:
    result = _run("--dynamodb", "cassandra")
    assert result.returncode == 2
    assert "invalid choice: 'cassandra'" in result.stderr
    assert "Traceback" not in result.stderr


def test_serves_until_sigterm_then_exits_cleanly(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.backends", "--log-dir", str(tmp_path)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=os.environ | {"PYTHONPATH": str(REPO)},
    )
    try:
        assert process.stdout is not None
        described = json.loads(process.stdout.readline())
        children = psutil.Process(process.pid).children(recursive=True)
        backend = Backend("embedded", described["region"], described["endpoints"], described["queue_url"],
                          described["tables"])
        tables = client(backend.env(), "dynamodb").list_tables()["TableNames"]
        assert set(described["tables"].values()) <= set(tables)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0
    assert "Traceback" not in stderr
    assert len(children) >= 2
    _, alive = psutil.wait_procs(children, timeout=10)  # its reaper ends a moment after it, on EOF
    assert alive == []
