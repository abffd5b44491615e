"""Tests of the limits the simulator puts on sessions as a real gateway does, each scaled by the time scale:
the new-connection quota (429 with Retry-After; its clock is injected, so no test waits for a refill), the
per-second ``handshakes`` history events and ``GET /stats``, maximum connection age and idle timeout (close
code 1001 "Going away", reasons ``max_age`` / ``idle_timeout``), and the mass disconnect of a seeded random
share of the sessions (``POST /disconnect?fraction=F``)."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from harness.upstream_sim import UpstreamSimulator
from tests.harness.upstream_sim.sim_client import (
    MakeSimulator,
    control,
    frames,
    next_frame,
    server_close,
    subscribe,
    wait_until,
)

GOING_AWAY = (1001, "Going away")


class ManualClock:
    """A monotonic clock that only moves when the test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def refusal(ws_url: str, path: str = "/streams/q") -> tuple[int, str | None] | None:
    """Open and close one subscription: None when it was accepted, else the refusal's HTTP status and its
    ``Retry-After`` header."""
    try:
        async with connect(ws_url + path):
            return None
    except InvalidStatus as refused:
        response = refused.response
        assert "error" in json.loads(response.body)
        return response.status_code, response.headers.get("Retry-After")


def history_events(path: Path, type: str) -> list[dict[str, Any]]:
    return [event for event in map(json.loads, path.read_text().splitlines()) if event["type"] == type]


async def test_over_the_quota_a_handshake_gets_429_with_retry_after_until_the_bucket_refills(
    make_simulator: MakeSimulator,
) -> None:
    clock = ManualClock()
    simulator, ws_url, control_url = await make_simulator(handshake_quota=0.4, handshake_burst=1, quota_clock=clock)
    assert await refusal(ws_url) is None
    assert await refusal(ws_url) == (429, "3")  # a token in 2.5 s, rounded up
    clock.now += 2.0
    assert await refusal(ws_url) == (429, "1")  # 0.5 s to go: never less than 1
    clock.now += 0.5
    assert await refusal(ws_url) is None
    assert await refusal(ws_url) == (429, "3")
    assert [session.close_reason for session in simulator.streams["q"].sessions] == ["client_close"] * 2
    status, stats = await control("GET", f"{control_url}/stats")
    assert status == 200
    assert stats["handshakes"] == {"attempted": 5, "accepted": 2, "rejected": 3}


async def test_the_quota_runs_at_the_time_scale(make_simulator: MakeSimulator) -> None:
    clock = ManualClock()
    _, ws_url, _ = await make_simulator(handshake_quota=1, handshake_burst=1, quota_clock=clock, timescale=0.5)
    assert await refusal(ws_url) is None
    assert await refusal(ws_url) == (429, "1")  # in seconds at time scale 1
    clock.now += 0.5  # one second at time scale 0.5
    assert await refusal(ws_url) is None


@pytest.mark.parametrize(
    ("quota", "burst", "accepted"), [(3, None, 3), (3, 5, 5), (0, None, 8), (None, 2, 8)]
)
async def test_the_burst_defaults_to_one_seconds_worth_and_zero_or_none_turns_the_quota_off(
    make_simulator: MakeSimulator, quota: float | None, burst: int | None, accepted: int
) -> None:
    _, ws_url, _ = await make_simulator(handshake_quota=quota, handshake_burst=burst, quota_clock=ManualClock())
    answers = [await refusal(ws_url) for _ in range(8)]
    assert answers == [None] * accepted + [(429, "1")] * (8 - accepted)


