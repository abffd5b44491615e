"""One held connection: the task that consumes its upstream stream and persists every message.

A ``HeldConnection`` exists from an accepted acquire until the lease is released, lost or fenced.  Its
task opens the upstream session (resuming after the last persisted sequence where the profile resumes),
persists each message through the profile's message rule, and reconnects when the upstream drops, after
the delay of the profile's reconnect policy (``fleet.backoff``; unless configured otherwise, ``blog`` a
fixed delay, ``hardened`` full jitter): ``blog`` from the live head; ``hardened`` in place from the next
sequence, giving the lease up when the upstream stays unreachable past the budget.  Every handshake, the
first or a reconnect, waits its turn at the worker's pace (``handshake_rate``, ``fleet.claims.HandshakePacer``).

A drain (``HeldConnection.drain_until_ms`` set: a STOPPED stream whose owner died, ``fleet.lease``) consumes
the same way from the first missing sequence, until the profile's rule says the drain is over (the first
message emitted past the STOP, or no message for a while once the clock is past it, on a session that then
answers a ping): everything before is stored, the history gets ``drain.done`` and the lease is released as
drained.  A drain that cannot finish is not released as drained (``fleet.worker.Worker.drop``), so it is
drained again.  Every session pings its upstream (``UpstreamSession`` keepalive): one that died silently,
a half-open connection, is closed and reopened from the next sequence.

After every received frame, and right before every write request goes out (inside its slot, after any
wait), it asks the fence of the incarnation that took the stream up whether it may still consume
(``Fence.allows``, on the fence clock); the check is synchronous, so a process resumed after a pause drops what it
buffered instead of writing it.  The store fences message writes again server-side (``Rules.held``): a
write that left before the fence closed but arrives after a takeover is refused, wholly where the backend
has transactions, per message over a newer epoch where it has not (``LeaseStore.put_message_unless_newer``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field

from fleet.allowlist import Allowlist
from fleet.backoff import Backoff
from fleet.claims import HandshakePacer
from fleet.clock import Clock, monotonic_s
from fleet.config import FleetConfig
from fleet.errors import ConditionFailed, StoreError, StoreUnavailable, UpstreamError
from fleet.expr import Condition, Write
from fleet.history import HistoryWriter
from fleet.lease import Holder, Lease, Rules, WorkerRecord
from fleet.store import LeaseStore
from fleet.upstream import UpstreamMessage, UpstreamSession, session_url


async def wait_until_set(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait for ``event`` at most ``timeout_s``; whether it is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), max(0.0, timeout_s))
    return event.is_set()


def as_ms(seconds: float | None) -> float | None:
    """Seconds as ms to the µs, for the history (None stays None: the field is left out)."""
    return None if seconds is None else round(seconds * 1000.0, 3)


class Fenced(Exception):
    """The worker may no longer consume: its lease could already be someone else's."""


@dataclass
class Fence:
    """One incarnation's self-fencing deadline on the fence clock (``fleet.clock.Clock.fence_s``; inf: never
    fences).  Each incarnation has its own: a broken fence is never mended, so a task of an ended incarnation
    still finishing can never pass ``allows`` again, whatever its successor's fence says."""

    deadline: float = float("inf")
    broken: bool = False
    clock: Callable[[], float] = monotonic_s

    def allows(self) -> bool:
        return not self.broken and self.clock() < self.deadline


@dataclass
class HeldConnection:
    lease: Lease
    last_seq: int = 0
    persisted: int = 0
    last_checkpoint_seq: int = 0
    checkpointed_at: float = field(default_factory=monotonic_s)
    session: UpstreamSession | None = None
    task: asyncio.Task[None] | None = None
    stop_reason: str = ""
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    drain_until_ms: int | None = None  # a drain: persist what was emitted before this (upstream clock)
    drained: bool = False  # the drain reached its end with everything before it stored
    stopped_at_ms: int | None = None  # a drain: the time of the STOP it drains to
    gap_at: int | None = None  # the sequence missing from the last session that skipped one
    reading: bool = False  # a session is open: what the stream emits reaches the holder
    last_ts_ms: float | None = None  # when the upstream emitted the last message a session delivered
    delivered: asyncio.Event = field(default_factory=asyncio.Event)  # set at each message a session delivers
    dropping: bool = False  # being stopped by ``fleet.worker.Worker.drop``
    fence: Fence = field(default_factory=Fence)  # the fence of the incarnation that took it up
    transfer_to: WorkerRecord | None = None  # its handoff names this incarnation the owner (``fleet.balance``)

    @property
    def pk(self) -> str:
        return self.lease.pk

    @property
    def draining(self) -> bool:
        return self.drain_until_ms is not None


