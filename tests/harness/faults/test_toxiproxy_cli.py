"""The ``python -m harness.faults.toxiproxy`` command: flags, the ready line, signals, bad input."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness import http_client
from harness.processes import REPO_ROOT

COMMAND = [sys.executable, "-m", "harness.faults.toxiproxy"]


def start(*flags: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    process = subprocess.Popen(
        [*COMMAND, *flags], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, process.communicate(timeout=10)
    return process, json.loads(line)


def run(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *flags], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    ("flags", "stop_signal"),
    [
        (["-host", "127.0.0.1", "-port", "0", "-seed", "7"], signal.SIGTERM),
        (["--host=127.0.0.1", "--port=0"], signal.SIGINT),
    ],
)
def test_prints_its_url_serves_and_exits_0_on_signal(flags: list[str], stop_signal: int) -> None:
    process, ready = start(*flags)
    try:
        assert ready["pid"] == process.pid
        assert ready["url"].startswith("http://127.0.0.1:")
        assert http_client.request("GET", ready["url"] + "/version", timeout_s=5).json()["version"].startswith("2.")
        proxy = http_client.request("POST", ready["url"] + "/proxies", timeout_s=5,
                                    body=json.dumps({"name": "p", "upstream": "127.0.0.1:1"}).encode()).json()
        process.send_signal(stop_signal)
        _, stderr = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    with pytest.raises(ConnectionRefusedError):  # its proxies are closed too
        socket.create_connection(("127.0.0.1", int(proxy["listen"].rsplit(":", 1)[1])), timeout=2)


def test_seed_is_reported() -> None:
    process, ready = start("-port", "0", "-seed", "42")
    process.terminate()
    process.communicate(timeout=10)
    assert ready["seed"] == 42


def test_config_file_populates_proxies(tmp_path: Path) -> None:
    config = tmp_path / "toxiproxy.json"
    config.write_text(json.dumps([{"name": "db", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:1"}]))
    process, ready = start("-port", "0", "-config", str(config))
    try:
        proxies = http_client.request("GET", ready["url"] + "/proxies", timeout_s=5).json()
    finally:
        process.terminate()
        process.communicate(timeout=10)
    assert list(proxies) == ["db"] and proxies["db"]["enabled"] is True


def test_help_explains_every_flag() -> None:
    result = run("--help")
    assert result.returncode == 0
    for flag in ("-host", "-port", "-seed", "-config", "-log-level"):
        assert flag in result.stdout


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["-bogus"], "unrecognized arguments: -bogus"),
        (["-port", "70000"], "port must be 0..65535"),
        (["-port", "http"], "not a port number"),
        (["-seed", "x"], "invalid int value"),
    ],
)
def test_bad_flags_exit_2_with_a_message(flags: list[str], message: str) -> None:
    result = run(*flags)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_unusable_port_or_config_exits_1_with_a_message(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = run("-port", str(taken.getsockname()[1]))
    assert result.returncode == 1
    assert "cannot listen" in result.stderr and "Traceback" not in result.stderr

    config = tmp_path / "bad.json"
    config.write_text('[{"name": "x"}]')
    result = run("-port", "0", "-config", str(config))
    assert result.returncode == 1
    assert "missing required field: upstream at proxy 1" in result.stderr
    assert "Traceback" not in result.stderr
