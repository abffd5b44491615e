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
drained.  A drain that cannot finish is not released as drained (``fleet.stream_machine.let_go``), so it is
drained again.  Every session that has heard nothing from its upstream for a while pings it
(``UpstreamSession`` keepalive): one that died silently, a half-open connection, is closed and reopened from
the next sequence.

Messages are taken as the session parses them, inside its transport's callback (``Reading.take``, no task
wake per message), queued to the session's ``MessageSink`` whose writer task stores them; the sink pauses
the session's reading while its backlog is full.  After every received frame, and right before every write
request goes out (inside its slot, after any wait), it asks the fence of the incarnation that took the
stream up whether it may still consume (``Fence.allows``, on the fence clock); the check is synchronous, so
a process resumed after a pause drops what it buffered instead of writing it.  Right before each write it
also asks whether the stream was let go (``HeldConnection.may_send``): a task that did not end when its
stream was released or left to lapse sends nothing more.  ``hardened`` stores messages as a fenced log
(``fleet.batch_log``): each take-up reads the log's tail and puts its mark before it stores anything, then
puts batches one at a time, each on the next number only if it is free, so a write that left before the
fence closed but arrives after a takeover either landed before the new owner's mark (which resumes after
it) or is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from fleet.allowlist import Allowlist
from fleet.backoff import Backoff
from fleet.batch_log import (
    MARK,
    MAX_MESSAGES,
    Action,
    Batcher,
    LogWriter,
    Message,
    Put,
    ReadAt,
    ReadTail,
    Superseded,
    Writer,
)
from fleet.claims import HandshakePacer
from fleet.clock import Clock, monotonic_s
from fleet.config import FleetConfig
from fleet.errors import ConditionFailed, StoreError, StoreUnavailable, UpstreamError
from fleet.expr import Write
from fleet.history import HistoryWriter
from fleet.lease import Holder, Lease, Rules, WorkerRecord
from fleet.region_gate import log_region_tag
from fleet.store import AwsAdapter
from fleet.upstream import MAX_QUEUED_FRAMES, UpstreamMessage, UpstreamSession, session_url


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
    dropping: bool = False  # being stopped (``fleet.stream_driver.StreamDriver``)
    fence: Fence = field(default_factory=Fence)  # the fence of the incarnation that took it up
    transfer_to: WorkerRecord | None = None  # its handoff names this incarnation the owner (``fleet.balance``)
    log: LogWriter | None = None  # hardened: this take-up's writer of the stream's message log
    let_go: bool = False  # released or left to lapse (``fleet.stream_driver``): none of its writes go out

    def may_send(self) -> bool:
        """Whether a write of this take-up may still go out: the stream is not let go, and the fence of the
        incarnation that took it up is open."""
        return not self.let_go and self.fence.allows()

    @property
    def pk(self) -> str:
        return self.lease.pk

    @property
    def draining(self) -> bool:
        return self.drain_until_ms is not None


