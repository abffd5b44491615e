"""One subscription session of the simulated upstream: its record, its sender, its keepalive and its closing.

A session's record (worker and gen: the incarnation that subscribed, from the ``X-Worker-Id`` and
``X-Worker-Gen`` headers, empty when absent; from_seq, replay_from, opened, closed, close_reason,
last_seq_sent, last_pong_t) is the ground truth of who was really consuming (DESIGN §4, §6). Frames reach the
client through a bounded per-session backlog drained by one sender task, so a slow or frozen client only ever
blocks itself; a backlog past ``max_backlog`` closes the session with reason ``error``. The keepalive is ours,
not the library's, so that ``last_pong_t`` is known: a ping every ``ping_interval`` seconds must be answered
within ``ping_timeout`` seconds (sending it included), or the session closes with ``keepalive_timeout``.
Like a gateway, a session is also closed at ``max_age`` seconds after it opened, and after ``idle_timeout``
seconds in which its client sent no frame (data, ping, pong or close: answering our pings keeps it alive);
both are timers on the event loop, not tasks, and either may be off (None).

Close reasons, and what the client sees:
- ``client_close``: the client closed the connection, cleanly or not (nothing is sent).
- ``keepalive_timeout``: no pong in time (close code 1011).
- ``evicted``: a newer session of the same stream took over, with ``evict_older`` on (close code 4000).
- ``server_shutdown``: the simulator stopped (close code 1001).
- ``server_reset``: the control API dropped the connection, simulating an upstream reset (TCP abort, no close
  frame: the client sees 1006).
- ``error``: the session's unsent backlog overflowed ``max_backlog`` (close code 1011).
- ``max_age``: the session reached the maximum connection age (close code 1001, reason "Going away", as API
  Gateway closes it).
- ``idle_timeout``: the client sent nothing for ``idle_timeout`` seconds (close code 1001, "Going away").
A close frame that cannot be delivered within ``close_timeout`` seconds (frozen client) becomes a TCP abort.
The session's ``closed`` time and its ``sub.close`` event are written when the decision is taken, before the
close frame goes out.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import Event

from fleet.history import HistoryWriter
from harness.upstream_sim.streams import Stream, now_ms

CloseReason = Literal[
    "client_close", "keepalive_timeout", "evicted", "server_shutdown", "server_reset", "error", "max_age",
    "idle_timeout",
]

GATEWAY_GOING_AWAY = (1001, "Going away")

# The close frame (code, reason text) each reason sends; client_close and server_reset send none.
CLOSE_FRAMES: dict[CloseReason, tuple[int, str]] = {
    "keepalive_timeout": (1011, "keepalive_timeout"),
    "evicted": (4000, "evicted"),
    "server_shutdown": (1001, "server_shutdown"),
    "error": (1011, "error"),
    "max_age": GATEWAY_GOING_AWAY,
    "idle_timeout": GATEWAY_GOING_AWAY,
}


@dataclass(frozen=True)
class SessionSettings:
    """Seconds of real time (the simulator has already applied its time scale) and a frame count; a limit
    that is None is off."""

    ping_interval: float
    ping_timeout: float
    close_timeout: float
    max_backlog: int
    max_age: float | None = None
    idle_timeout: float | None = None


class SubscriberConnection(ServerConnection):
    """The server side of a subscriber's WebSocket connection, remembering when (event loop time) its client
    last sent a frame of any kind, or its handshake: the clock of the idle timeout."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last_received = self.loop.time()

    def process_event(self, event: Event) -> None:
        self.last_received = self.loop.time()
        super().process_event(event)


