"""The outbound WebSocket session to the upstream source, and the reconnect backoff.

``UpstreamSession`` opens ``ws_url`` (rewritten to the worker's own proxy when ``upstream_via`` is set),
asks to resume from a sequence with ``?from_seq=N``, identifies the worker with ``X-Worker-Id`` and its
incarnation with ``X-Worker-Gen``, and yields parsed messages.  Keepalive pings come from the server; the
client answers them as long as it reads.  Every websockets or socket error is translated here into ``UpstreamError``.

``Backoff`` is exponential with full jitter (AWS architecture blog's "full jitter": a uniform draw in
``[0, min(cap, base·2^n)]``) for ``hardened``; ``blog`` reconnects after a fixed delay.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import urlencode, urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosedOK, InvalidURI, WebSocketException

from fleet.errors import UpstreamError


@dataclass(frozen=True)
class UpstreamMessage:
    seq: int
    data: str
    ts: float


def session_url(ws_url: str, from_seq: int | None, via: str = "") -> str:
    """The URL to dial: the host swapped for ``via`` (host:port) if given, ``from_seq`` added if given."""
    parts = urlsplit(ws_url)
    netloc = via or parts.netloc
    query = parts.query
    if from_seq is not None:
        query = (query + "&" if query else "") + urlencode({"from_seq": from_seq})
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


class UpstreamSession:
    """One open subscription; use as ``async with UpstreamSession(...) as s: async for m in s: ...``."""

    def __init__(self, url: str, worker_id: str, open_timeout_s: float, gen: str = "") -> None:
        self.url = url
        self.worker_id = worker_id
        self.gen = gen
        self.open_timeout_s = open_timeout_s
        self._ws: ClientConnection | None = None

    async def __aenter__(self) -> UpstreamSession:
        try:
            self._ws = await connect(
                self.url,
                additional_headers={"X-Worker-Id": self.worker_id,
                                    **({"X-Worker-Gen": self.gen} if self.gen else {})},
                open_timeout=self.open_timeout_s,
                ping_interval=None,
                close_timeout=1.0,
                max_queue=64,
            )
        except (OSError, TimeoutError, InvalidURI, WebSocketException) as exc:
            raise UpstreamError(f"cannot open {self.url}: {type(exc).__name__}: {exc}") from exc
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._ws is not None:
            ws, self._ws = self._ws, None
            with contextlib.suppress(OSError, WebSocketException):
                await ws.close()

    def abort(self) -> None:
        """Drop the connection at once, without a closing handshake (self-fencing)."""
        if self._ws is not None:
            self._ws.transport.abort()

    async def __aiter__(self) -> AsyncIterator[UpstreamMessage]:
        if self._ws is None:
            raise UpstreamError("session is not open")
        try:
            async for frame in self._ws:
                try:
                    body = json.loads(frame)
                    yield UpstreamMessage(seq=int(body["seq"]), data=str(body["data"]), ts=float(body["ts"]))
                except (ValueError, KeyError, TypeError) as exc:
                    raise UpstreamError(f"malformed upstream frame: {str(frame)[:80]!r}") from exc
        except ConnectionClosedOK:
            raise UpstreamError("upstream closed the session") from None
        except (OSError, WebSocketException) as exc:
            raise UpstreamError(f"upstream dropped: {type(exc).__name__}: {exc}") from exc
        raise UpstreamError("upstream closed the session")


class Backoff:
    """Reconnect delays: full jitter over an exponential ceiling, or a fixed delay."""

    def __init__(self, base_s: float, cap_s: float, jitter: bool, rng: random.Random | None = None) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self.jitter = jitter
        self.attempt = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        if not self.jitter:
            return self.base_s
        ceiling = min(self.cap_s, self.base_s * (2 ** self.attempt))
        self.attempt += 1
        return self._rng.uniform(0.0, ceiling)

    def reset(self) -> None:
        self.attempt = 0