async def frames(session: UpstreamSession, idle_s: float | None) -> AsyncGenerator[UpstreamMessage | None]:
    """The session's messages; with ``idle_s``, also None each time none arrived for that long."""
    if idle_s is None:
        async for message in session:
            yield message
        return
    received = aiter(session)
    pending: asyncio.Future[UpstreamMessage] | None = None
    try:
        while True:
            pending = pending or asyncio.ensure_future(anext(received))
            done, _ = await asyncio.wait({pending}, timeout=idle_s)
            if not done:
                yield None
                continue
            arrived, pending = pending, None
            try:
                message = arrived.result()
            except StopAsyncIteration:
                return
            yield message
    finally:
        if pending is not None:
            pending.cancel()


class ConnectionRunner:
    """Runs the consume loop of held connections for one worker."""

    def __init__(
        self,
        config: FleetConfig,
        rules: Rules,
        me: Holder,
        store: LeaseStore,
        history: HistoryWriter,
        clock: Clock,
        give_up: Callable[[HeldConnection, str], Awaitable[None]],
        *,
        reconnect_policy: str,
    ) -> None:
        """``reconnect_policy``: the ``fleet.backoff`` policy between upstream sessions (the profile's
        ``reconnect_policy``)."""
        self.config = config
        self.rules = rules
        self.me = me
        self.store = store
        self.history = history
        self.clock = clock
        self.give_up = give_up
        self.reconnect_policy = reconnect_policy
        self.message_slots = asyncio.Semaphore(MESSAGE_WRITES_IN_FLIGHT)
        # the quota's second is a second at scale 1: a run at scale S meters S-second "seconds"
        self.handshakes = HandshakePacer(config.handshake_rate / config.timescale, random.Random())
        # Hosts are checked (and their addresses pinned) when the worker dials them itself, an empty allowlist
        # admitting none (as the router's); through the operator's own proxy (``upstream_via``) the proxy is
        # the only place it connects to.
        self.allowlist = None if config.upstream_via else Allowlist.parse(config.allowed_ws_hosts)

    def _backoff(self, policy: str) -> Backoff:
        return Backoff(
            policy,
            base_s=self.config.scaled_s(self.config.reconnect_base_ms),
            cap_s=self.config.scaled_s(self.config.reconnect_max_ms),
            rng=random.Random(),
        )

    async def consume(self, held: HeldConnection) -> None:
        """The connection's task: subscribe, persist, reconnect, until stopped, fenced or given up; a drain
        until drained, then released."""
        me = self.me  # the incarnation that took it up, for every event of this task (a renewal may replace it)
        gave_up = await self._consume(held, me)
        if held.drained:
            self.history.emit("drain.done", pk=held.pk, worker=me.worker_id, gen=me.gen,
                              epoch=held.lease.epoch, seq=held.last_seq, until_ms=held.drain_until_ms)
            gave_up = "drained"
        if gave_up is not None:
            await self.give_up(held, gave_up)

    async def _consume(self, held: HeldConnection, me: Holder) -> str | None:
        """Consume until stopped, fenced, drained (then ``held.drained``), or given up: then the reason."""
        backoff = self._backoff(self.reconnect_policy)
        down_since: float | None = None
        budget_s = self.config.scaled_s(self.config.upstream_budget_ms)
        # A new owner resumes at the first sequence missing above the checkpoint (never above a hole left by
        # a write that was only partly stored); ask for it while the session opens.
        probe = (asyncio.create_task(self.store.contiguous_seq(held.pk, held.last_seq))
                 if self.rules.resumes else None)
        while not held.stopping.is_set():
            if await wait_until_set(held.stopping, self.handshakes.slot()):
                break  # stopped while waiting for its handshake's turn
            from_seq = held.last_seq + 1 if self.rules.resumes else None
            url = session_url(held.lease.ws_url, from_seq, self.config.upstream_via)
            reason, retry_after_s = "closed", None
            try:
                if not held.fence.allows():
                    raise Fenced()
                # a session whose pong is late by the whole budget is as unreachable as one that won't open
                session_timeout_s = max(0.5, budget_s / 4)
                async with UpstreamSession(url, me.worker_id, session_timeout_s, gen=me.gen, allowlist=self.allowlist,
                                           ping_every_s=session_timeout_s, pong_within_s=budget_s) as session:
                    held.session, held.reading = session, True
                    self.history.emit("ws.open", pk=held.pk, worker=me.worker_id, gen=me.gen,
                                      epoch=held.lease.epoch, from_seq=from_seq, outcome="ok")
                    down_since = None
                    backoff.reset()
                    if probe is not None:
                        held.last_seq = max(held.last_seq, await self._stored_seq(probe))
                        probe = None
                    sink = MessageSink(self, held)
                    try:
                        ended = await self._receive(session, held, sink)
                    finally:
                        await sink.drain()
                    if ended:  # everything before the drain's end is stored
                        held.drained, reason = True, "drained"
            except Fenced:
                self._closed(held, me, "fenced")
                return None
            except UpstreamError as exc:
                reason = str(exc)
                # a Retry-After is at time scale 1, as every duration of a run (the simulated upstream's is)
                retry_after_s = None if exc.retry_after_s is None else exc.retry_after_s * self.config.timescale
            finally:
                held.session = None
                held.reading = held.stopping.is_set()  # still read up to the stop, unless the session failed
            why = held.stop_reason or reason
            if held.stopping.is_set() or held.drained:
                self._closed(held, me, why)
                return None
            now = self.clock.fence_s()
            down_since = down_since if down_since is not None else now
            if self.rules.resumes and now - down_since > budget_s:
                self._closed(held, me, why)
                return "upstream unreachable past budget"
            delay_s = backoff.next_delay(retry_after_s)
            self._closed(held, me, why, policy=backoff.name, attempt=backoff.attempt, retry_in_ms=as_ms(delay_s),
                         retry_after_ms=as_ms(retry_after_s))
            await wait_until_set(held.stopping, delay_s)
        return None

    async def _receive(self, session: UpstreamSession, held: HeldConnection, sink: MessageSink) -> bool:
        """Submit the session's messages to ``sink`` until stopped (False) or, for a drain, until the drain is
        over (True: the message that ended it is not submitted)."""
        until = held.drain_until_ms
        idle_s = None if until is None else self.config.heartbeat_s
        quiet = False  # the upstream answered a ping sent once the drain's end had passed
        async with contextlib.aclosing(frames(session, idle_s)) as received:
            async for message in received:
                if not held.fence.allows():
                    raise Fenced()
                if until is not None and self.rules.drain_ends(until, None if message is None else message.ts,
                                                               self.clock.now_ms()):
                    if message is not None or quiet:
                        return True
                    # Silence ends a drain only on a session proven alive: a half-open one delivers nothing
                    # (explore seed 4239's kind).  Frames sent before the pong are read before the next silence.
                    if not await session.answers(self.rules.timeout_ms / 1000.0):
                        raise UpstreamError("the upstream answered no ping: the session died silently")
                    quiet = True
                    continue
                if message is not None:
                    await sink.submit(message)  # a gap raises here: what revealed it does not count as read
                    held.last_ts_ms = message.ts
                    held.delivered.set()
                if held.stopping.is_set():
                    break
        return False

    async def _stored_seq(self, probe: asyncio.Task[int]) -> int:
        try:
            return await probe
        except StoreError:
            return 0  # the checkpoint stands; replayed messages are rewritten idempotently

    def _closed(self, held: HeldConnection, me: Holder, reason: str, **retry: object) -> None:
        """``ws.close``; ``retry``: when the session is reopened, the reconnect ``policy``, the ``attempt`` (the
        retries since the last open, this one included), the delay before it (``retry_in_ms``) and what the
        upstream asked for if it did (``retry_after_ms``)."""
        self.history.emit("ws.close", pk=held.pk, worker=me.worker_id, gen=me.gen, reason=reason[:200], **retry)

    async def persist(self, held: HeldConnection, messages: list[UpstreamMessage]) -> None:
        """Store consecutive messages.  Raises ``Fenced``.

        Without a server-side fence (``blog``): one write each, as the profile's rule says, tried once.
        With one (``hardened``, messages keyed by sequence so a repeat rewrites identical data): retried
        until stored or fenced, each attempt re-sending exactly the messages not yet stored, as one
        TransactWriteItems conditioned on the lease where the backend has transactions, else one PutItem
        per message refused over a newer epoch.  A write the store refuses means another owner holds the
        lease now: ``Fenced``.
        """
        retry = self._backoff(WRITE_RETRY_POLICY)
        now = self.clock.now_ms()
        me = self.me  # the writer of this batch, named in its events even if a renewal replaces it meanwhile
        writes = [self.rules.message(held.lease, me, m.seq, m.data, now) for m in messages]
        fenced_on = self.rules.held(held.lease, me)
        unstored = writes
        while True:
            if not held.fence.allows():
                raise Fenced()
            note: str | None = None
            sent = time.time() * 1000.0
            try:
                if fenced_on is None:
                    await self._write_each(held.fence, writes)
                    unstored = []
                else:
                    unstored = await self._write_fenced(held, fenced_on, unstored)
                outcome = "ok" if not unstored else "info"
                note = f"{len(unstored)} of {len(writes)} unstored" if unstored else None
            except ConditionFailed as exc:
                if fenced_on is not None:
                    self._persisted(held, me, messages, "fail", "refused by the store: the lease moved on", sent)
                    raise Fenced() from exc
                outcome, note = "fail", str(exc)[:200]
            except StoreUnavailable as exc:
                outcome, note = "info", str(exc)[:200]
            except StoreError as exc:
                outcome, note = "fail", str(exc)[:200]
            self._persisted(held, me, messages, outcome, note, sent)
            if outcome == "ok" or fenced_on is None:
                break
            await asyncio.sleep(retry.next_delay() / 10)
        if outcome == "ok":
            held.persisted += len(messages)

    def _persisted(self, held: HeldConnection, me: Holder, messages: list[UpstreamMessage], outcome: str,
                   note: str | None, sent: float) -> None:
        self.history.emit("msg.persist", pk=held.pk, worker=me.worker_id, gen=me.gen,
                          epoch=held.lease.epoch, seq_from=messages[0].seq, seq_to=messages[-1].seq,
                          outcome=outcome, note=note, sent=sent)

    async def _write_each(self, fence: Fence, writes: list[Write]) -> None:
        for write in writes:
            async with self.message_slots:
                if not fence.allows():
                    raise Fenced()
                await self.store.execute(self.config.messages_table, write, purpose="messages")

    async def _write_fenced(self, held: HeldConnection, fenced_on: Condition, writes: list[Write]) -> list[Write]:
        """One attempt at storing ``writes`` behind the server-side fence; returns those not stored.

        The fence is checked again inside the slot, right before each request goes out, so a write that
        waited for its slot past the fencing deadline is never sent.  Raises ``ConditionFailed`` when the
        store refused (superseded), ``StoreUnavailable`` when nothing could be stored.
        """
        if await self.store.transactions():
            async with self.message_slots:
                if not held.fence.allows():
                    raise Fenced()
                await self.store.put_messages_fenced(held.pk, fenced_on, [w.apply(None) for w in writes])
            return []
        results = await asyncio.gather(*(self._put_unless_newer(held.fence, w) for w in writes),
                                       return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        for kind in (Fenced, ConditionFailed):
            refused = next((e for e in errors if isinstance(e, kind)), None)
            if refused is not None:
                raise refused
        for error in errors:
            if not isinstance(error, StoreUnavailable):
                raise error
        if errors and len(errors) == len(writes):
            raise errors[0]
        return [w for w, r in zip(writes, results, strict=True) if isinstance(r, BaseException)]

    async def _put_unless_newer(self, fence: Fence, write: Write) -> None:
        async with self.message_slots:
            if not fence.allows():
                raise Fenced()
            await self.store.put_message_unless_newer(write.apply(None))


# Message writes one worker keeps in flight across all its connections, so bulk writes never queue in
# front of lease renewals at the backend.
MESSAGE_WRITES_IN_FLIGHT = 8
# A fenced message write (hardened) is retried after a tenth of this policy's step, whatever the reconnect
# policy.
WRITE_RETRY_POLICY = "full"
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
        self.submitted = 0  # the last sequence queued for writing (hardened)
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
        expected = max(self.held.last_seq, self.submitted) + 1
        if message.seq < expected:
            return  # a replay of what this owner already stored or queued
        if message.seq > expected and self.held.gap_at != expected:
            # a frame lost on the way (the session skipped a sequence): ask again from the missing one; the
            # same gap twice is one the upstream can no longer fill, and is left to the checkers
            self.held.gap_at = expected
            raise UpstreamError(f"sequence gap: {expected} missing, {message.seq} arrived")
        self._raise_if_failed()
        self.submitted = message.seq
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
