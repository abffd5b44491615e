"""End-to-end tests of the simulated upstream over real sockets on 127.0.0.1: frames, resume, session records,
keepalive, eviction, resets, the control API and the history file."""

from __future__ import annotations

import json
import time
from pathlib import Path

import aiohttp
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.harness.upstream_sim.sim_client import (
    MakeSimulator,
    control,
    frames,
    next_frame,
    subscribe,
    wait_until,
)


async def test_frames_are_consecutive_with_data_and_ts(make_simulator: MakeSimulator) -> None:
    _, ws_url, _ = await make_simulator()
    before = time.time() * 1000
    async with subscribe(ws_url, "conn-a") as client:
        received = await frames(client, 10)
    after = time.time() * 1000
    first = received[0]["seq"]
    assert [frame["seq"] for frame in received] == list(range(first, first + 10))
    for frame in received:
        assert frame["data"] == f"conn-a:{frame['seq']}"
        assert isinstance(frame["ts"], int)
        assert before - 1 <= frame["ts"] <= after


async def test_rate_is_respected(make_simulator: MakeSimulator) -> None:
    _, ws_url, _ = await make_simulator(rate=50.0)
    async with subscribe(ws_url, "rated") as client:
        await next_frame(client)
        started = time.monotonic()
        await frames(client, 25)
        elapsed = time.monotonic() - started
    assert 0.35 <= elapsed <= 0.9  # 25 frames at 50/s: 0.5 s


async def test_emission_needs_no_subscriber(make_simulator: MakeSimulator) -> None:
    simulator, _, control_url = await make_simulator()
    status, created = await control("POST", f"{control_url}/streams/lonely")
    assert status == 201
    assert created["id"] == "lonely" and created["head_seq"] == 0 and created["rate"] == 50.0
    await wait_until(lambda: simulator.streams["lonely"].head_seq >= 5)
    status, again = await control("POST", f"{control_url}/streams/lonely")
    assert status == 200 and again["head_seq"] >= 5


async def test_from_seq_resumes_exactly(make_simulator: MakeSimulator) -> None:
    simulator, ws_url, control_url = await make_simulator()
    await control("POST", f"{control_url}/streams/resume?rate=200")
    await wait_until(lambda: simulator.streams["resume"].head_seq >= 20)
    async with subscribe(ws_url, "resume", from_seq=5) as client:
        received = await frames(client, 25)
    assert [frame["seq"] for frame in received] == list(range(5, 30))
    session = simulator.streams["resume"].sessions[0]
    assert (session.from_seq, session.replay_from) == (5, 5)


async def test_from_seq_older_than_buffer_records_replay_from(make_simulator: MakeSimulator) -> None:
    simulator, ws_url, control_url = await make_simulator(replay_depth=10)
    await control("POST", f"{control_url}/streams/old?rate=200")
    await wait_until(lambda: simulator.streams["old"].head_seq >= 30)
    async with subscribe(ws_url, "old", from_seq=1) as client:
        received = await frames(client, 12)
    _, stream = await control("GET", f"{control_url}/streams/old")
    record = stream["sessions"][0]
    assert record["from_seq"] == 1
    assert record["replay_from"] > 20
    first = received[0]["seq"]
    assert first == record["replay_from"]
    assert [frame["seq"] for frame in received] == list(range(first, first + 12))


async def test_from_seq_ahead_of_head_waits(make_simulator: MakeSimulator) -> None:
    simulator, ws_url, control_url = await make_simulator()
    await control("POST", f"{control_url}/streams/ahead")
    target = simulator.streams["ahead"].head_seq + 15
    async with subscribe(ws_url, "ahead", from_seq=target) as client:
        received = await frames(client, 3)
    assert [frame["seq"] for frame in received] == [target, target + 1, target + 2]


async def test_live_subscription_starts_at_head_plus_one(make_simulator: MakeSimulator) -> None:
    simulator, ws_url, control_url = await make_simulator()
    await control("POST", f"{control_url}/streams/live")
    await wait_until(lambda: simulator.streams["live"].head_seq >= 10)
    head_before = simulator.streams["live"].head_seq
    async with subscribe(ws_url, "live") as client:
        received = await frames(client, 3)
    session = simulator.streams["live"].sessions[0]
    assert session.from_seq is None
    assert session.replay_from >= head_before + 1
    assert received[0]["seq"] == session.replay_from


