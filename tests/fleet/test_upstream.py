"""Tests of fleet.upstream against small local WebSocket servers: redirects are refused, frames and the
queue are bounded, the resolved address is checked and pinned, and error messages carry no URL secrets."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.client import ClientProtocol
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from fleet.allowlist import Allowlist
from fleet.backoff import Backoff
from fleet.errors import UpstreamError
from fleet.upstream import (
    MAX_FRAME_BYTES,
    MAX_QUEUED_FRAMES,
    UpstreamMessage,
    UpstreamSession,
    parse_message,
    pinned_target,
    redact_urls,
    retry_after_s,
)
from tests.fleet.memworker import until

FRAME = '{"seq": 1, "data": "c1:1", "ts": 1.0}'


@dataclass
class Upstream:
    """A local upstream: ``redirect_to`` makes it answer 302, ``refusal`` answer that instead of every
    handshake; it sends ``frames`` to each session and records the Host header of every request it gets."""

    redirect_to: str | None = None
    refusal: Response | None = None
    frames: list[str] = field(default_factory=lambda: [FRAME])
    hosts: list[str] = field(default_factory=list)
    server: Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = next(iter(self.server.sockets)).getsockname()[1]
        return port

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        self.hosts.append(request.headers.get("Host", ""))
        if self.refusal is not None:
            return self.refusal
        if self.redirect_to is None:
            return None
        return Response(302, "Found", Headers({"Location": self.redirect_to, "Content-Length": "0"}))

    async def handler(self, connection: ServerConnection) -> None:
        for frame in self.frames:
            await connection.send(frame)
        await connection.wait_closed()


@pytest_asyncio.fixture
async def start_upstream() -> AsyncIterator[Callable[..., Any]]:
    servers: list[Server] = []

    async def start(**options: Any) -> Upstream:
        upstream = Upstream(**options)
        upstream.server = await serve(upstream.handler, "127.0.0.1", 0, process_request=upstream.process_request,
                                      max_size=None)
        servers.append(upstream.server)
        return upstream

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


def taking(got: list[UpstreamMessage], count: int | None = None) -> Callable[[UpstreamMessage], bool]:
    """A consumer that keeps what it is handed in ``got`` and ends the reading once it holds ``count``."""
    def take(message: UpstreamMessage) -> bool:
        got.append(message)
        return count is not None and len(got) >= count
    return take


async def first_message(url: str, allowlist: Allowlist | None = None) -> int:
    got: list[UpstreamMessage] = []
    async with UpstreamSession(url, "worker-1", 2.0, allowlist=allowlist) as session:
        session.deliver_to(taking(got, 1))
        assert await session.finished() is True
    return got[0].seq


@pytest.mark.parametrize("location", [
    "ws://169.254.170.2/v2/credentials/abc",
    "ws://127.0.0.1:{port}/elsewhere",  # even a redirect to an upstream that would answer
    "/same-origin",
])
async def test_redirects_are_refused_not_followed(start_upstream: Callable[..., Any], location: str) -> None:
    target = await start_upstream()
    redirecting = await start_upstream(redirect_to=location.format(port=target.port))

    with pytest.raises(UpstreamError) as refused:
        await first_message(f"ws://127.0.0.1:{redirecting.port}/streams/c1?token=secret")

    message = str(refused.value)
    assert "redirects (302)" in message and "redirects are refused" in message
    assert "secret" not in message
    assert len(redirecting.hosts) == 1
    assert target.hosts == []


async def test_a_redirect_with_two_locations_is_refused_like_any_other(start_upstream: Callable[..., Any]) -> None:
    """A hostile upstream's duplicate header must not raise past the one place errors are translated."""
    upstream = await start_upstream(refusal=refusal(302, ("Location", "ws://a/"), ("Location", "ws://b/")))

    with pytest.raises(UpstreamError, match=r"redirects \(302\) to ws://a/; redirects are refused"):
        await first_message(f"ws://127.0.0.1:{upstream.port}/streams/c1")


async def test_an_oversized_frame_closes_the_session_with_a_clear_reason(
    start_upstream: Callable[..., Any]
) -> None:
    upstream = await start_upstream(frames=[FRAME, "x" * (MAX_FRAME_BYTES + 1)])

    got: list[UpstreamMessage] = []
    async with UpstreamSession(f"ws://127.0.0.1:{upstream.port}/s", "worker-1", 2.0) as session:
        session.deliver_to(taking(got))
        with pytest.raises(UpstreamError, match=f"upstream sent a frame over {MAX_FRAME_BYTES} bytes"):
            await session.finished()
    assert [m.seq for m in got] == [1]


