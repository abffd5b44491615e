"""Tests of fleet.router_http: the HTTP adapter end to end against the embedded backend, in process and as
the ``python -m fleet.router_http`` command."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fleet.config import ENV_VARS, FleetConfig
from fleet.router import MAX_BODY_BYTES
from fleet.router_http import HttpLimits, RouterServer, main, start_server
from harness.backends.resources import client

ROOT = Path(__file__).resolve().parents[2]
URL = "ws://127.0.0.1:9000/streams/c1"
START = {"event_type": "START", "connection_id": "c1", "ws_url": URL}


@pytest.fixture
def env(clean_backend: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    values = {
        **clean_backend.env(),
        ENV_VARS["allowed_ws_hosts"]: "127.0.0.1:9000",
        ENV_VARS["history_path"]: str(tmp_path / "router.jsonl"),
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def connection_items(env: dict[str, str]) -> list[dict[str, Any]]:
    table = FleetConfig.from_env(env).connections_table
    items: list[dict[str, Any]] = client(env, "dynamodb").scan(TableName=table, ConsistentRead=True)["Items"]
    return items


def notifications(env: dict[str, str]) -> list[str]:
    sqs = client(env, "sqs")
    received = sqs.receive_message(QueueUrl=env[ENV_VARS["queue_url"]], MaxNumberOfMessages=10)
    return [message["Body"] for message in received.get("Messages", [])]


@pytest.fixture
async def server(env: dict[str, str]) -> AsyncIterator[RouterServer]:
    running = await start_server(FleetConfig.from_env(), "127.0.0.1", 0)
    yield running
    await running.stop()


async def request(method: str, url: str, **kwargs: Any) -> tuple[int, Any, aiohttp.ClientResponse]:
    async with aiohttp.ClientSession() as session, session.request(method, url, **kwargs) as response:
        assert response.content_type == "application/json"
        return response.status, await response.json(), response


async def test_post_events_applies_the_event(server: RouterServer, env: dict[str, str]) -> None:
    status, payload, _ = await request("POST", server.url + "/events", json=START)

    assert (status, payload) == (200, {"ok": True, "connection_id": "c1", "desired_state": "STARTED"})
    assert [item["pk"]["S"] for item in connection_items(env)] == ["CONN#c1"]
    assert notifications(env) == ['{"pk": "CONN#c1"}']
    events = [json.loads(line) for line in Path(env[ENV_VARS["history_path"]]).read_text().splitlines()]
    assert [(e["kind"], e["status"]) for e in events] == [("START", 200)]


async def test_bad_event_answers_400_and_changes_nothing(server: RouterServer, env: dict[str, str]) -> None:
    status, payload, _ = await request("POST", server.url + "/events", data=b"{not json")

    assert status == 400
    assert "not valid JSON" in payload["error"]
    assert connection_items(env) == []
    assert notifications(env) == []


async def test_health(server: RouterServer) -> None:
    status, payload, _ = await request("GET", server.url + "/health")
    assert (status, payload) == (200, {"ok": True, "profile": "blog"})


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/nope", 404),
    ("POST", "/events/extra", 404),
    ("GET", "/events", 405),
    ("PUT", "/events", 405),
    ("DELETE", "/health", 405),
])
async def test_other_paths_and_methods_answer_json(
    server: RouterServer, env: dict[str, str], method: str, path: str, status: int
) -> None:
    answered, payload, response = await request(method, server.url + path, json=START)

    assert answered == status
    assert path in payload["error"]
    if status == 405:
        assert "POST" in response.headers["Allow"] or "GET" in response.headers["Allow"]
    assert connection_items(env) == []


async def test_oversized_body_answers_400(server: RouterServer, env: dict[str, str]) -> None:
    body = json.dumps(START).encode() + b" " * MAX_BODY_BYTES

    status, payload, _ = await request("POST", server.url + "/events", data=body)

    assert status == 400
    assert f"larger than {MAX_BODY_BYTES} bytes" in payload["error"]
    assert connection_items(env) == []
    assert notifications(env) == []


async def test_oversized_chunked_body_answers_400(server: RouterServer, env: dict[str, str]) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(8):
            yield b" " * 4096

    status, payload, _ = await request("POST", server.url + "/events", data=chunks())

    assert status == 400
    assert "larger than" in payload["error"]
    assert connection_items(env) == []


async def test_oversized_body_is_refused_before_it_is_all_read(server: RouterServer) -> None:
    """A client announcing 50 MB and sending only 32 KB still gets its answer: the server stopped reading."""
    host, port = server.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            b"POST /events HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\n"
            b"Content-Length: 50000000\r\n\r\n" + b" " * 32768
        )
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), timeout=10)
        rest = await asyncio.wait_for(reader.read(), timeout=10)  # the server closes the connection
    finally:
        writer.close()
    assert status_line.startswith(b"HTTP/1.1 400")
    assert b"larger than" in rest


@pytest.fixture
async def strict_server(env: dict[str, str]) -> AsyncIterator[RouterServer]:
    """A router with short client limits: half a second for a body or a first request, two connections."""
    limits = HttpLimits(body_timeout_s=0.5, idle_timeout_s=0.5, max_connections=2)
    running = await start_server(FleetConfig.from_env(), "127.0.0.1", 0, limits)
    yield running
    await running.stop()


async def raw(server: RouterServer, sent: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = server.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(sent)
    await writer.drain()
    return reader, writer


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    """Everything the server sends until it closes the connection (10 s at most: a server that never closes
    fails the test here)."""
    try:
        return await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()


async def test_a_half_sent_body_is_answered_408_and_closed(strict_server: RouterServer, env: dict[str, str]) -> None:
    """A client that announces 100 bytes and sends 10 holds its connection no longer than the body timeout."""
    sent = await raw(strict_server, b"POST /events HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\n"
                                    b"Content-Length: 100\r\n\r\n" + b'{"event":1')
    received = await answer(*sent)
    assert received.startswith(b"HTTP/1.1 408") and b"did not arrive within 0.5 s" in received
    assert connection_items(env) == []


async def test_half_sent_headers_are_closed(strict_server: RouterServer) -> None:
    assert await answer(*await raw(strict_server, b"POST /events HTTP/1.1\r\nHost: rou")) == b""


async def test_connections_beyond_the_cap_are_answered_503(strict_server: RouterServer) -> None:
    """Two kept-alive connections (each answered, so the server holds both) fill the cap of two: a third is
    answered 503 at once and closed; once one closes, a new one is served again."""
    health = b"GET /health HTTP/1.1\r\nHost: router\r\n\r\n"
    held = [await raw(strict_server, health) for _ in range(2)]
    for reader, _ in held:
        assert (await asyncio.wait_for(reader.readline(), timeout=10)).startswith(b"HTTP/1.1 200")
    refused = await answer(*await raw(strict_server, health))
    assert refused.startswith(b"HTTP/1.1 503") and b"too many connections" in refused
    for reader, writer in held:
        await answer(reader, writer)  # the idle timeout closes them
    served = await answer(*await raw(strict_server, health.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")))
    assert served.startswith(b"HTTP/1.1 200")


async def read_json_line(stream: asyncio.StreamReader) -> dict[str, Any]:
    line = await asyncio.wait_for(stream.readline(), timeout=60)
    assert line, "the router exited before printing its ready line"
    parsed: dict[str, Any] = json.loads(line)
    return parsed


async def test_cli_prints_its_url_serves_and_exits_0_on_sigterm(env: dict[str, str]) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fleet.router_http", "--host", "127.0.0.1", "--port", "0",
        cwd=ROOT, env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        ready = await read_json_line(process.stdout)
        assert set(ready) == {"url", "pid"}
        assert ready["pid"] == process.pid
        assert ready["url"].startswith("http://127.0.0.1:")

        status, _, _ = await request("POST", ready["url"] + "/events", json=START)
        assert status == 200
        log = await read_json_line(process.stdout)
        assert (log["kind"], log["pk"], log["status"]) == ("START", "CONN#c1", 200)

        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr.decode()
    assert b"Traceback" not in stderr
    assert [item["pk"]["S"] for item in connection_items(env)] == ["CONN#c1"]


async def run_cli(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fleet.router_http", *args, cwd=ROOT, env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


def run_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``main`` in this process, as the command runs it (``sys.exit(main())``): a bad input exits with its
    code before anything is served; an exception other than ``SystemExit`` would be a traceback."""
    try:
        returncode = main(args)
    except SystemExit as exc:
        returncode = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return returncode, captured.out, captured.err


