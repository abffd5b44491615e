"""The simulated upstream WebSocket source (DESIGN §8) as an in-process asyncio server.

``UpstreamSimulator`` owns the streams, the listening port (WebSocket subscriptions and the plain-HTTP control
API share it: see ``harness.upstream_sim.control``), the session ids, the ``upstream`` history file, and the
limits a real gateway puts on sessions: a new-connection quota (a handshake over it is answered 429 with
``Retry-After``, see ``harness.upstream_sim.handshakes``), a maximum connection age and an idle timeout.  The
limits are given at time scale 1, like every duration of the fleet (DESIGN §9), and multiplied by
``timescale`` (so is the ``Retry-After`` a client is told: it is in seconds at time scale 1); the keepalive
and close timeouts are given in real seconds.
Usage inside a running event loop::

    simulator = UpstreamSimulator(rate=10, history_path="run/history/upstream.jsonl")
    ws_url, control_url = await simulator.start("127.0.0.1", 0)
    ...
    await simulator.stop()
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from fleet.history import HistoryWriter
from harness.upstream_sim.control import (
    RequestError,
    error_response,
    handle_control,
    is_websocket_upgrade,
    parse_subscription,
    redirect_response,
    refuse_browser,
    throttled_response,
)
from harness.upstream_sim.handshakes import HandshakeCounts, HandshakeOutcome, TokenBucket
from harness.upstream_sim.session import Session, SessionSettings, SubscriberConnection
from harness.upstream_sim.streams import Stream

HISTORY_SRC = "upstream"
DEFAULT_MAX_AGE = 7200.0  # seconds at time scale 1: API Gateway's maximum connection duration, 2 hours
DEFAULT_IDLE_TIMEOUT = 600.0  # seconds at time scale 1: API Gateway's idle connection timeout, 10 minutes
DEFAULT_HANDSHAKE_QUOTA = 500.0  # handshakes a second at time scale 1: API Gateway's new-connection quota


def positive_number(name: str, value: float) -> float:
    """``value`` if it is a positive finite number; raises ValueError naming ``name`` otherwise."""
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return value


def optional_limit(name: str, value: float | None) -> float | None:
    """A limit that 0 or None turns off (None), else a positive finite number."""
    return None if value is None or value == 0 else positive_number(name, value)


class UpstreamSimulator:
    """Streams of ``{"seq", "data", "ts"}`` frames served over WebSocket, with a record of every session.

    ``rate``: messages per second of each new stream; ``replay_depth``: frames kept per stream for
    ``from_seq`` resumes; ``max_backlog``: unsent frames a session may have queued before it is closed with
    reason ``error`` (default twice ``replay_depth``, so a full replay always fits); ``ping_interval`` /
    ``ping_timeout``: the keepalive, in seconds; ``close_timeout``: seconds a close frame may take before the
    TCP connection is aborted; ``evict_older``: a new session of a stream closes its older ones (``evicted``);
    ``history_path``: the JSON Lines history file (None: no history).  Gateway limits, in seconds at time scale
    1 (0 or None: off): ``max_age`` closes a session that long after it opened (``max_age``), ``idle_timeout``
    one whose client sent no frame for that long (``idle_timeout``); ``handshake_quota``: accepted handshakes a
    second (0 or None: no quota), ``handshake_burst`` of them at once (default: one second's worth), timed by
    ``quota_clock`` (real monotonic seconds; tests inject one); ``timescale`` multiplies every limit.
    ``seed``: the random generator's (which sessions a partial ``disconnect`` drops).
    """

    def __init__(
        self,
        *,
        rate: float = 10.0,
        replay_depth: int = 10000,
        max_backlog: int | None = None,
        ping_interval: float = 0.5,
        ping_timeout: float = 0.5,
        close_timeout: float = 1.0,
        evict_older: bool = False,
        history_path: str | None = None,
        max_age: float | None = DEFAULT_MAX_AGE,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        handshake_quota: float | None = DEFAULT_HANDSHAKE_QUOTA,
        handshake_burst: int | None = None,
        quota_clock: Callable[[], float] = time.monotonic,
        timescale: float = 1.0,
        seed: int = 0,
    ) -> None:
        for name, value in (
            ("rate", rate),
            ("ping_interval", ping_interval),
            ("ping_timeout", ping_timeout),
            ("close_timeout", close_timeout),
            ("timescale", timescale),
        ):
            positive_number(name, value)
        if replay_depth < 1:
            raise ValueError(f"replay_depth must be at least 1, got {replay_depth!r}")
        backlog = 2 * replay_depth if max_backlog is None else max_backlog
        if backlog < replay_depth:
            raise ValueError(f"max_backlog ({backlog}) must be at least replay_depth ({replay_depth})")
        self.rate = rate
        self.replay_depth = replay_depth
        self.evict_older = evict_older
        self.timescale = timescale
        self.settings = SessionSettings(
            ping_interval=ping_interval,
            ping_timeout=ping_timeout,
            close_timeout=close_timeout,
            max_backlog=backlog,
            max_age=self._scaled(optional_limit("max_age", max_age)),
            idle_timeout=self._scaled(optional_limit("idle_timeout", idle_timeout)),
        )
        self._quota_bucket = self._new_quota_bucket(handshake_quota, handshake_burst, quota_clock)
        self.streams: dict[str, Stream] = {}
        self._history_path = history_path
        self._history: HistoryWriter | None = None
        self._server: Server | None = None
        self._handshakes: HandshakeCounts | None = None
        self._session_numbers = itertools.count(1)
        self._random = random.Random(seed)
        self._stopping = False

    @property
    def stopping(self) -> bool:
        return self._stopping

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, str]:
        """Listen on ``host:port`` (0: a free port); returns ``(ws_url, control_url)``."""
        if self._server is not None:
            raise RuntimeError("the simulator is already started")
        self._history = HistoryWriter(self._history_path, HISTORY_SRC)
        self._handshakes = HandshakeCounts(window=self.timescale, history=self._history,
                                           loop=asyncio.get_running_loop())
        try:
            self._server = await serve(
                self._serve_session,
                host,
                port,
                process_request=self._process_request,
                create_connection=SubscriberConnection,
                ping_interval=None,  # our own keepalive records last_pong_t (see session.py)
                compression=None,
                close_timeout=self.settings.close_timeout,
            )
        except BaseException:
            self._history.close()
            raise
        bound_port = self._server.sockets[0].getsockname()[1]
        url_host = f"[{host}]" if ":" in host else host
        return f"ws://{url_host}:{bound_port}", f"http://{url_host}:{bound_port}"

    async def stop(self) -> None:
        """Stop emitting, close every live session with reason ``server_shutdown``, stop listening."""
        if self._server is None or self._stopping:
            return
        self._stopping = True
        for stream in self.streams.values():
            stream.stop()
            for session in stream.live_sessions():
                session.finish("server_shutdown")
        self._server.close()
        await self._server.wait_closed()
        if self._handshakes is not None:
            self._handshakes.flush()
        if self._history is not None:
            self._history.close()

    def create_stream(self, connection_id: str, *, rate: float | None = None) -> Stream:
        """The stream of ``connection_id``, created (emission starting now) if it does not exist yet."""
        stream = self.streams.get(connection_id)
        if stream is None:
            stream = Stream(
                connection_id,
                rate=self.rate if rate is None else rate,
                replay_depth=self.replay_depth,
                history=self._writer(),
                loop=asyncio.get_running_loop(),
            )
            self.streams[connection_id] = stream
        return stream

    def disconnect(self, connection_ids: list[str] | None = None, fraction: float = 1.0) -> int:
        """Drop live sessions of these streams (all streams: None) abruptly, reason ``server_reset``: every one,
        or ``fraction`` of them (the nearest whole number, a half rounded up) chosen at random by the seeded
        generator, so the same seed and the same calls on the same sessions drop the same ones.  Returns how
        many were dropped."""
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
        ids = list(self.streams) if connection_ids is None else connection_ids
        live = [session for connection_id in ids for session in self.streams[connection_id].live_sessions()]
        if fraction < 1:
            live = self._random.sample(live, math.floor(fraction * len(live) + 0.5))
        return sum(session.finish("server_reset") for session in live)

    def stats(self) -> dict[str, Any]:
        """The running handshake totals and how many sessions are live."""
        return {
            "handshakes": asdict(self._counts().totals),
            "live_sessions": sum(len(stream.live_sessions()) for stream in self.streams.values()),
        }

    def _new_quota_bucket(
        self, handshakes_a_second: float | None, burst: int | None, clock: Callable[[], float]
    ) -> TokenBucket | None:
        rate = optional_limit("handshake_quota", handshakes_a_second)
        if rate is None:
            return None
        return TokenBucket(rate, max(1, math.ceil(rate)) if burst is None else burst,
                           lambda: clock() / self.timescale)

    def _scaled(self, seconds: float | None) -> float | None:
        return None if seconds is None else seconds * self.timescale

    def _writer(self) -> HistoryWriter:
        if self._history is None:
            raise RuntimeError("the simulator is not started")
        return self._history

    def _counts(self) -> HandshakeCounts:
        if self._handshakes is None:
            raise RuntimeError("the simulator is not started")
        return self._handshakes

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        try:
            refuse_browser(request)
            redirect = redirect_response(request.path)
            if redirect is not None:
                return redirect
            if not is_websocket_upgrade(request):
                return handle_control(self, request)
        except RequestError as exc:
            return error_response(exc.status, str(exc))
        outcome, refusal = self._admit_handshake(request)
        self._counts().record(outcome)
        return refusal  # None: go on with the WebSocket handshake

    def _admit_handshake(self, request: Request) -> tuple[HandshakeOutcome, Response | None]:
        """Whether a subscription handshake goes on, and the answer that refuses it if it does not."""
        try:
            parse_subscription(request.path)
        except RequestError as exc:
            return "refused", error_response(exc.status, str(exc))
        if self._stopping:
            return "refused", error_response(503, "the simulator is shutting down")
        if self._quota_bucket is not None:
            wait = self._quota_bucket.take()
            if wait > 0:
                return "rejected", throttled_response(max(1, math.ceil(wait)))
        return "accepted", None

    async def _serve_session(self, connection: ServerConnection) -> None:
        request = connection.request
        # The library only calls the handler after a handshake request, on the connection class it was given.
        if request is None or not isinstance(connection, SubscriberConnection):
            return
        if self._stopping:
            await connection.close(1001, "server_shutdown")
            return
        subscription = parse_subscription(request.path)
        stream = self.create_stream(subscription.connection_id)
        if self.evict_older:
            for older in stream.live_sessions():
                older.finish("evicted")
        session = Session(
            f"s-{next(self._session_numbers)}",
            stream,
            connection,
            worker=request.headers.get("X-Worker-Id", ""),
            gen=request.headers.get("X-Worker-Gen", ""),
            from_seq=subscription.from_seq,
            settings=self.settings,
            history=self._writer(),
        )
        session.open()
        await session.run()