class Session:
    """A subscriber of one stream; ``replay_from`` is the first sequence it is served (see
    ``Stream.first_seq_for``), so ``replay_from - from_seq`` is the gap the replay buffer could not fill."""

    def __init__(
        self,
        session_id: str,
        stream: Stream,
        connection: SubscriberConnection,
        *,
        worker: str,
        gen: str = "",
        from_seq: int | None,
        settings: SessionSettings,
        history: HistoryWriter,
    ) -> None:
        self.session_id = session_id
        self.stream = stream
        self.worker = worker
        self.gen = gen
        self.from_seq = from_seq
        self.replay_from = stream.first_seq_for(from_seq)
        self.opened = now_ms()
        self.closed: float | None = None
        self.close_reason: CloseReason | None = None
        self.last_seq_sent: int | None = None
        # The handshake is the first proof that the client is reading; each pong is the next one.
        self.last_pong_t = self.opened
        self._connection = connection
        self._settings = settings
        self._history = history
        self._backlog: deque[str] = deque()
        self._next_seq = self.replay_from  # the sequence of the frame at the head of the backlog
        self._wake = asyncio.Event()
        self._closing: asyncio.Task[None] | None = None
        self._max_age_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None

    @property
    def is_open(self) -> bool:
        return self.closed is None

    def to_json(self) -> dict[str, Any]:
        return {
            "session": self.session_id,
            "worker": self.worker,
            "gen": self.gen,
            "from_seq": self.from_seq,
            "replay_from": self.replay_from,
            "opened": self.opened,
            "closed": self.closed,
            "close_reason": self.close_reason,
            "last_seq_sent": self.last_seq_sent,
            "last_pong_t": self.last_pong_t,
        }

    def open(self) -> None:
        """Join the stream: queue the buffered frames from ``replay_from`` and receive every later one."""
        for seq in range(self.replay_from, self.stream.head_seq + 1):
            self._backlog.append(self.stream.frame(seq))
        self.stream.attach(self)
        loop = asyncio.get_running_loop()
        max_age, idle_timeout = self._settings.max_age, self._settings.idle_timeout
        if max_age is not None:
            self._max_age_timer = loop.call_later(max_age, self.finish, "max_age")
        if idle_timeout is not None:
            self._idle_timer = loop.call_later(idle_timeout, self._check_idle, idle_timeout)
        opened = self._history.emit(
            "sub.open",
            pk=self.stream.pk,
            session=self.session_id,
            worker=self.worker,
            gen=self.gen,
            from_seq=self.from_seq,
            replay_from=self.replay_from,
        )["t"]
        # the record's times are the history's: no pong can precede the session's own sub.open
        self.opened = self.last_pong_t = max(self.opened, opened)
        self._wake.set()

    def on_emitted(self, first_seq: int, frames: list[str]) -> None:
        """The stream emitted ``frames`` (sequences from ``first_seq``): queue those this session is owed."""
        if self.closed is not None:
            return
        skip = max(0, self.replay_from - first_seq)
        self._backlog.extend(frames[skip:])
        if len(self._backlog) > self._settings.max_backlog:
            self.finish("error")
            return
        self._wake.set()

    async def run(self) -> None:
        """Serve the session until its connection closes, whoever closes it."""
        sender = asyncio.create_task(self._send_frames())
        pinger = asyncio.create_task(self._keep_alive())
        try:
            # Client messages are ignored; reading them keeps pongs and close frames flowing.
            async for _message in self._connection:
                pass
        except ConnectionClosed:
            pass
        finally:
            self.finish("client_close")
            sender.cancel()
            pinger.cancel()
            await asyncio.gather(sender, pinger, return_exceptions=True)
            if self._closing is not None:
                await self._closing

    def finish(self, reason: CloseReason) -> bool:
        """Record the end of the session (the first reason wins) and close its connection as ``reason``
        requires.  Returns False when the session had already ended."""
        if self.closed is not None:
            return False
        self.closed = now_ms()
        self.close_reason = reason
        self.stream.detach(self)
        for timer in (self._max_age_timer, self._idle_timer):
            if timer is not None:
                timer.cancel()
        self._backlog.clear()
        self._wake.set()
        self._history.emit(
            "sub.close",
            pk=self.stream.pk,
            session=self.session_id,
            worker=self.worker,
            gen=self.gen,
            reason=reason,
            last_pong_t=self.last_pong_t,
            last_seq_sent=self.last_seq_sent,
        )
        if reason == "server_reset":
            self._connection.transport.abort()
        elif reason != "client_close":
            self._closing = asyncio.create_task(self._close(*CLOSE_FRAMES[reason]))
        return True

    def _check_idle(self, idle_timeout: float) -> None:
        """Close the session if its client has been silent for ``idle_timeout`` seconds, else check again
        when it would have been (one timer per session, moved only when it fires)."""
        loop = asyncio.get_running_loop()
        deadline = self._connection.last_received + idle_timeout
        if loop.time() >= deadline:
            self.finish("idle_timeout")
        else:
            self._idle_timer = loop.call_at(deadline, self._check_idle, idle_timeout)

    async def _close(self, code: int, reason: str) -> None:
        try:
            async with asyncio.timeout(self._settings.close_timeout):
                await self._connection.close(code, reason)
        except TimeoutError:
            self._connection.transport.abort()

    async def _send_frames(self) -> None:
        try:
            while self.closed is None:
                self._wake.clear()
                while self._backlog and self.closed is None:
                    frame = self._backlog.popleft()
                    # Recorded before the await: send() hands the frame to the socket before it can suspend.
                    self.last_seq_sent = self._next_seq
                    self._next_seq += 1
                    await self._connection.send(frame)
                await self._wake.wait()
        except ConnectionClosed:
            return

    async def _keep_alive(self) -> None:
        while self.closed is None:
            await asyncio.sleep(self._settings.ping_interval)
            try:
                async with asyncio.timeout(self._settings.ping_timeout):
                    pong = await self._connection.ping()
                    await pong
            except TimeoutError:
                self.finish("keepalive_timeout")
                return
            except ConnectionClosed:
                return
            if self.closed is None:  # the record is final once the session has ended
                self.last_pong_t = now_ms()