async def test_session_records_worker_and_lifecycle(make_simulator: MakeSimulator) -> None:
    simulator, ws_url, control_url = await make_simulator()
    async with subscribe(ws_url, "rec", worker="worker-7", gen="a1b2") as client:
        received = await frames(client, 5)
        _, stream = await control("GET", f"{control_url}/streams/rec")
        live = stream["sessions"][0]
        assert (live["worker"], live["gen"]) == ("worker-7", "a1b2")
        assert live["closed"] is None and live["close_reason"] is None
        assert live["opened"] <= time.time() * 1000
    await wait_until(lambda: not simulator.streams["rec"].sessions[0].is_open)
    async with subscribe(ws_url, "rec") as anonymous:
        await next_frame(anonymous)
    await wait_until(lambda: not simulator.streams["rec"].sessions[1].is_open)
    _, stream = await control("GET", f"{control_url}/streams/rec")
    first, second = stream["sessions"]
    assert first["session"] != second["session"]
    assert first["session"].startswith("s-")
    assert first["close_reason"] == "client_close"
    assert first["opened"] <= first["closed"]
    assert first["last_seq_sent"] >= received[-1]["seq"]
    assert first["opened"] <= first["last_pong_t"] <= first["closed"]
    assert second["worker"] == "" and second["gen"] == ""
    assert set(first) == {
        "session", "worker", "gen", "from_seq", "replay_from", "opened", "closed",
        "close_reason", "last_seq_sent", "last_pong_t",
    }  # fmt: skip


async def test_frozen_client_times_out_without_blocking_others(make_simulator: MakeSimulator) -> None:
    simulator, ws_url, _ = await make_simulator(rate=100.0)
    async with (
        subscribe(ws_url, "shared", worker="frozen") as frozen,
        subscribe(ws_url, "shared", worker="healthy") as healthy,
    ):
        await next_frame(frozen)
        await wait_until(lambda: len(simulator.streams["shared"].sessions) == 2)
        frozen_record = simulator.streams["shared"].sessions[0]
        await wait_until(lambda: frozen_record.last_pong_t > frozen_record.opened)
        frozen.transport.pause_reading()  # stops reading: no more pongs
        last = (await next_frame(healthy))["seq"]
        deadline = time.monotonic() + 3.0
        while frozen_record.is_open:  # the healthy subscriber keeps getting every frame meanwhile
            assert time.monotonic() < deadline, "the frozen session was never closed"
            seq = (await next_frame(healthy))["seq"]
            assert seq == last + 1
            last = seq
        assert frozen_record.close_reason == "keepalive_timeout"
        assert frozen_record.opened < frozen_record.last_pong_t < frozen_record.closed  # type: ignore[operator]
        for _ in range(10):
            seq = (await next_frame(healthy))["seq"]
            assert seq == last + 1
            last = seq
        assert simulator.streams["shared"].sessions[1].is_open
        frozen.transport.resume_reading()
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                await frozen.recv()
    assert closed.value.rcvd is None or closed.value.rcvd.code == 1011


async def test_evict_older_closes_the_older_session(make_simulator: MakeSimulator) -> None:
    simulator, ws_url, _ = await make_simulator(evict_older=True)
    async with subscribe(ws_url, "ev", worker="w-old") as old:
        await next_frame(old)
        async with subscribe(ws_url, "ev", worker="w-new") as new:
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    await old.recv()
            assert closed.value.rcvd is not None
            assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4000, "evicted")
            older, newer = simulator.streams["ev"].sessions
            assert older.close_reason == "evicted"
            assert older.closed is not None and older.closed <= newer.opened
            assert newer.is_open
            await frames(new, 3)


async def test_without_evict_older_sessions_coexist(make_simulator: MakeSimulator) -> None:
    simulator, ws_url, _ = await make_simulator()
    async with subscribe(ws_url, "both") as first, subscribe(ws_url, "both") as second:
        await next_frame(first)
        await next_frame(second)
        assert all(session.is_open for session in simulator.streams["both"].sessions)


