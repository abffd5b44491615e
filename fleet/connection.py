"""One held connection: the task that consumes its upstream stream and persists every message.

A ``HeldConnection`` exists from an accepted acquire until the lease is released, lost or fenced.  Its
task opens the upstream session (resuming after the last persisted sequence where the profile resumes),
persists each message through the profile's message rule, and reconnects when the upstream drops:
``blog`` after a fixed delay from the live head; ``hardened`` in place with exponential backoff and full
jitter, from the next sequence, giving the lease up when the upstream stays unreachable past the budget.

Before every write and after every received frame it asks the worker's fence whether it may still
consume (``Fence.allows``); the check is synchronous, so a process resumed after a pause drops what it
buffered instead of writing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from fleet.clock import LeaseClock
from fleet.config import FleetConfig
from fleet.errors import StoreError, StoreUnavailable, UpstreamError
from fleet.history import HistoryWriter
from fleet.lease import Holder, Lease, Rules
from fleet.store import LeaseStore
from fleet.upstream import Backoff, UpstreamMessage, UpstreamSession, session_url


async def wait_until_set(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait for ``event`` at most ``timeout_s``; whether it is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), max(0.0, timeout_s))
    return event.is_set()


class Fenced(Exception):
    """The worker may no longer consume: its lease could already be someone else's."""


@dataclass
class Fence:
    """The worker-wide self-fencing deadline on the monotonic clock (inf: never fences)."""

    deadline: float = float("inf")
    broken: bool = False

    def allows(self) -> bool:
        return not self.broken and time.monotonic() < self.deadline


@dataclass
class HeldConnection:
    lease: Lease
    last_seq: int = 0
    persisted: int = 0
    last_checkpoint_seq: int = 0
    checkpointed_at: float = field(default_factory=time.monotonic)
    session: UpstreamSession | None = None
    task: asyncio.Task[None] | None = None
    stop_reason: str = ""
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def pk(self) -> str:
        return self.lease.pk


class ConnectionRunner:
    """Runs the consume loop of held connections for one worker."""

    def __init__(
        self,
        config: FleetConfig,
        rules: Rules,
        me: Holder,
        store: LeaseStore,
        history: HistoryWriter,
        clock: LeaseClock,
        fence: Fence,
        give_up: Callable[[HeldConnection, str], Awaitable[None]],
    ) -> None:
        self.config = config
        self.rules = rules
        self.me = me
        self.store = store
        self.history = history
        self.clock = clock
        self.fence = fence
        self.give_up = give_up
        self.message_slots = asyncio.Semaphore(MESSAGE_WRITES_IN_FLIGHT)

    def _backoff(self) -> Backoff:
        return Backoff(
            base_s=self.config.scaled_s(self.config.reconnect_base_ms),
            cap_s=self.config.scaled_s(self.config.reconnect_max_ms),
            jitter=self.rules.resumes,
        )

    async def consume(self, held: HeldConnection) -> None:
        """The connection's task: subscribe, persist, reconnect, until stopped, fenced or given up."""
        backoff = self._backoff()
        down_since: float | None = None
        budget_s = self.config.scaled_s(self.config.upstream_budget_ms)
        # A new owner resumes after the highest stored sequence; ask for it while the session opens.
        probe = asyncio.create_task(self.store.last_stored_seq(held.pk)) if self.rules.resumes else None
        while not held.stopping.is_set():
            from_seq = held.last_seq + 1 if self.rules.resumes else None
            url = session_url(held.lease.ws_url, from_seq, self.config.upstream_via)
            reason = "closed"
            try:
                if not self.fence.allows():
                    raise Fenced()
                async with UpstreamSession(url, self.me.worker_id, max(0.5, budget_s / 4)) as session:
                    held.session = session
                    self.history.emit("ws.open", pk=held.pk, worker=self.me.worker_id,
                                      epoch=held.lease.epoch, from_seq=from_seq, outcome="ok")
                    down_since = None
                    backoff.reset()
                    if probe is not None:
                        held.last_seq = max(held.last_seq, await self._stored_seq(probe))
                        probe = None
                    sink = MessageSink(self, held)
                    try:
                        async for message in session:
                            if not self.fence.allows():
                                raise Fenced()
                            await sink.submit(message)
                            if held.stopping.is_set():
                                break
                    finally:
                        await sink.drain()
            except Fenced:
                self._closed(held, "fenced")
                return
            except UpstreamError as exc:
                reason = str(exc)
            finally:
                held.session = None
            self._closed(held, held.stop_reason or reason)
            if held.stopping.is_set():
                return
            now = time.monotonic()
            down_since = down_since if down_since is not None else now
            if self.rules.resumes and now - down_since > budget_s:
                await self.give_up(held, "upstream unreachable past budget")
                return
            await wait_until_set(held.stopping, backoff.next_delay())

    async def _stored_seq(self, probe: asyncio.Task[int]) -> int:
        try:
            return await probe
        except StoreError:
            return 0  # the checkpoint stands; replayed messages are rewritten idempotently

    def _closed(self, held: HeldConnection, reason: str) -> None:
        self.history.emit("ws.close", pk=held.pk, worker=self.me.worker_id, reason=reason[:200])

    async def persist(self, held: HeldConnection, messages: list[UpstreamMessage]) -> None:
        """Store consecutive messages: ``blog`` one PutItem each (keyed by the clock); ``hardened`` one
        BatchWriteItem (keyed by sequence, so a repeat overwrites identical data), retried until stored or
        fenced.  Raises ``Fenced``."""
        retry = self._backoff()
        now = self.clock.now_ms()
        writes = [self.rules.message(held.lease, self.me, m.seq, m.data, now) for m in messages]
        while True:
            if not self.fence.allows():
                raise Fenced()
            note: str | None = None
            sent: float | None = None
            try:
                async with self.message_slots:
                    sent = time.time() * 1000.0
                    if self.rules.idempotent_messages:
                        left = await self.store.put_messages([w.apply(None) for w in writes])
                        outcome = "ok" if not left else "info"
                        note = f"{left} unprocessed" if left else None
                    else:
                        for write in writes:
                            await self.store.execute(self.config.messages_table, write, purpose="messages")
                        outcome = "ok"
            except StoreUnavailable as exc:
                outcome, note = "info", str(exc)[:200]
            except StoreError as exc:
                outcome, note = "fail", str(exc)[:200]
            self.history.emit("msg.persist", pk=held.pk, worker=self.me.worker_id, epoch=held.lease.epoch,
                              seq_from=messages[0].seq, seq_to=messages[-1].seq, outcome=outcome, note=note,
                              sent=sent)
            if outcome == "ok" or not self.rules.idempotent_messages:
                break
            await asyncio.sleep(retry.next_delay() / 10)
        if outcome == "ok":
            held.persisted += len(messages)


