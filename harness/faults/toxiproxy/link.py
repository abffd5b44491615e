"""The data path of one proxied TCP connection: two links (upstream: client -> server, downstream:
server -> client), each copying bytes from its source to its destination through the toxics of its stream.

With no toxic on a link the copy is a plain read/write/drain loop.  When toxics apply, a reader keeps
reading (stamping each chunk with the time it arrived) into a bounded queue, and a processor runs every
chunk through the chain of toxics in order; the reader falls back to the plain loop once the chain is
empty and the queue drained, so bytes never overtake each other.  Toxics are attached to, updated on and
detached from live links, so a fault added mid-stream hits connections that are already open.

Toxics that answer requests themselves (``aws_toxics``) write to the client through the connection
(``reply``) and may ask it to hold the server's next answer for a while (``delay_reply``): the downstream
link waits before writing what it read, whichever path (plain or toxic chain) it takes.

A source reaching EOF (or failing) ends its link: the close goes through the chain (``at_eof``), then the
destination is closed, which ends the other link in turn, as Toxiproxy's links do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import struct
from collections.abc import Callable
from typing import Any

from harness.faults.toxiproxy.toxics import DOWNSTREAM, UPSTREAM, Chunk, ProxyToxic

log = logging.getLogger("toxiproxy")

READ_SIZE = 64 * 1024
QUEUE_CHUNKS = 1024  # chunks a link buffers ahead of a slow toxic before it stops reading its source


class ToxicStub:
    """One toxic as applied to one link (Toxiproxy's ToxicStub): implements ``toxics.ToxicContext``."""

    def __init__(self, link: Link, entry: ProxyToxic, rng: random.Random, state: dict[str, Any]) -> None:
        self.link = link
        self.entry = entry
        self.toxic = entry.toxic
        self.rng = rng
        self.state = state
        self.toxicity = entry.toxicity
        # toxicity: the chance the toxic affects this link, unless the toxic draws it per request
        self.applied = entry.toxic.request_toxicity or rng.random() < entry.toxicity
        self.detached = False
        self._wakeups: set[asyncio.Future[None]] = set()
        self._timers: list[asyncio.TimerHandle] = []

    def now(self) -> float:
        return self.link.loop.time()

    async def sleep_until(self, deadline: float) -> None:
        loop = self.link.loop
        if self.detached or deadline <= loop.time():
            return
        wakeup: asyncio.Future[None] = loop.create_future()
        timer = loop.call_at(deadline, _wake, wakeup)
        self._wakeups.add(wakeup)
        try:
            await wakeup
        finally:
            timer.cancel()
            self._wakeups.discard(wakeup)

    def call_later(self, seconds: float, callback: Callable[[], None]) -> None:
        if not self.detached:
            self._timers.append(self.link.loop.call_later(seconds, callback))

    def close(self) -> None:
        self.link.connection.close()

    def reset(self) -> None:
        self.link.connection.abort(reset=True)

    async def reply(self, data: bytes) -> None:
        if not self.link.connection.closing:
            writer = self.link.connection.links[self.link.other_stream].writer
            writer.write(data)
            await writer.drain()

    def delay_reply(self, seconds: float) -> None:
        self.link.connection.links[self.link.other_stream].delay_next(seconds)

    def release_replies(self) -> None:
        self.link.connection.links[self.link.other_stream].release()

    def detach(self) -> None:
        """Stop affecting the link: cancel timers and release any data the toxic is holding."""
        self.detached = True
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        for wakeup in list(self._wakeups):
            _wake(wakeup)


def _wake(wakeup: asyncio.Future[None]) -> None:
    if not wakeup.done():
        wakeup.set_result(None)


class Link:
    """One direction of a connection: ``reader`` (the source) -> toxics of ``stream`` -> ``writer``."""

    def __init__(
        self, connection: Connection, stream: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.connection = connection
        self.stream = stream
        self.reader = reader
        self.writer = writer
        self.loop = asyncio.get_running_loop()
        self.stubs: dict[str, ToxicStub] = {}  # by toxic name, in chain order
        self.chain: tuple[ToxicStub, ...] = ()  # the stubs that apply (won their toxicity draw)
        self._queue: asyncio.Queue[Chunk] | None = None
        self._backlog = 0  # chunks queued or being processed
        self._processor: asyncio.Task[None] | None = None
        self._next_delay: float | None = None  # seconds to hold the next bytes read (``delay_next``)
        self._held_until = 0.0  # loop time before which read bytes are not written
        self._release: asyncio.Future[None] | None = None

    @property
    def other_stream(self) -> str:
        return DOWNSTREAM if self.stream == UPSTREAM else UPSTREAM

    # -- holds asked for by the other direction's toxics -------------------------------------------------
    def delay_next(self, seconds: float) -> None:
        self._next_delay = seconds

    def release(self) -> None:
        self._next_delay = None
        self._held_until = 0.0
        if self._release is not None:
            _wake(self._release)

    def _stamp(self, read_at: float) -> None:
        """Bytes were read at ``read_at``: start the pending hold there."""
        if self._next_delay is not None:
            self._held_until = max(self._held_until, read_at + self._next_delay)
            self._next_delay = None

    async def _held(self) -> None:
        """Wait until held bytes may be written."""
        while (delay := self._held_until - self.loop.time()) > 0:
            self._release = self.loop.create_future()
            timer = self.loop.call_later(delay, _wake, self._release)
            try:
                await self._release
            finally:
                timer.cancel()
                self._release = None

    # -- toxics -----------------------------------------------------------------------------------------
    def attach(self, entry: ProxyToxic, rng: random.Random) -> None:
        self._install(entry, ToxicStub(self, entry, rng, {}))

    def replace(self, entry: ProxyToxic, rng: random.Random) -> None:
        """The toxic was updated: it restarts on this link with new attributes, keeping its state."""
        old = self.stubs.get(entry.name)
        if old is None:
            self.attach(entry, rng)
            return
        old.detach()
        self._install(entry, ToxicStub(self, entry, rng, old.state))

    def detach(self, name: str) -> None:
        """The toxic was removed from the proxy."""
        stub = self.stubs.pop(name, None)
        if stub is None:
            return
        stub.detach()
        self._rebuild_chain()
        if stub.applied:
            stub.toxic.removed(stub)

    def _install(self, entry: ProxyToxic, stub: ToxicStub) -> None:
        self.stubs[entry.name] = stub  # an existing key keeps its place in the chain
        self._rebuild_chain()
        if stub.applied:
            stub.toxic.start(stub)

    def _rebuild_chain(self) -> None:
        self.chain = tuple(stub for stub in self.stubs.values() if stub.applied)

    def detach_all(self) -> None:
        for stub in self.stubs.values():
            stub.detach()
        self.stubs.clear()
        self.chain = ()

    # -- data path --------------------------------------------------------------------------------------
    async def pump(self) -> None:
        """Copy the source to the destination until the source ends; then close the destination."""
        reader, writer, connection = self.reader, self.writer, self.connection
        try:
            while True:
                try:
                    data = await reader.read(READ_SIZE)
                except OSError:
                    data = b""
                if connection.closing:
                    if not data:
                        break
                    continue  # closing: what still arrives is dropped
                if data:
                    self._stamp(self.loop.time())
                if not self.chain and self._backlog == 0:
                    if not data:
                        break
                    await self._held()
                    writer.write(data)
                    await writer.drain()
                    continue
                await self._enqueue(Chunk(data, self.loop.time()))
                if not data:
                    if self._processor is not None:
                        await self._processor
                    return
            self._end()
        except OSError:
            connection.abort()
        finally:
            if self._processor is not None:
                self._processor.cancel()

    async def _enqueue(self, chunk: Chunk) -> None:
        if self._queue is None:
            self._queue = asyncio.Queue(QUEUE_CHUNKS)
            self._processor = asyncio.create_task(self._process(self._queue))
        self._backlog += 1
        await self._queue.put(chunk)

    async def _process(self, queue: asyncio.Queue[Chunk]) -> None:
        """Run queued chunks through the chain in order; an empty chunk is the source's EOF."""
        try:
            while True:
                chunk = await queue.get()
                try:
                    if not chunk.data:
                        for stub in self.chain:
                            if not stub.detached:
                                await stub.toxic.at_eof(stub)
                        self._end()
                        return
                    if not self.connection.closing:
                        await self._through(self.chain, 0, chunk)
                finally:
                    self._backlog -= 1
        except OSError:
            self.connection.abort()
        except Exception:  # a toxic bug must not leave the link stalled behind a dead processor
            log.exception("toxic chain failed on a %s link; dropping the connection", self.stream)
            self.connection.abort()

    async def _through(self, chain: tuple[ToxicStub, ...], index: int, chunk: Chunk) -> None:
        """Pass ``chunk`` to stub ``index`` of ``chain``, or write it out past the last one."""
        while index < len(chain) and chain[index].detached:
            index += 1
        if index == len(chain):
            if chunk.data and not self.connection.closing:
                await self._held()
                self.writer.write(chunk.data)
                await self.writer.drain()
            return
        stub = chain[index]

        async def out(passed: Chunk) -> None:
            await self._through(chain, index + 1, passed)

        await stub.toxic.pipe(chunk, out, stub)

    def _end(self) -> None:
        """The source ended and everything before the end was passed on: close the destination."""
        self.writer.close()


class Connection:
    """A client connection accepted by a proxy, and its connection to the upstream."""

    def __init__(
        self,
        serial: int,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self.serial = serial  # 1, 2, ... per proxy: keys the toxicity draws
        self.closing = False
        self._writers = (client[1], upstream[1])
        self.links = {
            UPSTREAM: Link(self, UPSTREAM, client[0], upstream[1]),
            DOWNSTREAM: Link(self, DOWNSTREAM, upstream[0], client[1]),
        }
        self._pumps: list[asyncio.Task[None]] = []

    async def run(self) -> None:
        """Carry data both ways until both links have ended or the connection is aborted."""
        self._pumps = [asyncio.create_task(link.pump()) for link in self.links.values()]
        try:
            await asyncio.gather(*self._pumps, return_exceptions=True)
        finally:
            for pump in self._pumps:
                pump.cancel()
            for link in self.links.values():
                link.detach_all()
            for writer in self._writers:
                if not writer.is_closing():
                    writer.transport.abort()

    def close(self) -> None:
        """Close both sockets gracefully (buffered bytes are sent first, then FIN)."""
        if self.closing:
            return
        self.closing = True
        for writer in self._writers:
            writer.close()

    def abort(self, reset: bool = False) -> None:
        """Drop both sockets now; with ``reset`` the peers get a TCP RST instead of a FIN."""
        self.closing = True
        for writer in self._writers:
            if reset:
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        for pump in self._pumps:
            pump.cancel()