async def test_disconnect_endpoints_reset_sessions(make_simulator: MakeSimulator) -> None:
    simulator, ws_url, control_url = await make_simulator()
    async with (
        subscribe(ws_url, "r1") as one,
        subscribe(ws_url, "r2") as two,
        subscribe(ws_url, "r2") as three,
    ):
        for client in (one, two, three):
            await next_frame(client)
        status, answer = await control("POST", f"{control_url}/streams/r2/disconnect")
        assert (status, answer) == (200, {"id": "r2", "disconnected": 2})
        for client in (two, three):
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    await client.recv()
            assert closed.value.rcvd is None  # dropped without a close frame
        assert [s.close_reason for s in simulator.streams["r2"].sessions] == ["server_reset"] * 2
        await next_frame(one)
        status, answer = await control("POST", f"{control_url}/disconnect")
        assert (status, answer) == (200, {"disconnected": 1})
        assert simulator.streams["r1"].sessions[0].close_reason == "server_reset"
    status, error = await control("POST", f"{control_url}/streams/nobody/disconnect")
    assert status == 404 and "nobody" in error["error"]


async def test_stop_closes_sessions_as_server_shutdown(make_simulator: MakeSimulator) -> None:
    simulator, ws_url, _ = await make_simulator()
    async with subscribe(ws_url, "bye") as client:
        await next_frame(client)
        await simulator.stop()
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                await client.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
    assert simulator.streams["bye"].sessions[0].close_reason == "server_shutdown"


async def test_control_api(make_simulator: MakeSimulator) -> None:
    _, _, control_url = await make_simulator()
    assert await control("GET", f"{control_url}/health") == (200, {"ok": True})
    assert await control("GET", f"{control_url}/streams") == (200, {"streams": []})
    status, created = await control("POST", f"{control_url}/streams/x.y:z-1?rate=20")
    assert status == 201 and created["rate"] == 20.0
    status, listing = await control("GET", f"{control_url}/streams")
    assert [stream["id"] for stream in listing["streams"]] == ["x.y:z-1"]
    assert set(listing["streams"][0]) >= {"id", "head_seq", "rate", "sessions"}
    status, conflict = await control("POST", f"{control_url}/streams/x.y:z-1?rate=30")
    assert status == 409 and "error" in conflict
    for method, path, expected in [
        ("GET", "/streams/unknown", 404),
        ("GET", "/streams/bad%20id", 400),
        ("GET", "/streams/" + "a" * 129, 400),
        ("POST", "/streams/r?rate=-1", 400),
        ("POST", "/streams/r?rate=1e9", 400),
        ("POST", "/streams/r?rate=nan", 400),
        ("POST", "/streams/r?rate=inf", 400),
        ("POST", "/streams/r?rate=0", 400),
        ("GET", "/nowhere", 404),
        ("GET", "/streams/a/b", 404),
        ("POST", "/health", 405),
        ("GET", "/disconnect", 405),
    ]:
        status, error = await control(method, control_url + path)
        assert status == expected, (method, path, status)
        assert isinstance(error["error"], str) and error["error"]


@pytest.mark.parametrize(
    ("path", "status"),
    [("/streams/bad%20id", 400), ("/streams/a?from_seq=0", 400), ("/streams/a?from_seq=x", 400), ("/x", 404),
     ("/streams/a?from_seq=99999999999999999999", 400)],
)
async def test_bad_handshakes_are_rejected(make_simulator: MakeSimulator, path: str, status: int) -> None:
    simulator, ws_url, _ = await make_simulator()
    with pytest.raises(InvalidStatus) as rejected:
        async with connect(ws_url + path):
            pass
    assert rejected.value.response.status_code == status
    assert "error" in json.loads(rejected.value.response.body)
    assert simulator.streams == {}