# Message writes one worker keeps in flight across all its connections, so bulk writes never queue in
# front of lease renewals at the backend.
MESSAGE_WRITES_IN_FLIGHT = 8
# Most messages in one hardened write (BatchWriteItem's limit).
BATCH_MAX = 25


class MessageSink:
    """Persists one session's messages in arrival order.  ``hardened``: a writer task stores whatever has
    queued up since its last write in one batch, so a new owner's backlog costs a few requests, not one
    per message; ``last_seq`` advances only past stored messages.  ``blog``: one at a time, inline."""

    def __init__(self, runner: ConnectionRunner, held: HeldConnection) -> None:
        self.runner = runner
        self.held = held
        self.batched = runner.rules.idempotent_messages
        self.pending: list[UpstreamMessage] = []
        self.wake = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()
        self.writer = asyncio.create_task(self._write_loop()) if self.batched else None

    async def submit(self, message: UpstreamMessage) -> None:
        if not self.batched:
            await self.runner.persist(self.held, [message])
            self.held.last_seq = max(self.held.last_seq, message.seq)
            return
        if message.seq <= self.held.last_seq:
            return  # a replay of what this owner already stored
        self._raise_if_failed()
        self.pending.append(message)
        self.idle.clear()
        self.wake.set()
        if len(self.pending) >= 4 * BATCH_MAX:
            await self._wait_idle()  # backpressure: stop reading until the backlog is stored

    async def _write_loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.pending:
                batch, self.pending = self.pending[:BATCH_MAX], self.pending[BATCH_MAX:]
                await self.runner.persist(self.held, batch)
                self.held.last_seq = max(self.held.last_seq, batch[-1].seq)
            self.idle.set()

    def _raise_if_failed(self) -> None:
        if self.writer is not None and self.writer.done() and not self.writer.cancelled():
            error = self.writer.exception()
            if error is not None:
                raise error

    async def _wait_idle(self) -> None:
        assert self.writer is not None
        await asyncio.wait([self.writer, asyncio.ensure_future(self.idle.wait())],
                           return_when=asyncio.FIRST_COMPLETED)
        self._raise_if_failed()

    async def drain(self) -> None:
        """Store what is queued (safe: writes are idempotent and fenced), then stop the writer."""
        if self.writer is None:
            return
        try:
            if self.pending or not self.idle.is_set():
                await self._wait_idle()
        finally:
            self.writer.cancel()
            await asyncio.gather(self.writer, return_exceptions=True)