async def test_a_frame_of_the_limit_is_read(start_upstream: Callable[..., Any]) -> None:
    padding = MAX_FRAME_BYTES - len('{"seq": 2, "data": "", "ts": 1.0}')
    upstream = await start_upstream(frames=['{"seq": 2, "data": "' + "x" * padding + '", "ts": 1.0}'])
    assert await first_message(f"ws://127.0.0.1:{upstream.port}/s") == 2


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_connect_errors_carry_no_query_or_user_information() -> None:
    url = f"ws://127.0.0.1:{closed_port()}/streams/c1?token=secret&from_seq=5"
    with pytest.raises(UpstreamError) as failed:
        await first_message(url)
    message = str(failed.value)
    assert f"cannot open ws://127.0.0.1:{url.split(':')[2].split('/')[0]}/streams/c1?..." in message
    assert "secret" not in message


@pytest.mark.parametrize(("text", "redacted"), [
    ("cannot open ws://h:1/p?token=s: refused", "cannot open ws://h:1/p?...: refused"),
    ("to wss://user:pw@h/p#frag and http://h/x?y", "to wss://h/p?... and http://h/x?..."),
    ("'ws://h/p?q' in quotes", "'ws://h/p?...' in quotes"),
    ("ws://a@b:c@h/p?x=1&y=2.", "ws://h/p?...."),
    ("no url here", "no url here"),
])
def test_redact_urls(text: str, redacted: str) -> None:
    assert redact_urls(text) == redacted


def fake_resolver(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[str]]) -> None:
    """Make the running loop resolve the names in ``answers`` to those addresses (others as usual)."""
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo

    async def getaddrinfo(host: Any, port: Any, **kwargs: Any) -> Any:
        if host in answers:
            return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                    for a in answers[host]]
        return await real(host, port, **kwargs)

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)