class ConnectionRunner:
    """Runs the consume loop of held connections for one worker."""

    def __init__(
        self,
        config: FleetConfig,
        rules: Rules,
        me: Holder,
        store: AwsAdapter,
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
        # A new owner marks its take-up in the message log and resumes after the log's tail; it does so
        # while the session opens, and stores nothing before.
        opening = asyncio.create_task(self.open_log(held, me)) if self.rules.idempotent_messages else None
        try:
            return await self._sessions(held, me, opening)
        finally:
            if opening is not None:
                opening.cancel()  # a no-op once it is done

    async def _sessions(self, held: HeldConnection, me: Holder, opening: asyncio.Task[None] | None) -> str | None:
        backoff = self._backoff(self.reconnect_policy)
        down_since: float | None = None
        budget_s = self.config.scaled_s(self.config.upstream_budget_ms)
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
                    if opening is not None:
                        await opening
                        opening = None
                    if await self._read_session(session, held):  # everything before the drain's end is stored
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

    async def _read_session(self, session: UpstreamSession, held: HeldConnection) -> bool:
        """Store what ``session`` delivers until stopped (False) or, for a drain, until it is over (True); what
        is queued when the session ends is stored, unless the task is being cancelled (``MessageSink.drain``)."""
        sink = MessageSink(self, held, session)
        try:
            return await self._receive(session, held, sink)
        finally:
            await sink.drain()

    async def _receive(self, session: UpstreamSession, held: HeldConnection, sink: MessageSink) -> bool:
        """Submit the session's messages to ``sink`` until stopped (False) or, for a drain, until the drain is
        over (True: the message that ended it is not submitted).  Each message is taken as it is parsed
        (``Reading.take``); this task wakes only when the reading ends and, in a drain, when nothing arrived
        for a heartbeat."""
        reading = Reading(self.rules, self.clock, held, sink)
        session.deliver_to(reading.take)
        until = held.drain_until_ms
        idle_s = None if until is None else self.config.heartbeat_s
        quiet = False  # the upstream answered a ping sent once the drain's end had passed
        while not await session.finished(idle_s):
            # a drain that heard nothing for a heartbeat
            if not held.fence.allows():
                raise Fenced()
            assert until is not None
            if self.rules.drain_ends(until, None, self.clock.now_ms()):
                if quiet:
                    return True
                # Silence ends a drain only on a session proven alive: a half-open one delivers nothing
                # (explore seed 4239's kind).  Frames sent before the pong are read before the next silence.
                if not await session.answers(self.rules.timeout_ms / 1000.0):
                    raise UpstreamError("the upstream answered no ping: the session died silently")
                quiet = True
            elif held.stopping.is_set():
                return False
        return reading.drained

    def _closed(self, held: HeldConnection, me: Holder, reason: str, **retry: object) -> None:
        """``ws.close``; ``retry``: when the session is reopened, the reconnect ``policy``, the ``attempt`` (the
        retries since the last open, this one included), the delay before it (``retry_in_ms``) and what the
        upstream asked for if it did (``retry_after_ms``)."""
        self.history.emit("ws.close", pk=held.pk, worker=me.worker_id, gen=me.gen, reason=reason[:200], **retry)

    async def persist(self, held: HeldConnection, messages: list[Message]) -> None:
        """Store consecutive messages without a server-side fence (``blog``): one write each, as the
        profile's rule says, tried once.  Raises ``Fenced``."""
        me = self.me  # the writer of this batch, named in its events even if a renewal replaces it meanwhile
        sent = time.time() * 1000.0
        writes = [self.rules.message(held.lease, me, m.seq, m.data, self.clock.now_ms()) for m in messages]
        if not held.may_send():
            raise Fenced()
        note: str | None = None
        try:
            await self._write_each(held, writes)
            outcome = "ok"
        except StoreError as exc:
            outcome, note = ("info" if isinstance(exc, StoreUnavailable) else "fail"), str(exc)[:200]
        self.history.emit("msg.persist", pk=held.pk, worker=me.worker_id, gen=me.gen, epoch=held.lease.epoch,
                          seq_from=messages[0].seq, seq_to=messages[-1].seq, outcome=outcome, note=note, sent=sent)
        if outcome == "ok":
            held.persisted += len(messages)

    async def persist_batch(self, held: HeldConnection, messages: list[Message]) -> None:
        """Store consecutive messages continuing the log as one batch item of the stream's log (``hardened``,
        ``fleet.batch_log``), retried until stored or superseded (then ``Fenced``)."""
        log = held.log
        assert log is not None
        await self._log(held, log.batch(messages, int(time.time() * 1000)))
        held.persisted += len(messages)
        held.last_seq = max(held.last_seq, log.last_seq)

    async def settle(self, held: HeldConnection) -> None:
        """Before a session's first batch: finish the put an earlier session left in flight (its outcome is
        unknown; it is sent again and judged), so the next batch continues the log."""
        log = held.log
        if log is not None and log.pending is not None:
            await self._log(held, log.on_unknown())
            held.last_seq = max(held.last_seq, log.last_seq)

    async def open_log(self, held: HeldConnection, me: Holder) -> None:
        """Take the stream's message log up: read its tail, put this take-up's mark after it (``hardened``).
        Then ``held.last_seq`` is the tail's last sequence.  Raises ``Fenced``."""
        if held.log is None:
            held.log = LogWriter(held.pk, Writer(me.worker_id, me.gen, held.lease.epoch, next(TAKES)),
                                 checkpoint=held.last_seq, region_tag=log_region_tag(self.config))
            await self._log(held, held.log.start())
        held.last_seq = max(held.last_seq, held.log.last_seq)

    async def _log(self, held: HeldConnection, action: Action | None) -> None:
        """Send ``action`` and what the log writer asks next, until it asks nothing (the mark or the batch
        stored), retrying a request of unknown outcome; ``msg.persist`` for a batch, ``log.mark`` for a mark.
        The fence is checked inside the slot, right before each request goes out, so a write that waited for
        its slot past the fencing deadline is never sent.  Raises ``Fenced`` (also when superseded: another
        take-up's item took this writer's number)."""
        log = held.log
        assert log is not None
        me, sent = self.me, time.time() * 1000.0
        put: Put | None = None
        retry: Backoff | None = None  # made at the first failure: most batches never need one
        while action is not None:
            put = action if isinstance(action, Put) else put
            try:
                async with self.message_slots:
                    if not held.may_send():
                        raise Fenced()
                    action = await self._send(held, log, action)
            except Superseded as exc:
                self._logged(held, me, put, "fail", f"superseded: {exc}"[:200], sent)
                raise Fenced() from exc
            except StoreError as exc:  # unknown outcome, or refused for another reason: the same request again
                self._logged(held, me, put, "info", str(exc)[:200], sent)
                action = log.on_unknown()
                retry = retry or self._backoff(WRITE_RETRY_POLICY)
                await asyncio.sleep(retry.next_delay() / 10)
        self._logged(held, me, put, "ok", None, sent)

    async def _send(self, held: HeldConnection, log: LogWriter, action: Action) -> Action | None:
        """One request of the log writer; the writer's next request."""
        now = int(time.time() * 1000)
        if isinstance(action, ReadTail):
            return log.on_tail(await self.store.log_tail(held.pk), now)
        if isinstance(action, ReadAt):
            return log.on_found(await self.store.log_item(held.pk, action.b), now)
        try:
            await self.store.put_log_item(action.item)
        except ConditionFailed:
            return log.on_refused()
        log.on_stored()
        return None

    def _logged(self, held: HeldConnection, me: Holder, put: Put | None, outcome: str, note: str | None,
                sent: float) -> None:
        """``log.mark`` for a mark, ``msg.persist`` for a batch (nothing before the first put)."""
        if put is None:
            return
        item = put.item
        if item.kind == MARK:
            self.history.emit("log.mark", pk=held.pk, worker=me.worker_id, gen=me.gen, epoch=held.lease.epoch,
                              take=item.writer.take, b=item.b, seq=item.seq_to, outcome=outcome, note=note)
        else:
            self.history.emit("msg.persist", pk=held.pk, worker=me.worker_id, gen=me.gen, epoch=held.lease.epoch,
                              seq_from=item.seq_from, seq_to=item.seq_to, b=item.b, outcome=outcome, note=note,
                              sent=sent)

    async def _write_each(self, held: HeldConnection, writes: list[Write]) -> None:
        for write in writes:
            async with self.message_slots:
                if not held.may_send():
                    raise Fenced()
                await self.store.execute(self.config.messages_table, write, purpose="messages")


# Take-ups of this process, numbered in order (``fleet.batch_log.Writer.take``).
TAKES = itertools.count(1)
# Message writes one worker keeps in flight across all its connections, so bulk writes never queue in
# front of lease renewals at the backend.
MESSAGE_WRITES_IN_FLIGHT = 8
# A fenced message write (hardened) is retried after a tenth of this policy's step, whatever the reconnect
# policy.
WRITE_RETRY_POLICY = "full"
# hardened: a session stops reading while this many messages wait to be stored (backpressure).
BACKLOG_MAX = 2 * MAX_MESSAGES


class Reading:
    """How one session's messages are taken, each as the session parses it (``take``, synchronous): the fence
    asked first, then, in a drain, whether this message ends it (it is then not stored), then submitted to
    the sink, counted as delivered, and the reading ends once the stream is being stopped."""

    def __init__(self, rules: Rules, clock: Clock, held: HeldConnection, sink: MessageSink) -> None:
        self.rules, self.clock, self.held, self.sink = rules, clock, held, sink
        self.until = held.drain_until_ms
        self.drained = False  # a message ended the drain

    def take(self, message: UpstreamMessage) -> bool:
        """Take ``message``; whether the reading is over.  Raises ``Fenced``, or the sink's ``UpstreamError``
        for a gap."""
        held = self.held
        if not held.fence.allows():
            raise Fenced()
        if self.until is not None and self.rules.drain_ends(self.until, message.ts, self.clock.now_ms()):
            self.drained = True
            return True
        self.sink.submit(message)  # a gap raises here: what revealed it does not count as read
        held.last_ts_ms = message.ts
        held.delivered.set()
        return held.stopping.is_set()


class MessageSink:
    """Persists one session's messages in arrival order: ``submit`` queues each as the session parses it, and a
    writer task stores the queue.  ``hardened``: the writer cuts what has queued up into batches of the
    stream's log (``fleet.batch_log.Batcher``: by count, size, and the age of the oldest, ``flush_ms``, since it
    arrived or since it was emitted), one put at a time, so a stream costs a request per batch, not per
    message; ``last_seq`` advances only past stored messages.  The writer is woken by a batch's first message
    and when the queue fills a batch, not by every message.  ``blog``: one message at a time, each stored
    before the next, as published.  The session stops reading while the queue is full (``BACKLOG_MAX``;
    ``blog``: ``MAX_QUEUED_FRAMES``, as many as it once let wait unread) until the writer has stored it
    (backpressure), and a writer that fails ends the session's reading with its error."""

    def __init__(self, runner: ConnectionRunner, held: HeldConnection, session: UpstreamSession) -> None:
        self.runner = runner
        self.held = held
        self.session = session
        self.batched = runner.rules.idempotent_messages
        self.batcher = Batcher(flush_ms=int(runner.config.scaled_ms(runner.config.flush_ms)))
        self.backlog_max = BACKLOG_MAX if self.batched else MAX_QUEUED_FRAMES
        self.submitted = 0  # the last sequence queued for writing (hardened)
        self.pending: list[Message] = []
        self.pending_bytes = 0  # the stored size of ``pending`` (``Message.size``)
        self.oldest_ms: float | None = None  # when the oldest queued message arrived (monotonic ms)
        self.flushing = False  # the session ended: write what is queued now, whatever its age
        self.paused = False  # the session's reading is paused until the queue is stored
        self.loop = asyncio.get_running_loop()  # kept: asking for it costs a getpid() system call on 3.11
        self.wake = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()
        self.writer = asyncio.create_task(self._write_loop() if self.batched else self._write_each())
        self.writer.add_done_callback(self._writer_ended)

    def submit(self, message: UpstreamMessage) -> None:
        """Queue ``message`` for writing.  Raises ``UpstreamError`` for a gap (hardened), or the writer's error."""
        self._raise_if_failed()
        if self.batched:
            expected = max(self.held.last_seq, self.submitted) + 1
            if message.seq < expected:
                return  # a replay of what this owner already stored or queued
            if message.seq > expected and self.held.gap_at != expected:
                # a frame lost on the way (the session skipped a sequence): ask again from the missing one; the
                # same gap twice is one the upstream can no longer fill, and is left to the checkers
                self.held.gap_at = expected
                raise UpstreamError(f"sequence gap: {expected} missing, {message.seq} arrived")
            self.submitted = message.seq
        queued = Message(message.seq, int(message.ts), message.data)
        if not self.pending:
            self.oldest_ms = monotonic_s() * 1000.0
            self.wake.set()  # a batch begins: the writer times it
        self.pending.append(queued)
        self.idle.clear()
        if not self.batched:
            self.wake.set()
        else:
            self.pending_bytes += queued.size
            if self.batcher.full(len(self.pending), self.pending_bytes):
                self.wake.set()  # it goes now; any other message waits for the batch's time without waking the writer
        if len(self.pending) >= self.backlog_max and not self.paused:
            self.paused = True
            self.session.pause_reading()  # backpressure: read nothing more until the backlog is stored

    async def _write_loop(self) -> None:
        await self.runner.settle(self.held)
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.pending:
                now_ms = monotonic_s() * 1000.0
                wait_ms = 0.0 if self.flushing else self.batcher.wait_ms(self.pending, self.oldest_ms, now_ms,
                                                                         time.time() * 1000, self.pending_bytes)
                if wait_ms:  # until the batch's time, or a submit that fills it: a timer, not a task per wait
                    timer = self.loop.call_later(wait_ms / 1000.0, self.wake.set)
                    try:
                        await self.wake.wait()
                    finally:
                        timer.cancel()
                    self.wake.clear()
                    continue
                # what the log already holds (an earlier session's put that landed) is not written again
                self.pending = [m for m in self.pending if m.seq > self.held.last_seq]
                cut = self.batcher.cut(self.pending)
                batch, self.pending = self.pending[:cut], self.pending[cut:]
                self.pending_bytes = sum(m.size for m in self.pending)
                self.oldest_ms = now_ms if self.pending else None
                if batch:
                    await self.runner.persist_batch(self.held, batch)
            self._stored()

    async def _write_each(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.pending:
                message = self.pending.pop(0)
                await self.runner.persist(self.held, [message])
                self.held.last_seq = max(self.held.last_seq, message.seq)
            self._stored()

    def _stored(self) -> None:
        """The queue is stored: the writer is idle, and a paused session reads again."""
        self.idle.set()
        if self.paused:
            self.paused = False
            self.session.resume_reading()

    def _writer_ended(self, writer: asyncio.Task[None]) -> None:
        if not writer.cancelled() and (error := writer.exception()) is not None:
            self.session.interrupt(error)  # a session paused for the backlog would otherwise never learn it

    def _raise_if_failed(self) -> None:
        if self.writer.done() and not self.writer.cancelled():
            error = self.writer.exception()
            if error is not None:
                raise error

    async def _wait_idle(self) -> None:
        await asyncio.wait([self.writer, asyncio.ensure_future(self.idle.wait())],
                           return_when=asyncio.FIRST_COMPLETED)
        self._raise_if_failed()

    async def drain(self) -> None:
        """Store what is queued now (safe: the log is fenced), then stop the writer.  In a task being cancelled
        (its stream is let go) nothing more is stored: the writer is cancelled at once.  Until seed 391 such a
        task went on storing its backlog, retrying each put, seconds after its stream was taken up again."""
        try:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                return
            self.flushing = True
            self.wake.set()
            if self.pending or not self.idle.is_set():
                await self._wait_idle()
        finally:
            self.writer.cancel()
            await asyncio.gather(self.writer, return_exceptions=True)
