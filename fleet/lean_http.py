"""The lean put's HTTP: POSTs to one origin over a few kept-alive HTTP/1.1 connections, each request written
by hand and each answer parsed by ``httptools`` (llhttp, the parser of Node.js), one exchange at a time per
connection.

A general client (aiohttp) spends about 200 µs of client CPU on each request here (cookies, redirects,
tracing, per-read timers), as much as everything else the lean put does; this module does what one small
signed POST needs and nothing else.  It does not speak through a proxy: ``fleet.aws`` sends the put through
the SDK when the environment names one for the endpoint.

Errors come out as the transport's: ``TimeoutError`` (no connection or no whole answer within the timeout),
``ConnectionError`` or another ``OSError`` (refused, reset, closed before the answer was whole, an answer
that is not HTTP), which ``fleet.aws.aws_errors`` translates in its one place.  A connection whose exchange
failed or was cancelled is closed, never reused: what it would read next is unknown.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast
from urllib.parse import urlsplit

import httptools

DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: its status, the headers its pool keeps (lower-case names; absent ones left out) and
    its body."""

    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class _Reading:
    """What has arrived of the answer being read."""

    headers: dict[str, str] = field(default_factory=dict)
    body: list[bytes] = field(default_factory=list)


class _Connection(asyncio.Protocol):
    """One kept-alive connection: ``exchange`` writes a request and waits for its whole answer, keeping the
    headers named in ``kept`` (lower-case)."""

    def __init__(self, kept: frozenset[bytes], loop: asyncio.AbstractEventLoop) -> None:
        self.kept = kept
        self.loop = loop  # kept: asking asyncio for the running loop costs a getpid() system call on 3.11
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.reading = _Reading()
        self.answer: asyncio.Future[Answer] | None = None
        self.reusable = True  # false once closed, or an answer said ``Connection: close`` or failed

    # -- asyncio.Protocol ------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is one, not a subclass of it

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"not an HTTP answer: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self._fail(ConnectionResetError("the connection closed before the answer was whole"))

    # -- httptools callbacks ---------------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name in self.kept:
            self.reading.headers[name.decode("latin-1")] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.reading.body.append(body)

    def on_message_complete(self) -> None:
        reading, self.reading = self.reading, _Reading()
        self.reusable = self.reusable and self.parser.should_keep_alive()
        if self.answer is not None and not self.answer.done():
            self.answer.set_result(Answer(self.parser.get_status_code(), reading.headers, b"".join(reading.body)))
        else:  # an answer nobody asked for: what follows it cannot be trusted
            self._fail(ConnectionError("an answer arrived with no request"))

    # -- use -------------------------------------------------------------------------------------------
    async def exchange(self, request: bytes, timeout_s: float | None) -> Answer:
        """Write ``request``; its whole answer, or ``TimeoutError`` after ``timeout_s`` (the connection is then
        closed)."""
        assert self.transport is not None
        answer: asyncio.Future[Answer] = self.loop.create_future()
        self.answer = answer
        timer = None if timeout_s is None else self.loop.call_later(
            timeout_s, self._fail, TimeoutError(f"no whole answer within {timeout_s:g} s"))
        self.transport.write(request)
        try:
            return await answer
        finally:
            if timer is not None:
                timer.cancel()

    def _fail(self, error: Exception) -> None:
        self.reusable = False
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(error)
        self.close()

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()


class HttpPool:
    """POSTs to ``url``'s origin (``http`` or ``https``, checked against ``tls``) on kept-alive connections:
    an idle one if there is, else a new one; each connection and each answer waits at most ``timeout_s``
    (None: no limit).  Answers keep the headers named in ``kept``."""

    def __init__(self, url: str, tls: ssl.SSLContext | None, timeout_s: float | None,
                 kept: tuple[str, ...] = ("date",)) -> None:
        self.kept = frozenset(name.lower().encode("latin-1") for name in kept)
        parts = urlsplit(url)
        if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or DEFAULT_PORTS[parts.scheme]
        self.tls = tls if parts.scheme == "https" else None
        self.target = (parts.path or "/").encode()
        self.timeout_s = timeout_s
        self.idle: list[_Connection] = []

    async def post(self, headers: Mapping[str, str], body: bytes) -> Answer:
        """POST ``body`` with ``headers`` (``Content-Length`` is added); the whole answer.  Raises ``ValueError``
        for a header that holds a line break (it would end the header early: a request smuggled in)."""
        head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        if head.count("\n") != len(headers) or head.count("\r") != len(headers):
            raise ValueError("an HTTP header's name or value holds a line break")
        request = b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
            self.target, head.encode("latin-1"), len(body), body)
        connection = await self._connection()
        try:
            answer = await connection.exchange(request, self.timeout_s)
        except BaseException:
            connection.close()
            raise
        if connection.reusable:
            self.idle.append(connection)
        else:
            connection.close()
        return answer

    async def _connection(self) -> _Connection:
        while self.idle:
            connection = self.idle.pop()
            if connection.reusable:
                return connection
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self.timeout_s):
            _, connection = await loop.create_connection(
                lambda: _Connection(self.kept, loop), self.host, self.port, ssl=self.tls,
                server_hostname=self.host if self.tls is not None else None)
        return connection

    async def close(self) -> None:
        idle, self.idle = self.idle, []
        for connection in idle:
            connection.close()
