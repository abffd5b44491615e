"""The outbound WebSocket session to the upstream source.

``UpstreamSession`` opens ``ws_url`` (rewritten to the worker's own proxy when ``upstream_via`` is set),
asks to resume from a sequence with ``?from_seq=N``, identifies the worker with ``X-Worker-Id`` and its
incarnation with ``X-Worker-Gen``, and hands each parsed message to its consumer (``deliver_to``) as it
arrives, synchronously, inside the transport's ``data_received``: no task wakes per message (issue 26: the
asyncio client's per-message hand-off through a queue, a future and a task wake cost about half the
receive path).  The wire is websockets' sans-I/O ``ClientProtocol`` under our own asyncio protocol
(``_Wire``), which writes what the protocol has to send (pongs, the closing handshake) back at once.  The
client answers the server's pings as long as it reads, and pings only a session it has heard nothing from for
a while (``ping_every_s``): a stream that delivers, or an upstream that pings, costs no ping.  Every
websockets or socket error is translated here into ``UpstreamError``; a handshake refused with 429 or 503
and a ``Retry-After`` in seconds carries that wait (``retry_after_s``).

Hostile upstreams: given an ``Allowlist``, the session checks the URL against it, resolves the name once,
refuses it when any address is not public and not allowlisted (``fleet.allowlist``), and dials that one
address (the Host header and TLS SNI keep the name), so DNS rebinding cannot move it; it dials directly,
never through a proxy from the environment.  Redirects are refused, not followed.  A frame may hold at most
``MAX_FRAME_BYTES`` (a larger frame closes the session with 1009), and what waits unread is bounded: at
most ``MAX_QUEUED_FRAMES`` messages before a consumer takes them, after that whatever the consumer holds
before it pauses reading (``pause_reading``, backpressure); error messages carry URLs without their query
or user information (``redact_urls``).

How long to wait before reconnecting is ``fleet.backoff``'s, which honours that ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import cast
from urllib.parse import urlencode, urlsplit, urlunsplit

import msgspec
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK, InvalidStatus, InvalidURI, WebSocketException
from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import USER_AGENT, Response
from websockets.protocol import OPEN
from websockets.uri import parse_uri

from fleet.allowlist import Allowlist, ip_literal
from fleet.errors import UpstreamError

# Largest frame accepted (a bigger one closes the session with 1009) and most messages held unread before a
# consumer takes them (reading pauses meanwhile): a stream holds at most (MAX_QUEUED_FRAMES + 1) *
# MAX_FRAME_BYTES = 272 KiB here, plus what one read of the socket brings.
MAX_FRAME_BYTES = 16 * 1024
MAX_QUEUED_FRAMES = 16
# How long a closing session waits for the upstream to end the connection before dropping it.
CLOSE_TIMEOUT_S = 1.0
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


Consumer = Callable[["UpstreamMessage"], bool]


@dataclass(frozen=True)
class UpstreamMessage:
    seq: int
    data: str
    ts: float


_FRAME = msgspec.json.Decoder(UpstreamMessage)


def parse_message(body: bytes | bytearray | memoryview) -> UpstreamMessage:
    """One frame's message (``{"seq": n, "data": "...", "ts": ms}``: a whole number, a string, a number; other
    fields ignored); UpstreamError for anything else."""
    try:
        return _FRAME.decode(body)
    except msgspec.MsgspecError as exc:
        raise UpstreamError(f"malformed upstream frame: {bytes(body[:80])!r}") from exc


def session_url(ws_url: str, from_seq: int | None, via: str = "") -> str:
    """The URL to dial: the host swapped for ``via`` (host:port) if given, ``from_seq`` added if given."""
    parts = urlsplit(ws_url)
    netloc = via or parts.netloc
    query = parts.query
    if from_seq is not None:
        query = (query + "&" if query else "") + urlencode({"from_seq": from_seq})
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def dropped(closed: ConnectionClosed) -> UpstreamError:
    """How a session that ended reads: closed by the upstream (or by us) in order, closed for a frame over the
    limit, or dropped."""
    if isinstance(closed, ConnectionClosedOK):
        return UpstreamError("upstream closed the session")
    if closed.sent is not None and closed.sent.code == CloseCode.MESSAGE_TOO_BIG:
        return UpstreamError(f"upstream sent a frame over {MAX_FRAME_BYTES} bytes: session closed")
    return UpstreamError(redact_urls(f"upstream dropped: {type(closed).__name__}: {closed}"))


class _Wire(asyncio.Protocol):
    """websockets' sans-I/O ``ClientProtocol`` under an asyncio transport.  ``data_received`` feeds the
    protocol, writes back what it has to send (pongs, the closing handshake), and hands each complete message
    to ``consumer`` at once (held in ``unread``, reading paused at ``MAX_QUEUED_FRAMES``, until one is set).
    Reading ends (``ended``) when the consumer returns True (the result: True), or raises, or the connection
    ends (the error translated by ``dropped``); messages that arrive after are not delivered."""

    def __init__(self, protocol: ClientProtocol, loop: asyncio.AbstractEventLoop) -> None:
        self.protocol = protocol
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.heard_at = self.message_at = loop.time()  # when anything / a message last arrived
        self.answered: asyncio.Future[None] = loop.create_future()  # the handshake's answer, or the end
        self.lost: asyncio.Future[None] = loop.create_future()
        self.ended: asyncio.Future[bool] = loop.create_future()
        self.ended.add_done_callback(_retrieved)
        self.consumer: Consumer | None = None
        self.unread: list[bytes | bytearray | memoryview] = []
        self.parts: list[bytes | bytearray | memoryview] = []  # a fragmented message's frames so far
        self.pings: dict[bytes, asyncio.Future[bool]] = {}
        self.paused = False
        self.closer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is one, not a subclass of it

    def data_received(self, data: bytes) -> None:
        self.heard_at = now = self.loop.time()
        protocol = self.protocol
        protocol.receive_data(data)
        events = protocol.events_received()
        self._send()
        if protocol.close_expected():
            self._close_soon()
        for event in events:
            if not isinstance(event, Frame):  # the handshake's answer
                if not self.answered.done():
                    self.answered.set_result(None)
                continue
            opcode = event.opcode
            if opcode is Opcode.PONG:
                self._pong(bytes(event.data))
            elif opcode is Opcode.TEXT or opcode is Opcode.BINARY or opcode is Opcode.CONT:
                if not event.fin:
                    self.parts.append(event.data)
                    continue
                body = b"".join([*self.parts, event.data]) if self.parts else event.data
                self.parts = []
                if self.consumer is None:
                    self.unread.append(body)
                    if len(self.unread) >= MAX_QUEUED_FRAMES:
                        self.pause_reading()
                    continue
                self.message_at = now
                self._deliver(body)

    def eof_received(self) -> None:
        self.protocol.receive_eof()
        self._send()

    def connection_lost(self, exc: Exception | None) -> None:
        self.protocol.receive_eof()  # idempotent: the protocol is CLOSED after it
        if not self.answered.done():
            self.answered.set_result(None)
        error = dropped(self.protocol.close_exc)
        error.__cause__ = exc
        self.end(error)
        for pong in self.pings.values():
            if not pong.done():
                pong.set_result(False)
        self.pings.clear()
        if self.closer is not None:
            self.closer.cancel()
        self.lost.set_result(None)

    # -- reading ---------------------------------------------------------------------------------------
    def deliver_to(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.message_at = self.loop.time()
        unread, self.unread = self.unread, []
        self.resume_reading()
        for body in unread:
            self._deliver(body)

    def _deliver(self, body: bytes | bytearray | memoryview) -> None:
        if self.ended.done():
            return
        assert self.consumer is not None
        try:
            if self.consumer(parse_message(body)):
                self.end(True)
        except Exception as exc:  # the consumer's refusal ends the reading with it
            self.end(exc)

    def end(self, result: bool | BaseException) -> None:
        """End the reading with ``result`` (an exception: raised to whoever waits for the end)."""
        if self.ended.done():
            return
        if isinstance(result, BaseException):
            self.ended.set_exception(result)
        else:
            self.ended.set_result(result)
        self.pause_reading()

    def pause_reading(self) -> None:
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    # -- writing ---------------------------------------------------------------------------------------
    def _send(self) -> None:
        transport = self.transport
        assert transport is not None
        for data in self.protocol.data_to_send():
            if transport.is_closing():
                return
            if data:
                transport.write(data)
            elif transport.can_write_eof():
                with contextlib.suppress(OSError, RuntimeError):
                    transport.write_eof()
            else:
                transport.close()

    def _close_soon(self) -> None:
        """The upstream is expected to end the connection: drop it if it does not within ``CLOSE_TIMEOUT_S``."""
        if self.closer is None and self.transport is not None:
            self.closer = self.loop.call_later(CLOSE_TIMEOUT_S, self.transport.abort)

    async def handshake(self, headers: dict[str, str]) -> None:
        """Send the opening handshake; raise the protocol's reason if it failed (``InvalidStatus`` for a
        refusal)."""
        request = self.protocol.connect()
        request.headers.update(headers)
        request.headers.setdefault("User-Agent", USER_AGENT)
        self.protocol.send_request(request)
        self._send()
        await self.answered
        if self.protocol.handshake_exc is not None:
            raise self.protocol.handshake_exc

    def ping(self) -> asyncio.Future[bool]:
        """Send a ping; the future is True once its pong (or a later ping's) arrives, False if the connection
        ends first."""
        data = os.urandom(4)
        pong: asyncio.Future[bool] = self.loop.create_future()
        self.protocol.send_ping(data)  # raises InvalidState once the session is closing
        self.pings[data] = pong
        self._send()
        return pong

    def _pong(self, data: bytes) -> None:
        if data not in self.pings:
            return  # unsolicited
        for key in list(self.pings):  # a pong answers its ping and every earlier one
            pong = self.pings.pop(key)
            if not pong.done():
                pong.set_result(True)
            if key == data:
                return

    async def close(self, code: int, reason: str) -> None:
        """The closing handshake; the connection is dropped if the upstream does not end it in time."""
        if self.lost.done():
            return
        self.resume_reading()  # to hear the upstream's answer
        if self.protocol.state is OPEN:
            self.protocol.send_close(code, reason)
            self._send()
        self._close_soon()
        await asyncio.shield(self.lost)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


def _retrieved(future: asyncio.Future[bool]) -> None:
    """An end nobody waited for is not reported as an exception never retrieved."""
    if not future.cancelled():
        future.exception()


class UpstreamSession:
    """One open subscription: ``async with UpstreamSession(...) as s: s.deliver_to(consumer); await
    s.finished()``.

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
        self._wire: _Wire | None = None
        self._keepalive: asyncio.Task[None] | None = None

    async def __aenter__(self) -> UpstreamSession:
        target: tuple[str, int] | None = None
        if self.allowlist is not None:
            target = await pinned_target(self.url, self.allowlist)
        try:
            self._wire = await asyncio.wait_for(self._open(target), self.open_timeout_s)
        except InvalidStatus as exc:
            raise self._refused(exc) from exc
        except (OSError, TimeoutError, InvalidURI, WebSocketException) as exc:
            raise UpstreamError(redact_urls(f"cannot open {self.url}: {type(exc).__name__}: {exc}")) from exc
        if self.ping_every_s is not None:
            self._keepalive = asyncio.create_task(self._keep_alive(self._wire, self.ping_every_s))
        return self

    async def _open(self, target: tuple[str, int] | None) -> _Wire:
        """Connect (to ``target`` if given, else to the URL's host; directly, never through a proxy) and
        complete the opening handshake."""
        uri = parse_uri(self.url)
        loop = asyncio.get_running_loop()
        wire = _Wire(ClientProtocol(uri, max_size=MAX_FRAME_BYTES), loop)
        host, port = target or (uri.host, uri.port)
        tls = ssl.create_default_context() if uri.secure else None
        await loop.create_connection(lambda: wire, host, port, ssl=tls,
                                     server_hostname=uri.host if uri.secure else None)
        try:
            await wire.handshake({"X-Worker-Id": self.worker_id, **({"X-Worker-Gen": self.gen} if self.gen else {})})
        except BaseException:
            wire.abort()
            raise
        return wire

    async def _keep_alive(self, wire: _Wire, every_s: float) -> None:
        """Ping once nothing arrived for ``every_s`` (or no ping went for ``PING_AT_LEAST_EVERY`` times as
        long); close the session with 1011 when that ping's pong does not come within ``pong_within_s``."""
        pinged_at = wire.loop.time()
        while True:
            now = wire.loop.time()
            due = min(wire.heard_at + every_s, pinged_at + PING_AT_LEAST_EVERY * every_s)
            if now < due:
                await asyncio.sleep(due - now)
                continue
            pinged_at = now
            if not await self.answers(self.pong_within_s or every_s):
                await wire.close(CloseCode.INTERNAL_ERROR, "keepalive ping timeout")
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
        if self._wire is not None:
            self._wire.end(UpstreamError("upstream closed the session"))  # a reader waiting learns it is over now
            await self._wire.close(CloseCode.NORMAL_CLOSURE, "")

    async def answers(self, timeout_s: float) -> bool:
        """Whether the upstream answers a ping within ``timeout_s``: then every frame it sent before it read
        the ping has arrived (a connection delivers in order).  False for a session that died silently."""
        if self._wire is None:
            return False
        try:
            return await asyncio.wait_for(self._wire.ping(), timeout_s)
        except (TimeoutError, WebSocketException):
            return False

    def abort(self) -> None:
        """Drop the connection at once, without a closing handshake (self-fencing)."""
        if self._wire is not None:
            self._wire.abort()

    # -- reading ---------------------------------------------------------------------------------------
    def deliver_to(self, consumer: Consumer) -> None:
        """Hand every message, from those already arrived on, to ``consumer`` as it is parsed, in order, on
        the event loop's own callback: no task runs per message.  ``consumer`` returning True ends the
        reading (``finished`` returns True); raising ends it with that exception."""
        self._open_wire().deliver_to(consumer)

    async def finished(self, idle_s: float | None = None) -> bool:
        """Wait for the reading to end: True when the consumer ended it; raises its exception, or the
        session's ``UpstreamError`` when the session ended.  With ``idle_s``, False once no message arrived
        for that long (since the last message, the last such False, or ``deliver_to``)."""
        wire = self._open_wire()
        ended = wire.ended
        if idle_s is None:
            return await asyncio.shield(ended)
        while not ended.done():
            left_s = wire.message_at + idle_s - wire.loop.time()
            if left_s <= 0:
                wire.message_at = wire.loop.time()
                return False
            await asyncio.wait({ended}, timeout=left_s)
        return ended.result()

    def interrupt(self, error: BaseException) -> None:
        """End the reading with ``error`` (the consumer failed outside a delivery)."""
        if self._wire is not None:
            self._wire.end(error)

    def pause_reading(self) -> None:
        """Read nothing more from the connection until ``resume_reading`` (the consumer is full)."""
        if self._wire is not None:
            self._wire.pause_reading()

    def resume_reading(self) -> None:
        if self._wire is not None:
            self._wire.resume_reading()

    def _open_wire(self) -> _Wire:
        if self._wire is None:
            raise UpstreamError("session is not open")
        return self._wire


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

