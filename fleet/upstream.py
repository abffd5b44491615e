"""The outbound WebSocket session to the upstream source.

``UpstreamSession`` opens ``ws_url`` (rewritten to the worker's own proxy when ``upstream_via`` is set),
asks to resume from a sequence with ``?from_seq=N``, identifies the worker with ``X-Worker-Id`` and its
incarnation with ``X-Worker-Gen``, and yields parsed messages.  The client answers the server's pings as
long as it reads, and pings only a session it has heard nothing from for a while (``ping_every_s``): a
stream that delivers, or an upstream that pings, costs no ping.  Every websockets or socket error is
translated here into ``UpstreamError``; a handshake refused with 429 or 503 and a ``Retry-After`` in
seconds carries that wait (``retry_after_s``).

Hostile upstreams: given an ``Allowlist``, the session checks the URL against it, resolves the name once,
refuses it when any address is not public and not allowlisted (``fleet.allowlist``), and dials that one
address (the Host header and TLS SNI keep the name), so DNS rebinding cannot move it; it dials directly,
never through a proxy from the environment.  Redirects are refused, not followed.  A frame may hold at most
``MAX_FRAME_BYTES`` and at most ``MAX_QUEUED_FRAMES`` wait unread (a larger frame closes the session with
1009); error messages carry URLs without their query or user information (``redact_urls``).

How long to wait before reconnecting is ``fleet.backoff``'s, which honours that ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK, InvalidStatus, InvalidURI, WebSocketException
from websockets.frames import CloseCode
from websockets.http11 import Response

from fleet.allowlist import Allowlist, ip_literal
from fleet.errors import UpstreamError

# Largest frame accepted (a bigger one closes the session with 1009) and most frames buffered unread: with
# the frame being received, a stream holds at most (MAX_QUEUED_FRAMES + 1) * MAX_FRAME_BYTES = 272 KiB here.
MAX_FRAME_BYTES = 16 * 1024
MAX_QUEUED_FRAMES = 16
REDIRECT_STATUSES = frozenset({300, 301, 302, 303, 307, 308})
# A session pings at least once every this many ``ping_every_s`` even while it hears its upstream, so the
# upstream always hears it: a gateway closes a session whose client sent nothing for its idle timeout (API
# Gateway: 10 minutes; 8 x 7.5 s at the default budget is a minute).
PING_AT_LEAST_EVERY = 8
# Refusals whose ``Retry-After`` says when to try again: in seconds (an HTTP date is not read), at most a day
# (any reconnect cap is far below; this keeps the number finite).
RETRY_AFTER_STATUSES = frozenset({429, 503})
MAX_RETRY_AFTER_S = 86_400.0
# A URL in free text: its query / fragment ends before whitespace, a quote, or punctuation that ends a
# phrase (``cannot open ws://h/p?q: refused``).
_URL = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?:[^/?#\s'\"]*@)?(?P<rest>[^?#\s'\"]*)"
    r"(?P<tail>[?#][^\s'\"]*?)?(?=[:;,.)]?(?:[\s'\"]|$))"
)


def redact_urls(text: str) -> str:
    """``text`` with every URL's user information dropped and its query and fragment replaced by ``?...``."""
    return _URL.sub(lambda m: m["scheme"] + m["rest"] + ("?..." if m["tail"] else ""), text)


class _ConnectWithoutRedirects(connect):
    """websockets' connect, answering every redirect with the redirect itself as the error."""

    def process_redirect(self, exc: Exception) -> Exception | str:
        return exc


