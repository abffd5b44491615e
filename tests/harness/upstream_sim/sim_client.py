"""Helpers the simulator's tests share to drive it over real sockets: subscribe, read frames, call the control
API, wait for a condition (the ``make_simulator`` fixture is in this folder's conftest)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.frames import Close

from harness.upstream_sim import UpstreamSimulator

# Options every test simulator starts with: a fast stream and a fast keepalive.
FAST = {"rate": 50.0, "ping_interval": 0.1, "ping_timeout": 0.5, "close_timeout": 0.5}

Started = tuple[UpstreamSimulator, str, str]
MakeSimulator = Callable[..., Awaitable[Started]]


async def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.01)


async def control(method: str, url: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.request(method, url) as response:
        assert response.content_type == "application/json"
        return response.status, await response.json()


async def next_frame(client: ClientConnection) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads(await asyncio.wait_for(client.recv(), 2.0))
    return frame


async def frames(client: ClientConnection, count: int) -> list[dict[str, Any]]:
    return [await next_frame(client) for _ in range(count)]


async def server_close(client: ClientConnection, timeout: float = 5.0) -> Close | None:
    """Read until the server ends the connection; its close frame (None: dropped without one)."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                await client.recv()
    except ConnectionClosed as closed:
        return closed.rcvd


def subscribe(
    ws_url: str, connection_id: str, *, from_seq: int | None = None, worker: str | None = None,
    gen: str | None = None, **options: Any,
) -> Any:
    """A client connection to the stream (use it with ``async with``); ``options`` go to ``connect``."""
    query = "" if from_seq is None else f"?from_seq={from_seq}"
    headers = {} if worker is None else {"X-Worker-Id": worker}
    if gen is not None:
        headers["X-Worker-Gen"] = gen
    return connect(f"{ws_url}/streams/{connection_id}{query}", additional_headers=headers,
                   **{"close_timeout": 0.5, **options})
