"""Tests of the limits the simulator puts on sessions as a real gateway does: maximum connection age and idle
timeout (close code 1001 "Going away", reasons ``max_age`` / ``idle_timeout``), scaled by the time scale."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.upstream_sim import UpstreamSimulator
from tests.harness.upstream_sim.sim_client import MakeSimulator, frames, next_frame, server_close, subscribe

GOING_AWAY = (1001, "Going away")


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
    closes = [event for event in map(json.loads, history.read_text().splitlines()) if event["type"] == "sub.close"]
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
