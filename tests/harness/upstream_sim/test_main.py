"""Tests of ``python -m harness.upstream_sim``: the ready line, serving, clean exit on signals, bad flags."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest
from websockets.asyncio.client import connect

from harness.upstream_sim.__main__ import build_parser, main

REPO = Path(__file__).resolve().parents[3]
COMMAND = [sys.executable, "-m", "harness.upstream_sim"]


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }


async def _run(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *COMMAND, *args, cwd=REPO, env=_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 20.0)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_prints_ready_line_serves_and_exits_cleanly(tmp_path: Path, signum: signal.Signals) -> None:
    history = tmp_path / "upstream.jsonl"
    process = await asyncio.create_subprocess_exec(
        *COMMAND, "--port", "0", "--rate", "50", "--ping-interval", "0.1", "--ping-timeout", "0.5",
        "--history", str(history),
        cwd=REPO, env=_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        ready = json.loads(await asyncio.wait_for(process.stdout.readline(), 20.0))
        assert set(ready) == {"ws_url", "control_url", "pid"}
        assert ready["pid"] == process.pid
        assert ready["ws_url"].startswith("ws://127.0.0.1:")
        assert ready["control_url"] == "http://" + ready["ws_url"].removeprefix("ws://")
        async with aiohttp.ClientSession() as http, http.get(ready["control_url"] + "/health") as response:
            assert response.status == 200 and await response.json() == {"ok": True}
        async with connect(ready["ws_url"] + "/streams/cli?from_seq=1") as client:
            assert json.loads(await asyncio.wait_for(client.recv(), 2.0))["seq"] == 1
            process.send_signal(signum)
            stdout, stderr = await asyncio.wait_for(process.communicate(), 10.0)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr
    assert stdout == b""  # the ready line was the only output
    assert b"Traceback" not in stderr
    events = [json.loads(line) for line in history.read_text().splitlines()]
    assert [event["reason"] for event in events if event["type"] == "sub.close"] == ["server_shutdown"]


def test_help_explains_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    stdout = capsys.readouterr().out
    for option in (
        "--host", "--port", "--rate", "--replay-depth", "--max-backlog", "--ping-interval", "--ping-timeout",
        "--close-timeout", "--evict-older", "--handshake-quota", "--handshake-burst", "--max-age", "--idle-timeout",
        "--timescale", "--seed", "--history",
    ):  # fmt: skip
        assert option in stdout


def test_zero_or_none_turns_a_gateway_limit_off() -> None:
    args = build_parser().parse_args(["--handshake-quota", "0", "--max-age", "none", "--idle-timeout", "NONE"])
    assert (args.handshake_quota, args.max_age, args.idle_timeout) == (None, None, None)
    defaults = build_parser().parse_args([])
    assert (defaults.handshake_quota, defaults.handshake_burst, defaults.max_age, defaults.idle_timeout) == (
        500.0, None, 7200.0, 600.0
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate", "-1"], "--rate"),
        (["--rate", "1e9"], "at most"),
        (["--rate", "fast"], "--rate"),
        (["--replay-depth", "0"], "--replay-depth"),
        (["--port", "70000"], "--port"),
        (["--replay-depth", "10", "--max-backlog", "5"], "--max-backlog"),
        (["--max-age", "-5"], "--max-age"),
        (["--idle-timeout", "later"], "--idle-timeout"),
        (["--timescale", "0"], "--timescale"),
        (["--handshake-quota", "-500"], "--handshake-quota"),
        (["--handshake-burst", "0"], "--handshake-burst"),
        (["--seed", "x"], "--seed"),
        (["--bogus"], "--bogus"),
    ],
)
def test_bad_options_exit_2_with_a_message(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


async def test_bad_option_exits_2_from_the_command_line() -> None:
    code, stdout, stderr = await _run("--ping-timeout", "0")
    assert code == 2
    assert "--ping-timeout" in stderr
    assert "Traceback" not in stderr and stdout == ""


def test_port_in_use_exits_1_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["--port", str(port)]) == 1
    captured = capsys.readouterr()
    assert "cannot start" in captured.err and str(port) in captured.err
    assert captured.out == ""