async def test_each_window_with_handshakes_is_one_handshakes_event(
    make_simulator: MakeSimulator, tmp_path: Path
) -> None:
    history = tmp_path / "upstream.jsonl"
    _, ws_url, control_url = await make_simulator(
        handshake_quota=2, quota_clock=ManualClock(), timescale=0.1, history_path=str(history)
    )
    answers = [await refusal(ws_url, path) for path in ("/streams/h", "/streams/h", "/streams/h", "/x")]
    assert answers == [None, None, (429, "1"), (404, None)]

    def totals() -> tuple[int, ...]:
        events = history_events(history, "handshakes")
        return tuple(sum(event[key] for event in events) for key in ("attempted", "accepted", "rejected"))

    await wait_until(lambda: totals() == (4, 2, 1))  # written when each 100 ms window ends, not at stop
    events = history_events(history, "handshakes")
    starts = [event["window_start"] for event in events]
    assert starts == sorted(set(starts))  # one event per window, in order
    for event in events:
        assert event["src"] == "upstream" and event["window_ms"] == pytest.approx(100.0)
        assert event["attempted"] >= max(1, event["accepted"] + event["rejected"])  # the 404 counts as attempted
        assert event["t"] >= event["window_start"] + event["window_ms"] - 5  # written when the window ended
        windows_later = (event["window_start"] - starts[0]) / 100.0
        assert windows_later == pytest.approx(round(windows_later))  # windows are aligned
    status, stats = await control("GET", f"{control_url}/stats")
    assert (status, stats) == (200, {"handshakes": {"attempted": 4, "accepted": 2, "rejected": 1},
                                     "live_sessions": 0})
    assert (await control("POST", f"{control_url}/stats"))[0] == 405


async def test_stop_writes_the_open_window_and_stats_count_live_sessions(
    make_simulator: MakeSimulator, tmp_path: Path
) -> None:
    history = tmp_path / "upstream.jsonl"
    simulator, ws_url, control_url = await make_simulator(timescale=100.0, history_path=str(history))  # 100 s
    async with subscribe(ws_url, "s1") as one, subscribe(ws_url, "s2") as two:
        await next_frame(one)
        await next_frame(two)
        status, stats = await control("GET", f"{control_url}/stats")
        assert (status, stats["live_sessions"]) == (200, 2)
    await wait_until(lambda: simulator.stats()["live_sessions"] == 0)
    assert history_events(history, "handshakes") == []  # the window is still open
    await simulator.stop()
    [event] = history_events(history, "handshakes")
    assert (event["attempted"], event["accepted"], event["rejected"]) == (2, 2, 0)
    assert event["t"] < event["window_start"] + event["window_ms"]


@pytest.mark.parametrize(("max_age", "timescale"), [(0.3, 1.0), (3.0, 0.1)])
async def test_max_age_closes_a_busy_session_going_away(
    make_simulator: MakeSimulator, tmp_path: Path, max_age: float, timescale: float
) -> None:
    history = tmp_path / "upstream.jsonl"
    simulator, ws_url, _ = await make_simulator(max_age=max_age, timescale=timescale, history_path=str(history))
    async with subscribe(ws_url, "aged") as client:  # reads frames and answers pings: never idle
        await next_frame(client)
        close = await server_close(client)
    assert close is not None and (close.code, close.reason) == GOING_AWAY
    session = simulator.streams["aged"].sessions[0]
    assert session.close_reason == "max_age"
    assert session.closed is not None
    assert 290 <= session.closed - session.opened < 2000  # 300 ms of real time either way, never the 3 s unscaled
    await simulator.stop()
    closes = history_events(history, "sub.close")
    assert [(event["session"], event["reason"]) for event in closes] == [(session.session_id, "max_age")]


async def test_idle_timeout_closes_a_silent_client_going_away(make_simulator: MakeSimulator) -> None:
    simulator, ws_url, _ = await make_simulator(ping_interval=60.0, idle_timeout=0.3)  # no pings to answer
    async with subscribe(ws_url, "idle", ping_interval=None) as client:  # sends nothing at all
        await next_frame(client)  # receiving frames does not count: only what the client sends does
        close = await server_close(client)
    assert close is not None and (close.code, close.reason) == GOING_AWAY
    session = simulator.streams["idle"].sessions[0]
    assert session.close_reason == "idle_timeout"
    assert session.closed is not None and session.closed - session.opened >= 290