async def test_the_session_dials_the_checked_address_and_keeps_the_name(
    start_upstream: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """upstream.test does not exist: the session can only reach the server by dialing the address it
    resolved and checked itself, while the Host header still names upstream.test."""
    upstream = await start_upstream()
    fake_resolver(monkeypatch, {"upstream.test": ["127.0.0.1"]})
    allowlist = Allowlist.parse((f"upstream.test:{upstream.port}", "127.0.0.0/8"))

    assert await first_message(f"ws://upstream.test:{upstream.port}/s", allowlist) == 1
    assert upstream.hosts == [f"upstream.test:{upstream.port}"]


@pytest.mark.parametrize(("answers", "fragment"), [
    (["127.0.0.1"], "resolves to 127.0.0.1, not a public address"),
    (["169.254.170.2"], "resolves to 169.254.170.2"),
    (["10.1.2.3"], "resolves to 10.1.2.3"),
    (["93.184.216.34", "192.168.0.7"], "resolves to 192.168.0.7"),  # one private answer is enough
    (["::ffff:169.254.169.254"], "resolves to ::ffff:a9fe:a9fe"),
    ([], "resolves to no address"),
])
async def test_names_resolving_to_unlisted_private_addresses_are_refused(
    monkeypatch: pytest.MonkeyPatch, answers: list[str], fragment: str
) -> None:
    fake_resolver(monkeypatch, {"stream.example.com": answers})
    with pytest.raises(UpstreamError, match=fragment):
        await pinned_target("wss://stream.example.com/s?token=x", Allowlist.parse(("stream.example.com",)))


@pytest.mark.parametrize(("entries", "answers", "pinned"), [
    (("stream.example.com",), ["93.184.216.34", "2606:2800:220:1::1"], "93.184.216.34"),
    (("stream.example.com", "10.0.0.0/8"), ["10.1.2.3"], "10.1.2.3"),
    (("stream.example.com", "[fd00::5]"), ["fd00::5"], "fd00::5"),
])
async def test_public_or_allowlisted_addresses_are_pinned(
    monkeypatch: pytest.MonkeyPatch, entries: tuple[str, ...], answers: list[str], pinned: str
) -> None:
    fake_resolver(monkeypatch, {"stream.example.com": answers})
    assert await pinned_target("wss://stream.example.com/s", Allowlist.parse(entries)) == (pinned, 443)


async def test_an_explicitly_allowlisted_loopback_address_needs_no_resolution() -> None:
    allowlist = Allowlist.parse(("127.0.0.1:9000",))
    assert await pinned_target("ws://127.0.0.1:9000/s", allowlist) == ("127.0.0.1", 9000)


@pytest.mark.parametrize(("url", "fragment"), [
    ("ws://stream.example.com:22/s", "port 22 is not in the allowlist"),
    ("ws://other.example.com/s?token=x", "'other.example.com' port 80 is not in the allowlist"),
    ("ws://[stream.example.com]/s", "ws_url is malformed"),
])
async def test_urls_outside_the_allowlist_are_refused_before_resolving(url: str, fragment: str) -> None:
    with pytest.raises(UpstreamError, match=fragment) as refused:
        await pinned_target(url, Allowlist.parse(("stream.example.com",)))
    assert "token=x" not in str(refused.value)


def refusal(status: int, *headers: tuple[str, str]) -> Response:
    return Response(status, "Refused", Headers([*headers, ("Content-Length", "0")]))


@pytest.mark.parametrize("status", [429, 503])
async def test_a_refusal_with_retry_after_makes_the_next_attempt_wait_at_least_that_long(
    start_upstream: Callable[..., Any], status: int
) -> None:
    upstream = await start_upstream(refusal=refusal(status, ("Retry-After", "2")))

    with pytest.raises(UpstreamError) as refused:
        await first_message(f"ws://127.0.0.1:{upstream.port}/s?token=secret")

    assert refused.value.retry_after_s == 2.0
    assert str(refused.value).endswith(f"/s?...: the upstream answered HTTP {status}, retry after 2 s")
    wait_s = refused.value.retry_after_s
    # full jitter's first draw is at most the base (1 s): the upstream's 2 s win, up to the cap
    assert Backoff("full", base_s=1.0, cap_s=10.0, rng=random.Random(5)).next_delay(wait_s) == 2.0
    assert Backoff("full", base_s=1.0, cap_s=1.5, rng=random.Random(5)).next_delay(wait_s) == 1.5
    # a longer delay of the policy's own stands
    assert Backoff("exponential", base_s=3.0, cap_s=10.0, rng=random.Random(5)).next_delay(wait_s) == 3.0


@pytest.mark.parametrize(("response", "seconds"), [
    (refusal(429, ("Retry-After", " 120 ")), 120.0),
    (refusal(503, ("Retry-After", "0")), 0.0),
    (refusal(429, ("Retry-After", "9" * 400)), 86_400.0),  # a day at most: finite however long it asks
    (refusal(429), None),  # no header
    (refusal(500, ("Retry-After", "2")), None),  # only 429 and 503 say when to come back
    (refusal(429, ("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT")), None),  # an HTTP date is not read
    (refusal(429, ("Retry-After", "1.5")), None),  # delta-seconds are whole
    (refusal(429, ("Retry-After", "-3")), None),
    (refusal(429, ("Retry-After", "1"), ("Retry-After", "60")), None),  # which one?
])
def test_retry_after_is_read_only_as_one_header_of_whole_seconds_on_429_or_503(response: Response,
                                                                               seconds: float | None) -> None:
    assert retry_after_s(response) == seconds


async def test_a_refusal_without_retry_after_carries_none(start_upstream: Callable[..., Any]) -> None:
    upstream = await start_upstream(refusal=refusal(429))
    with pytest.raises(UpstreamError, match=r"answered HTTP 429$") as refused:
        await first_message(f"ws://127.0.0.1:{upstream.port}/s")
    assert refused.value.retry_after_s is None


async def test_a_retry_after_of_latin_1_digits_is_not_read() -> None:
    """Header values arrive decoded as ISO-8859-1, where "\u00b2" (superscript two) is a digit to Python but
    no number to ``float``: a raw upstream sends one, and the refusal is still an UpstreamError."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: \xb2\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    async with await asyncio.start_server(answer, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(UpstreamError, match=r"answered HTTP 429$") as refused:
            await first_message(f"ws://127.0.0.1:{port}/s")
    assert refused.value.retry_after_s is None


async def test_a_session_that_died_silently_is_closed_by_its_keepalive() -> None:
    """After its first frame the upstream reads nothing (a half-open connection: pings go unanswered) and
    sends nothing: the keepalive closes the session with an error instead of leaving it open and silent."""

    class Silenced(Upstream):
        async def handler(self, connection: ServerConnection) -> None:
            await connection.send(FRAME)
            connection.transport.pause_reading()
            await connection.wait_closed()

    upstream = Silenced()
    upstream.server = await serve(upstream.handler, "127.0.0.1", 0)
    try:
        async with UpstreamSession(f"ws://127.0.0.1:{upstream.port}/s", "w1", 2.0, ping_every_s=0.2,
                                   pong_within_s=0.2) as session:
            assert await session.answers(0.5) is False
            got: list[UpstreamMessage] = []
            session.deliver_to(taking(got))
            with pytest.raises(UpstreamError, match="upstream dropped"):
                await asyncio.wait_for(session.finished(), 10)
            assert [m.seq for m in got] == [1]
    finally:
        for connection in upstream.server.connections:
            connection.transport.abort()  # it reads nothing: it would never see the client leave
        upstream.server.close()
        await upstream.server.wait_closed()


async def test_a_session_that_hears_its_upstream_sends_it_no_ping(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPU per held stream (issue 26): a session pings only once it has heard nothing (no frame, not even the
    upstream's own ping) for ``ping_every_s``: what arrives proves the connection alive, so a stream that
    delivers sends no ping."""
    pings: list[float] = []
    ping = ClientProtocol.send_ping

    def counted(self: ClientProtocol, data: bytes) -> None:
        pings.append(asyncio.get_running_loop().time())
        ping(self, data)

    monkeypatch.setattr(ClientProtocol, "send_ping", counted)

    class Busy(Upstream):
        async def handler(self, connection: ServerConnection) -> None:
            with contextlib.suppress(ConnectionClosed):
                while True:  # the stream's rate: a frame every 50 ms until the client leaves
                    await connection.send(FRAME)
                    await asyncio.sleep(0.05)

    upstream = Busy()
    upstream.server = await serve(upstream.handler, "127.0.0.1", 0)
    try:
        async with UpstreamSession(f"ws://127.0.0.1:{upstream.port}/s", "w1", 2.0, ping_every_s=0.25,
                                   pong_within_s=1.0) as session:
            session.deliver_to(taking([], 15))  # 0.75 s: three times ping_every_s
            assert await session.finished() is True
    finally:
        upstream.server.close()
        await upstream.server.wait_closed()
    assert pings == []


async def test_a_live_session_answers_a_ping(start_upstream: Callable[..., Any]) -> None:
    upstream = await start_upstream()
    async with UpstreamSession(f"ws://127.0.0.1:{upstream.port}/s", "w1", 2.0) as session:
        assert await session.answers(2.0) is True


async def test_each_message_reaches_the_consumer_in_the_transports_callback_not_in_a_task(
        start_upstream: Callable[..., Any]) -> None:
    """CPU per message (issue 26): a message is parsed and handed over inside ``data_received``; no task
    wakes for it (with websockets' asyncio client each went through a queue, a future and a task wake)."""

    class Paced(Upstream):
        async def handler(self, connection: ServerConnection) -> None:
            for seq in range(1, 51):  # the stream's rate: a frame every 5 ms
                await connection.send(f'{{"seq": {seq}, "data": "c1:{seq}", "ts": 1.0}}')
                await asyncio.sleep(0.005)
            await connection.wait_closed()

    upstream = Paced()
    upstream.server = await serve(upstream.handler, "127.0.0.1", 0)
    tasks: list[asyncio.Task[Any] | None] = []

    def take(message: UpstreamMessage) -> bool:
        tasks.append(asyncio.current_task())
        return message.seq == 50

    try:
        async with UpstreamSession(f"ws://127.0.0.1:{upstream.port}/s", "w1", 2.0) as session:
            session.deliver_to(take)
            before = len(tasks)  # those that arrived before, handed over by ``deliver_to`` itself
            assert await session.finished() is True
    finally:
        upstream.server.close()
        await upstream.server.wait_closed()
    assert before < 50 and tasks[before:] == [None] * (50 - before)


async def test_what_arrives_before_a_consumer_waits_bounded_and_is_delivered_in_order(
        start_upstream: Callable[..., Any]) -> None:
    """Until a consumer takes them, at most ``MAX_QUEUED_FRAMES`` messages are held and reading pauses (the
    rest wait in the socket); a fragmented message is put together; all come in order once it is set."""
    padding = "x" * 8000  # a socket read holds a few frames, not all of them
    frames: list[Any] = [f'{{"seq": {seq}, "data": "{padding}", "ts": 1.0}}' for seq in range(1, 101)]
    frames[1] = ['{"seq": 2, ', '"data": "c1:2", ', '"ts": 1.0}']  # sent in three fragments
    upstream = await start_upstream(frames=frames)
    got: list[UpstreamMessage] = []
    async with UpstreamSession(f"ws://127.0.0.1:{upstream.port}/s", "w1", 2.0) as session:
        wire = session._wire
        assert wire is not None
        await until(lambda: wire.paused)
        assert MAX_QUEUED_FRAMES <= len(wire.unread) < 100
        session.deliver_to(taking(got, 100))
        assert await session.finished() is True
    assert [m.seq for m in got] == list(range(1, 101))
    assert got[1].data == "c1:2"


async def test_a_consumer_that_raises_ends_the_reading_with_its_error(start_upstream: Callable[..., Any]) -> None:
    upstream = await start_upstream(frames=[FRAME, '{"seq": 2, "data": "x", "ts": 1.0}'])
    got: list[UpstreamMessage] = []

    def refuse(message: UpstreamMessage) -> bool:
        got.append(message)
        raise UpstreamError("refused by its consumer")

    async with UpstreamSession(f"ws://127.0.0.1:{upstream.port}/s", "w1", 2.0) as session:
        session.deliver_to(refuse)
        with pytest.raises(UpstreamError, match="refused by its consumer"):
            await session.finished()
    assert [m.seq for m in got] == [1]  # nothing is handed over after it


async def test_a_malformed_frame_ends_the_reading(start_upstream: Callable[..., Any]) -> None:
    upstream = await start_upstream(frames=['{"seq": "x"}'])
    async with UpstreamSession(f"ws://127.0.0.1:{upstream.port}/s", "w1", 2.0) as session:
        session.deliver_to(taking([]))
        with pytest.raises(UpstreamError, match="malformed upstream frame"):
            await session.finished()


@pytest.mark.parametrize(("frame", "message"), [
    (b'{"seq": 3, "data": "x", "ts": 17}', UpstreamMessage(3, "x", 17.0)),
    (b'{"ts": 1.5, "data": "\\u00e9", "seq": 4, "src": "up"}', UpstreamMessage(4, "\u00e9", 1.5)),  # others ignored
    (b'{"seq": "3", "data": "x", "ts": 17}', None),  # a sequence is a whole number, not text of one
    (b'{"seq": 3.0, "data": "x", "ts": 17}', None),
    (b'{"seq": 3, "data": 5, "ts": 17}', None),  # data is a string
    (b'{"seq": 3, "data": "x"}', None),
    (b'[3, "x", 17]', None),
    (b'{"seq": 3, "data": "x", "ts": 17', None),
])
def test_a_frame_is_a_message_only_in_the_protocols_shape(frame: bytes, message: UpstreamMessage | None) -> None:
    if message is None:
        with pytest.raises(UpstreamError, match="malformed upstream frame"):
            parse_message(frame)
    else:
        assert parse_message(memoryview(frame)) == message


async def test_closing_the_session_ends_a_reading_that_waits(start_upstream: Callable[..., Any]) -> None:
    """A STOP closes the session of a quiet stream: whoever waits for its reading learns it is over."""
    upstream = await start_upstream(frames=[])
    async with UpstreamSession(f"ws://127.0.0.1:{upstream.port}/s", "w1", 2.0) as session:
        session.deliver_to(taking([]))
        waiting = asyncio.create_task(session.finished())
        await session.close()
        with pytest.raises(UpstreamError, match="upstream closed the session"):
            await waiting


async def test_a_quiet_session_says_so_after_idle_s(start_upstream: Callable[..., Any]) -> None:
    upstream = await start_upstream(frames=[FRAME])
    got: list[UpstreamMessage] = []
    async with UpstreamSession(f"ws://127.0.0.1:{upstream.port}/s", "w1", 2.0) as session:
        session.deliver_to(taking(got))
        assert await session.finished(0.2) is False
    assert [m.seq for m in got] == [1]