class _HearingConnection(ClientConnection):
    """websockets' client connection, noting when it last received anything (a frame, a ping, a pong):
    ``heard_at``, on the event loop's clock."""

    heard_at = 0.0

    def data_received(self, data: bytes) -> None:
        self.heard_at = self.loop.time()
        super().data_received(data)


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
    """One open subscription; use as ``async with UpstreamSession(...) as s: async for m in s: ...``.

    ``allowlist``: check the URL and pin its resolved address (leave it None when dialing the operator's
    own proxy, ``upstream_via``).  ``ping_every_s``: ping once nothing arrived for this long (and at least
    every ``PING_AT_LEAST_EVERY`` times as long), and close a session whose pong has not come
    ``pong_within_s`` after its ping: a half-open connection (a peer or proxy that stopped forwarding)
    delivers nothing and closes nothing, and would hold its stream unread for as long as the lease lasts.
    Anything that arrives proves the connection alive as a pong would, so a session that hears its upstream
    sends no ping (issue 26: pinging every session every 7.5 s was about 8 % of the CPU of a worker holding
    quiet streams)."""

    def __init__(
        self,
        url: str,
        worker_id: str,
        open_timeout_s: float,
        gen: str = "",
        *,
        allowlist: Allowlist | None = None,
        ping_every_s: float | None = None,
        pong_within_s: float | None = None,
    ) -> None:
        self.url = url
        self.worker_id = worker_id
        self.gen = gen
        self.open_timeout_s = open_timeout_s
        self.allowlist = allowlist
        self.ping_every_s, self.pong_within_s = ping_every_s, pong_within_s
        self._ws: _HearingConnection | None = None
        self._keepalive: asyncio.Task[None] | None = None

    async def __aenter__(self) -> UpstreamSession:
        dial: dict[str, Any] = {}  # create_connection arguments: absent means "from the URL"
        if self.allowlist is not None:
            host, port = await pinned_target(self.url, self.allowlist)
            dial = {"host": host, "port": port}
        try:
            ws = await _ConnectWithoutRedirects(
                self.url,
                additional_headers={"X-Worker-Id": self.worker_id,
                                    **({"X-Worker-Gen": self.gen} if self.gen else {})},
                open_timeout=self.open_timeout_s,
                ping_interval=None,  # ``_keep_alive`` pings, only when the session is silent
                close_timeout=1.0,
                max_size=MAX_FRAME_BYTES,
                max_queue=MAX_QUEUED_FRAMES,
                proxy=None,
                create_connection=_HearingConnection,
                **dial,
            )
        except InvalidStatus as exc:
            raise self._refused(exc) from exc
        except (OSError, TimeoutError, InvalidURI, WebSocketException) as exc:
            raise UpstreamError(redact_urls(f"cannot open {self.url}: {type(exc).__name__}: {exc}")) from exc
        assert isinstance(ws, _HearingConnection)
        self._ws = ws
        if self.ping_every_s is not None:
            self._keepalive = asyncio.create_task(self._keep_alive(ws, self.ping_every_s))
        return self

    async def _keep_alive(self, ws: _HearingConnection, every_s: float) -> None:
        """Ping once nothing arrived for ``every_s`` (or no ping went for ``PING_AT_LEAST_EVERY`` times as
        long); close the session with 1011 when that ping's pong does not come within ``pong_within_s``."""
        pinged_at = ws.loop.time()
        while True:
            now = ws.loop.time()
            due = min(ws.heard_at + every_s, pinged_at + PING_AT_LEAST_EVERY * every_s)
            if now < due:
                await asyncio.sleep(due - now)
                continue
            pinged_at = now
            if not await self.answers(self.pong_within_s or every_s):
                with contextlib.suppress(OSError, WebSocketException):
                    await ws.close(CloseCode.INTERNAL_ERROR, "keepalive ping timeout")
                return

    def _refused(self, exc: InvalidStatus) -> UpstreamError:
        status = exc.response.status_code
        # get_all: a response with two Location headers must not raise past this translation
        location = next(iter(exc.response.headers.get_all("Location")), None)
        wait_s = retry_after_s(exc.response)
        if status in REDIRECT_STATUSES and location is not None:
            why = f"the upstream redirects ({status}) to {location}; redirects are refused"
        else:
            why = f"the upstream answered HTTP {status}" + ("" if wait_s is None else f", retry after {wait_s:g} s")
        return UpstreamError(redact_urls(f"cannot open {self.url}: {why}"), retry_after_s=wait_s)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None
        if self._ws is not None:
            ws, self._ws = self._ws, None
            with contextlib.suppress(OSError, WebSocketException):
                await ws.close()

    async def answers(self, timeout_s: float) -> bool:
        """Whether the upstream answers a ping within ``timeout_s``: then every frame it sent before it read
        the ping has arrived (a connection delivers in order).  False for a session that died silently."""
        if self._ws is None:
            return False
        try:
            pong = await self._ws.ping()
            await asyncio.wait_for(pong, timeout_s)
        except (TimeoutError, OSError, WebSocketException):
            return False
        return True

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
        except ConnectionClosed as exc:
            if exc.sent is not None and exc.sent.code == CloseCode.MESSAGE_TOO_BIG:
                raise UpstreamError(f"upstream sent a frame over {MAX_FRAME_BYTES} bytes: session closed") from exc
            raise UpstreamError(redact_urls(f"upstream dropped: {type(exc).__name__}: {exc}")) from exc
        except (OSError, WebSocketException) as exc:
            raise UpstreamError(redact_urls(f"upstream dropped: {type(exc).__name__}: {exc}")) from exc
        raise UpstreamError("upstream closed the session")


def retry_after_s(response: Response) -> float | None:
    """How long a 429 or 503 answer asks the client to wait: its one ``Retry-After`` header, in whole seconds
    (at most ``MAX_RETRY_AFTER_S``); None for another status, or a header absent, repeated or not seconds."""
    values = response.headers.get_all("Retry-After")
    if response.status_code not in RETRY_AFTER_STATUSES or len(values) != 1:
        return None
    value = values[0].strip()
    if not (value.isascii() and value.isdigit()):
        return None
    return min(float(value), MAX_RETRY_AFTER_S)


async def pinned_target(url: str, allowlist: Allowlist) -> tuple[str, int]:
    """The address and port to dial for ``url``: the URL admitted by ``allowlist`` and every address its
    host resolves to permitted (public, or allowlisted); UpstreamError saying why not."""
    shown = redact_urls(url)
    target = allowlist.target(url)
    if isinstance(target, str):
        raise UpstreamError(f"refused {shown}: {redact_urls(target)}")
    host, port = target
    literal = ip_literal(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise UpstreamError(f"cannot resolve {host!r} of {shown}: {exc}") from exc
        addresses = list(dict.fromkeys(a for a in (ip_literal(str(info[4][0])) for info in infos) if a))
    refused = [str(address) for address in addresses if not allowlist.permits_address(address)]
    if refused or not addresses:
        listed = ", ".join(refused) or "no address"
        raise UpstreamError(
            f"refused {shown}: {host!r} resolves to {listed}, not a public address; "
            "allowlist the address or its network to permit it"
        )
    return str(addresses[0]), port

