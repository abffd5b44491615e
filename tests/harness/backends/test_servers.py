"""Server subprocesses: a server that fails to start is named with its stderr, and nothing is left behind."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest

from harness.backends import BackendError
from harness.backends.servers import spawn_server, start_dynalite, start_moto


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_server_that_exits_is_reported_with_its_stderr(tmp_path: Path) -> None:
    argv = _python("import sys; sys.stderr.write('bind: address already in use\\n'); sys.exit(3)")
    with pytest.raises(BackendError) as failure:
        spawn_server("fake-db", argv, tmp_path / "fake.log", deadline_s=10)
    message = str(failure.value)
    assert "fake-db" in message
    assert "exited with status 3" in message
    assert "bind: address already in use" in message


def test_server_that_never_reports_its_port_is_stopped(tmp_path: Path) -> None:
    argv = _python("import sys, time; sys.stderr.write('warming up\\n'); sys.stderr.flush(); time.sleep(60)")
    before = servers()
    with pytest.raises(BackendError, match=r"(?s)slow-db did not say it was ready within 1 s.*warming up"):
        spawn_server("slow-db", argv, tmp_path / "slow.log", deadline_s=1.0)
    assert servers() <= before


def servers() -> set[int]:
    """This process's children but its reaper (``harness.reaper``, which lives as long as this process)."""
    return {child.pid for child in psutil.Process().children() if "harness.reaper" not in child.cmdline()}


def test_server_that_reports_garbage_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="odd-db printed b'hello\\\\n' instead of its JSON ready line"):
        spawn_server("odd-db", _python("print('hello', flush=True); import time; time.sleep(60)"),
                     tmp_path / "odd.log", deadline_s=10)


def test_server_that_listens_but_never_answers_times_out(tmp_path: Path) -> None:
    code = (
        "import json, socket, time\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "print(json.dumps({'port': s.getsockname()[1]}), flush=True)\n"
        "time.sleep(60)\n"
    )
    with pytest.raises(BackendError, match=r"mute-db .*did not answer http://127\.0\.0\.1:\d+/ in time"):
        spawn_server("mute-db", _python(code), tmp_path / "mute.log", deadline_s=1.5)


def test_server_whose_ready_line_names_no_port_is_refused_and_stopped(tmp_path: Path) -> None:
    before = servers()
    with pytest.raises(BackendError, match=r"(?s)nameless-db \(pid \d+\) printed \{'pid': 1\} instead of its port"):
        spawn_server("nameless-db", _python("print('{\"pid\": 1}', flush=True); import time; time.sleep(60)"),
                     tmp_path / "nameless.log", deadline_s=10)
    assert servers() <= before


@pytest.mark.parametrize("start", [start_dynalite, start_moto], ids=["dynalite", "moto"])
def test_a_server_ends_on_sigterm_though_a_client_keeps_a_connection_open(tmp_path: Path, start: Any) -> None:
    """Its store is in memory: nothing to finish, so an open keep-alive connection (a fleet process's client)
    must not hold it until the grace is spent and it is killed."""
    server = start(tmp_path)
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as kept_open:
        kept_open.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
        kept_open.recv(1)  # the server has taken the connection up
        status = server.child.stop(grace_s=1.0)
    assert status == 0  # ended by its SIGTERM, not by the SIGKILL after the grace