@pytest.mark.parametrize(
    ("simulator_ping", "client_ping"),
    [(0.1, None), (60.0, 0.1)],
    ids=["answering-the-simulator's-pings", "sending-its-own-pings"],
)
async def test_a_client_that_sends_control_frames_is_not_idle(
    make_simulator: MakeSimulator, simulator_ping: float, client_ping: float | None
) -> None:
    simulator, ws_url, _ = await make_simulator(ping_interval=simulator_ping, idle_timeout=0.3)
    async with subscribe(ws_url, "chatty", ping_interval=client_ping) as client:
        await frames(client, 40)  # 0.8 s at 50 frames a second: well past the idle timeout
        assert simulator.streams["chatty"].sessions[0].is_open


def test_limits_scale_and_zero_or_none_turns_them_off() -> None:
    scaled = UpstreamSimulator(max_age=7200.0, idle_timeout=600.0, timescale=0.1).settings
    assert (scaled.max_age, scaled.idle_timeout) == pytest.approx((720.0, 60.0))
    defaults = UpstreamSimulator().settings
    assert (defaults.max_age, defaults.idle_timeout) == (7200.0, 600.0)
    off = UpstreamSimulator(max_age=0, idle_timeout=None).settings
    assert (off.max_age, off.idle_timeout) == (None, None)
    for bad in ({"max_age": -1.0}, {"idle_timeout": float("inf")}, {"timescale": 0.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            UpstreamSimulator(**bad)


async def open_sessions(stack: AsyncExitStack, ws_url: str, count: int) -> None:
    """``count`` sessions on ``count // 2`` streams, each with its first frame received (so it is live)."""
    for i in range(count):
        await next_frame(await stack.enter_async_context(subscribe(ws_url, f"mass-{i // 2}")))


def dropped_sessions(simulator: UpstreamSimulator) -> list[str]:
    return [session.session_id for stream in simulator.streams.values() for session in stream.sessions
            if session.close_reason == "server_reset"]


async def test_a_fraction_disconnect_drops_that_share_of_the_live_sessions(make_simulator: MakeSimulator) -> None:
    simulator, ws_url, control_url = await make_simulator()
    async with AsyncExitStack() as stack:
        await open_sessions(stack, ws_url, 10)
        assert await control("POST", f"{control_url}/disconnect?fraction=0.3") == (200, {"disconnected": 3})
        assert len(dropped_sessions(simulator)) == 3
        assert simulator.stats()["live_sessions"] == 7
        assert await control("POST", f"{control_url}/disconnect?fraction=0.5") == (200, {"disconnected": 4})  # 3.5
        assert await control("POST", f"{control_url}/disconnect?fraction=1") == (200, {"disconnected": 3})
        assert len(dropped_sessions(simulator)) == 10


async def test_the_same_seed_drops_the_same_sessions(make_simulator: MakeSimulator) -> None:
    dropped = []
    for _ in range(2):
        simulator, ws_url, control_url = await make_simulator(seed=42)
        async with AsyncExitStack() as stack:
            await open_sessions(stack, ws_url, 8)
            assert await control("POST", f"{control_url}/disconnect?fraction=0.5") == (200, {"disconnected": 4})
            dropped.append(dropped_sessions(simulator))
    assert dropped[0] == dropped[1]


@pytest.mark.parametrize("fraction", ["0", "-0.5", "1.5", "nan", "inf", "half", ""])
async def test_a_bad_fraction_is_refused_and_drops_nothing(make_simulator: MakeSimulator, fraction: str) -> None:
    simulator, ws_url, control_url = await make_simulator()
    async with subscribe(ws_url, "kept") as client:
        await next_frame(client)
        status, error = await control("POST", f"{control_url}/disconnect?fraction={fraction}")
        assert status == 400 and "fraction" in error["error"]
        assert simulator.stats()["live_sessions"] == 1