@pytest.mark.timeout(60)  # a bad input taken as good would serve until stopped
@pytest.mark.parametrize(("args", "changes", "code", "message"), [
    (["--port", "0"], {ENV_VARS["profile"]: "bogus"}, 2, "configuration error: WSFLEET_PROFILE must be"),
    (["--port", "0"], {ENV_VARS["allowed_ws_hosts"]: "host:abc"}, 2, "bad port 'abc' in 'host:abc'"),
    (["--port", "70000"], {}, 2, "--port must be between 0 and 65535"),
    (["--port", "x"], {}, 2, "invalid int value"),
], ids=["bad-profile", "bad-allowlist", "port-range", "port-not-a-number"])
def test_cli_bad_input_exits_non_zero_without_traceback(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    args: list[str], changes: dict[str, str], code: int, message: str
) -> None:
    for name, value in changes.items():
        monkeypatch.setenv(name, value)
    returncode, stdout, stderr = run_main(args, capsys)

    assert returncode == code
    assert message in stderr
    assert "Traceback" not in stderr
    assert stdout == ""


async def test_cli_port_in_use_exits_1(env: dict[str, str], server: RouterServer) -> None:
    port = server.url.rsplit(":", 1)[1]

    returncode, _, stderr = await run_cli(["--port", port], env)

    assert returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in stderr
    assert "Traceback" not in stderr


def test_cli_help_explains_every_option(env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    returncode, stdout, _ = run_main(["--help"], capsys)

    assert returncode == 0
    assert "--host" in stdout and "--port" in stdout and "SIGTERM" in stdout


async def test_post_reapply_control_re_applies_the_journal(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VARS["control_journal"], "on")
    running = await start_server(FleetConfig.from_env(), "127.0.0.1", 0)
    try:
        assert (await request("POST", running.url + "/events", json=START))[0] == 200
        table = FleetConfig.from_env(env).connections_table
        client(env, "dynamodb").delete_item(TableName=table, Key={"pk": {"S": "CONN#c1"}})  # the START lost

        status, payload, _ = await request("POST", running.url + "/reapply-control")
    finally:
        await running.stop()

    assert (status, payload) == (200, {"reapplied": 1, "failed": 0})
    assert sorted(item["pk"]["S"] for item in connection_items(env)) == ["CONN#c1", "CTL#c1"]
