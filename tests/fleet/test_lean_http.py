"""``fleet.lean_http`` against a real socket server that answers as told: kept-alive connections are reused,
an answer ``Connection: close`` or a chunked one is read whole, and a connection whose exchange failed (closed
mid-answer, no answer in time, not HTTP) raises as a transport error and is never reused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from fleet.lean_http import Answer, HttpPool

OK = b"HTTP/1.1 200 OK\r\nDate: Sat, 05 Dec 2026 15:00:00 GMT\r\nContent-Length: 2\r\n\r\n{}"


@dataclass
class Server:
    """Reads each request whole (by its Content-Length) and writes what ``answer`` gives for it (None: nothing,
    the connection kept open); counts connections and keeps the requests."""

    answer: Callable[[int], bytes | None]
    close_after: bool = False  # close each connection after its answer
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                self.requests.append(head + await reader.readexactly(length))
                answer = self.answer(len(self.requests))
                if answer is None:
                    await reader.read()  # hold the connection until the client closes it
                    return
                writer.write(answer)
                await writer.drain()
                if self.close_after:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Any]]:
    servers: list[asyncio.Server] = []

    async def start(answer: Callable[[int], bytes | None], close_after: bool = False) -> Server:
        server = Server(answer, close_after)
        listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        servers.append(listening)
        server.port = listening.sockets[0].getsockname()[1]
        return server

    yield start  # type: ignore[misc]
    for listening in servers:
        listening.close()


async def test_answers_come_back_whole_and_a_kept_alive_connection_is_reused(serve: Callable[..., Any]) -> None:
    server = await serve(lambda n: OK)
    pool = HttpPool(f"http://127.0.0.1:{server.port}/", None, 5.0)
    answers = [await pool.post({"Host": "h", "X-Amz-Target": "T"}, b'{"n":%d}' % n) for n in range(3)]
    assert answers == [Answer(200, {"date": "Sat, 05 Dec 2026 15:00:00 GMT"}, b"{}")] * 3
    assert server.connections == 1
    assert server.requests[0] == (b"POST / HTTP/1.1\r\nHost: h\r\nX-Amz-Target: T\r\nContent-Length: 7\r\n\r\n"
                                  b'{"n":0}')
    await pool.close()


async def test_an_answer_that_closes_its_connection_is_read_whole_and_the_next_request_opens_another(
        serve: Callable[..., Any]) -> None:
    chunked = (b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n")
    server = await serve(lambda n: chunked, close_after=True)
    pool = HttpPool(f"http://127.0.0.1:{server.port}", None, 5.0)
    assert await pool.post({}, b"x") == Answer(400, {}, b'{"a":1}')
    assert await pool.post({}, b"y") == Answer(400, {}, b'{"a":1}')
    assert server.connections == 2
    await pool.close()


async def test_an_answer_keeps_the_headers_its_pool_names_whatever_their_case(serve: Callable[..., Any]) -> None:
    server = await serve(lambda n: b"HTTP/1.1 200 OK\r\nX-Amz-CRC32: 2745614147\r\nDATE: d\r\nX-Other: o\r\n"
                                   b"Content-Length: 2\r\n\r\n{}")
    pool = HttpPool(f"http://127.0.0.1:{server.port}", None, 5.0, kept=("date", "x-amz-crc32"))
    assert (await pool.post({}, b"x")).headers == {"date": "d", "x-amz-crc32": "2745614147"}
    await pool.close()


async def test_a_connection_the_server_closed_while_idle_is_not_used_again(serve: Callable[..., Any]) -> None:
    server = await serve(lambda n: OK, close_after=True)
    pool = HttpPool(f"http://127.0.0.1:{server.port}", None, 5.0)
    await pool.post({}, b"x")
    [idle] = pool.idle
    while idle.reusable:  # yield to the loop until the server's close has reached the client
        await asyncio.sleep(0)
    assert (await pool.post({}, b"y")).status == 200
    assert server.connections == 2


@pytest.mark.parametrize(("answer", "error"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", ConnectionResetError),  # closed mid-answer
    (b"SSH-2.0-OpenSSH_9.6\r\n", ConnectionError),  # not HTTP
])
async def test_an_exchange_that_fails_raises_a_transport_error_and_its_connection_is_dropped(
        serve: Callable[..., Any], answer: bytes, error: type[Exception]) -> None:
    server = await serve(lambda n: answer if n == 1 else OK, close_after=True)
    pool = HttpPool(f"http://127.0.0.1:{server.port}", None, 5.0)
    with pytest.raises(error):
        await pool.post({}, b"x")
    assert pool.idle == []
    assert (await pool.post({}, b"y")).status == 200  # a new connection
    assert server.connections == 2


async def test_no_answer_in_time_is_a_timeout_and_the_connection_is_closed(serve: Callable[..., Any]) -> None:
    server = await serve(lambda n: None if n == 1 else OK)
    pool = HttpPool(f"http://127.0.0.1:{server.port}", None, 0.2)
    with pytest.raises(TimeoutError):
        await pool.post({}, b"x")
    assert pool.idle == []
    assert (await pool.post({}, b"y")).status == 200
    assert server.connections == 2


async def test_a_refused_connection_is_an_os_error() -> None:
    listening = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    listening.close()
    await listening.wait_closed()
    with pytest.raises(OSError):
        await HttpPool(f"http://127.0.0.1:{port}", None, 1.0).post({}, b"x")


@pytest.mark.parametrize("headers", [{"User-Agent": "x\r\nX-Injected: 1"}, {"X-A": "x\ny"}, {"X-A\r": "x"}])
async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent(
        serve: Callable[..., Any], headers: dict[str, str]) -> None:
    server = await serve(lambda n: OK)
    with pytest.raises(ValueError, match="line break"):
        await HttpPool(f"http://127.0.0.1:{server.port}", None, 5.0).post(headers, b"x")
    assert server.connections == 0


def test_only_an_http_url_makes_a_pool() -> None:
    with pytest.raises(ValueError, match="not an http"):
        HttpPool("ftp://h/", None, 1.0)