async def test_history_records_sessions_and_emits(make_simulator: MakeSimulator, tmp_path: Path) -> None:
    history = tmp_path / "history" / "upstream.jsonl"
    simulator, ws_url, _ = await make_simulator(history_path=str(history))
    async with subscribe(ws_url, "h", worker="worker-1", gen="9f", from_seq=1) as client:
        received = await frames(client, 5)
    await wait_until(lambda: not simulator.streams["h"].sessions[0].is_open)
    await simulator.stop()
    events = [json.loads(line) for line in history.read_text().splitlines()]
    assert all(event["src"] == "upstream" and isinstance(event["t"], float) for event in events)
    opens = [event for event in events if event["type"] == "sub.open"]
    closes = [event for event in events if event["type"] == "sub.close"]
    emits = [event for event in events if event["type"] == "emit"]
    assert len(opens) == 1 and len(closes) == 1
    assert {k: opens[0][k] for k in ("pk", "worker", "gen", "from_seq", "replay_from")} == {
        "pk": "CONN#h",
        "worker": "worker-1",
        "gen": "9f",
        "from_seq": 1,
        "replay_from": 1,
    }
    assert opens[0]["session"] == closes[0]["session"]
    assert closes[0]["reason"] == "client_close"
    assert closes[0]["worker"] == "worker-1" and closes[0]["pk"] == "CONN#h" and closes[0]["gen"] == "9f"
    assert closes[0]["last_seq_sent"] >= received[-1]["seq"]
    assert closes[0]["last_pong_t"] >= opens[0]["t"]
    assert [event["seq"] for event in emits] == list(range(1, len(emits) + 1))
    assert all(event["pk"] == "CONN#h" for event in emits)
    assert len(emits) >= 5


@pytest.mark.parametrize(
    "headers",
    [
        {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Chrome/120"},
        {"Origin": "http://evil.example"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ],
)
async def test_browsers_are_refused_everywhere(make_simulator: MakeSimulator, headers: dict[str, str]) -> None:
    simulator, ws_url, control_url = await make_simulator()
    for method, path in [("GET", "/streams"), ("POST", "/streams/b"), ("POST", "/disconnect"),
                         ("GET", "/redirect?location=ws://127.0.0.1:1/x")]:
        async with aiohttp.ClientSession(skip_auto_headers=["User-Agent"]) as http, http.request(
            method, control_url + path, headers=headers, allow_redirects=False
        ) as response:
            assert response.status == 403, (method, path)
            assert "refused" in (await response.json())["error"] or "browsers" in (await response.json())["error"]
    with pytest.raises(InvalidStatus) as rejected:
        async with connect(f"{ws_url}/streams/b", additional_headers=headers):
            pass
    assert rejected.value.response.status_code == 403
    assert simulator.streams == {}


async def test_same_origin_and_non_browser_requests_pass(make_simulator: MakeSimulator) -> None:
    _, _, control_url = await make_simulator()
    for headers in ({"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}, {"User-Agent": "curl/8.5"}):
        async with aiohttp.ClientSession() as http, http.get(control_url + "/health", headers=headers) as response:
            assert response.status == 200


async def test_redirect_answers_302_with_the_location(make_simulator: MakeSimulator) -> None:
    _, ws_url, control_url = await make_simulator()
    target = "ws://169.254.170.2/v2/credentials/x"
    async with aiohttp.ClientSession() as http, http.get(
        f"{control_url}/redirect", params={"location": target}, allow_redirects=False
    ) as response:
        assert response.status == 302 and response.headers["Location"] == target
    handshake = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
                 "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    async with aiohttp.ClientSession() as http, http.get(  # a WebSocket handshake gets the same answer
        f"{ws_url.replace('ws://', 'http://')}/redirect", params={"location": target}, headers=handshake,
        allow_redirects=False,
    ) as response:
        assert response.status == 302 and response.headers["Location"] == target


@pytest.mark.parametrize(
    "query", ["", "?location=", "?location=file:///etc/passwd", "?location=ws://a/%0d%0aX:1",
              "?location=/relative", "?location=ws://" + "a" * 2100]
)
async def test_a_bad_redirect_location_is_refused(make_simulator: MakeSimulator, query: str) -> None:
    _, _, control_url = await make_simulator()
    status, error = await control("GET", f"{control_url}/redirect{query}")
    assert status == 400 and "location" in error["error"]
