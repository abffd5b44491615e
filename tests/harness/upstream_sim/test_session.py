"""Session tests that need a client no real socket can imitate quickly: one whose writes never drain (its
buffers are full) and that never answers, so the session's backlog overflows or its close frame hangs."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from fleet.history import HistoryWriter
from harness.upstream_sim.session import Session, SessionSettings
from harness.upstream_sim.streams import Stream


class FrozenClient:
    """Stands in for a ServerConnection whose peer stopped reading after ``drained_frames`` frames."""

    def __init__(self, *, drained_frames: int, close_hangs: bool = False) -> None:
        self.drained_frames = drained_frames
        self.close_hangs = close_hangs
        self.frames_sent = 0
        self.close_args: tuple[int, str] | None = None
        self.aborted = False
        self.transport = self
        self._gone = asyncio.Event()

    async def send(self, frame: str) -> None:
        self.frames_sent += 1
        if self.frames_sent > self.drained_frames:
            await self._gone.wait()

    async def ping(self) -> asyncio.Future[float]:
        return asyncio.get_running_loop().create_future()  # never answered

    async def close(self, code: int, reason: str) -> None:
        self.close_args = (code, reason)
        if self.close_hangs:
            await asyncio.Future()
        self._gone.set()

    def abort(self) -> None:
        self.aborted = True
        self._gone.set()

    def __aiter__(self) -> FrozenClient:
        return self

    async def __anext__(self) -> str:
        await self._gone.wait()
        raise StopAsyncIteration


def make_session(client: FrozenClient, **settings: Any) -> Session:
    history = HistoryWriter(None, "upstream")
    stream = Stream("frozen", rate=100.0, replay_depth=10, history=history, loop=asyncio.get_running_loop())
    options = {"ping_interval": 60.0, "ping_timeout": 60.0, "close_timeout": 0.2, "max_backlog": 20}
    session = Session(
        "s-1",
        stream,
        cast(Any, client),
        worker="worker-1",
        from_seq=None,
        settings=SessionSettings(**{**options, **settings}),
        history=history,
    )
    session.open()
    return session


async def test_backlog_overflow_closes_with_error_without_stalling_the_stream() -> None:
    client = FrozenClient(drained_frames=3)
    session = make_session(client)
    await asyncio.wait_for(session.run(), 5.0)
    assert session.close_reason == "error"
    assert client.close_args == (1011, "error")
    assert session.last_seq_sent == session.replay_from + 3  # the 4th frame went to the socket, never drained
    assert session.stream.head_seq >= session.last_seq_sent + 20  # emission went on meanwhile
    session.stream.stop()


async def test_keepalive_timeout_and_a_hanging_close_frame_aborts() -> None:
    client = FrozenClient(drained_frames=1_000_000, close_hangs=True)
    session = make_session(client, ping_interval=0.05, ping_timeout=0.05, max_backlog=1_000_000)
    await asyncio.wait_for(session.run(), 5.0)
    assert session.close_reason == "keepalive_timeout"
    assert session.last_pong_t == session.opened  # never answered a ping
    assert client.close_args == (1011, "keepalive_timeout")
    assert client.aborted
    session.stream.stop()
