"""The interpreter of held streams: runs each stream's pure machine (``fleet.stream_machine.HeldStream``)
through the worker's ports.

It reads the clocks a machine asks for, sends its writes through the store port, reads the items it asks
for, opens a take-up's consume task and stops it, emits its events, and steps it with what came of each.
Every flow of a held stream (acquire, settle, adopt, take up, stop, release or transfer, retake, the repeat
of a refused handoff) is the machine's; this module only carries them out.

Stopping a consume task (``CloseSession``) is the part with time in it: for a STOP, wait until the open
session has delivered what the stream emitted up to that STOP's reach (``read_through``); then close the
session and wait a heartbeat for the task, cancel it if it would not end, and wait for it another heartbeat
(its writes may be on their way: nothing is released or transferred before they end).  A task that still
would not end is let go (``HeldConnection.let_go``: it sends nothing more) and the lease lapses.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from fleet import machine_io as mio
from fleet.connection import HeldConnection
from fleet.errors import ConditionFailed, StoreError
from fleet.lease import ConnectionRecord, StopRequest
from fleet.logline import log
from fleet.ports import DriverHost
from fleet.stream_machine import HeldStream, Phase


async def answer_of(request: Awaitable[dict[str, Any]], pk: str | None, fence_s: Callable[[], float]) -> mio.Answer:
    """A machine's ``Send`` carried out: the ``Answer`` to step it with (refused: ``FAIL``; any other store
    error: ``UNKNOWN``), timed on the fence clock when it came."""
    try:
        item = await request
    except ConditionFailed as exc:
        return mio.Answer(mio.Outcome.FAIL, at_s=fence_s(), pk=pk, note=str(exc)[:200])
    except StoreError as exc:
        return mio.Answer(mio.Outcome.UNKNOWN, at_s=fence_s(), pk=pk, note=str(exc)[:200])
    return mio.Answer(mio.Outcome.OK, item, fence_s(), pk)


class StreamDriver:
    def __init__(self, worker: DriverHost) -> None:
        self.w = worker
        self.streams: dict[str, HeldStream] = {}  # each stream's latest machine, from its acquire until it ends

    # -- starting ------------------------------------------------------------------------------------
    async def claim(self, pk: str, via: str, seen: ConnectionRecord | None) -> bool:
        """Acquire ``pk`` (as ``seen`` shows it) and take it up; whether it is consumed now."""
        with self._acquiring(pk) as deferred:
            if deferred:
                return False
            stream, outputs = HeldStream.claim(self.w.profile, seen, self.w.me, via, pk=pk)
            return await self._start(stream, outputs)

    async def adopt(self, pk: str, via: str) -> bool:
        """``pk``'s lease is ours though we hold nothing (listed so, or a gift): acquired again at the next
        epoch if a consistent read agrees (``HeldStream.adopt``)."""
        with self._acquiring(pk) as deferred:
            if deferred:
                return False
            stream, outputs = HeldStream.adopt(self.w.profile, pk, self.w.me, via)
            return await self._start(stream, outputs)

    @contextlib.contextmanager
    def _acquiring(self, pk: str) -> Iterator[bool]:
        """``pk`` is being acquired until the block ends; yields True (nothing to do) while an earlier take-up's
        consume task may still write (``fleet.task_set.ConsumeTasks``)."""
        w = self.w
        if w.tasks.running(pk):
            log("lease.acquire_deferred", pk=pk)
            yield True
            return
        w.acquiring.add(pk)
        try:
            yield False
        finally:
            w.acquiring.discard(pk)

    async def _start(self, stream: HeldStream, outputs: list[mio.Output]) -> bool:
        w = self.w
        self.streams[stream.pk] = stream
        await self._run(stream, outputs)
        if stream.handed_off and stream.phase is Phase.RELEASED and stream.lease is not None:
            # handed off at take-up (a shutdown, or not STARTED where the profile does not drain): announced
            handoffs = w.profile.handoffs([(stream.pk, stream.lease.epoch)])
            try:
                if handoffs:
                    await w.store.notify(handoffs)
            except StoreError as exc:
                log("notify.error", error=str(exc), streams=len(handoffs))
        return stream.consuming and w.held.get(stream.pk) is not None

    def stop_pending(self, request: StopRequest) -> None:
        """A STOP read for a stream being acquired: its machine honours it at take-up."""
        stream = self.streams.get(request.pk)
        if stream is not None and request.pk in self.w.acquiring:
            stream.step(mio.StopPending(request))

    # -- letting go ----------------------------------------------------------------------------------
    async def let_go(self, held: HeldConnection, event: mio.StopAt | mio.LetGo) -> bool:
        """Step ``held``'s machine with a STOP or a let-go and carry out what follows; whether its lease was
        given back (released or transferred)."""
        stream = self.streams.get(held.pk)
        if stream is None or self.w.held.get(held.pk) is not held:
            return False
        await self._run(stream, stream.step(event))
        return stream.phase is Phase.RELEASED

    def _may_retake(self, stream: HeldStream) -> bool:
        """A refused release for a STOP is retaken only by the incarnation that holds it, while it may claim
        and nobody else is acquiring the stream; else the lease stays: the reconcile adopts it, or it is
        taken over once we are gone."""
        w = self.w
        return (stream.me == w.me and stream.pk not in w.acquiring and not w.closing and w.fence.allows()
                and not w.tasks.running(stream.pk))

    def lose(self, held: HeldConnection, reason: str) -> None:
        """Stop ``held`` at once, releasing nothing (its incarnation fenced, or the shutdown's budget spent)."""
        w = self.w
        held.stop_reason = reason
        held.stopping.set()
        if held.session is not None:
            held.session.abort()
        if held.task is not None:
            held.task.cancel()
        if w.held.get(held.pk) is held:
            del w.held[held.pk]
        held.let_go = True
        stream = self.streams.get(held.pk)
        if stream is not None:
            for out in stream.step(mio.Lost(reason)):
                if isinstance(out, mio.Emit):
                    self._emit(stream, out)
            self._forget(stream)

    # -- the interpreter -----------------------------------------------------------------------------
    async def _run(self, stream: HeldStream, outputs: list[mio.Output]) -> None:
        """Carry out ``outputs`` and all that follows from them, until the machine waits for an input from
        elsewhere (a STOP, a let-go) or ends.  A retake (a refused release for a STOP) marks the stream
        acquiring until the run ends."""
        retaking = False
        try:
            pending = list(outputs)
            while pending:
                out = pending.pop(0)
                if isinstance(out, mio.ReadItem) and stream.retaking and not retaking:
                    if not self._may_retake(stream):
                        stream.step(mio.Lost("no retake now", silent=True))
                        continue
                    retaking = True
                    self.w.acquiring.add(stream.pk)
                pending += await self._do(stream, out)
        finally:
            if retaking:
                self.w.acquiring.discard(stream.pk)
            self._forget(stream)

    def _forget(self, stream: HeldStream) -> None:
        """An ended machine is dropped (a stream's next acquire starts a new one)."""
        if stream.ended and self.streams.get(stream.pk) is stream:
            del self.streams[stream.pk]

    async def _do(self, stream: HeldStream, out: mio.Output) -> list[mio.Output]:
        w = self.w
        if isinstance(out, mio.ReadClock):
            reading = w.clock.fence_s() if out.clock is mio.ClockName.FENCE else w.clock.now_ms()
            return stream.step(mio.Reading(out.clock, reading))
        if isinstance(out, mio.Send):
            answer = await self._send(out)
            if out.kind == "acquire" and w.closing:  # a shutdown began: what it granted is handed off
                stream.step(mio.LetGo("shutdown"))
            return stream.step(answer)
        if isinstance(out, mio.ReadItem):
            try:
                return stream.step(mio.ItemRead(await w.store.get_connection(out.pk)))
            except StoreError as exc:
                log("lease.read_error", pk=out.pk, error=str(exc))
                return stream.step(mio.ItemRead(None, failed=True))
        if isinstance(out, mio.Emit):
            self._emit(stream, out)
            if out.type == "lease.release" and out.fields["outcome"] == "ok" and out.fields["behind"]:
                # left to drain: announced, or nobody drains it before the next sweep
                with contextlib.suppress(StoreError):
                    await w.store.notify([(stream.pk, None)])
            return []
        if isinstance(out, mio.OpenSession):
            return self._open(stream, out)
        if isinstance(out, mio.CloseSession):
            return await self._close(stream)
        return []

    async def _send(self, send: mio.Send) -> mio.Answer:
        w = self.w
        return await answer_of(w.store.execute(w.config.connections_table, send.write), send.pk, w.clock.fence_s)

    def _emit(self, stream: HeldStream, out: mio.Emit) -> None:
        """One event of the incarnation that acquired the stream."""
        self.w.history.emit(out.type, worker=stream.me.worker_id, gen=stream.me.gen, **out.fields)
        if out.type == "lease.acquire":
            log("lease.acquire", pk=stream.pk, outcome=out.fields["outcome"], epoch=out.fields.get("epoch"),
                via=out.fields["via"])

    def _open(self, stream: HeldStream, out: mio.OpenSession) -> list[mio.Output]:
        w = self.w
        if stream.me != w.me:  # that incarnation ended while the acquire was in flight: it consumes nothing
            return stream.step(mio.Lost("incarnation ended during the acquire"))
        lease = out.lease
        held = HeldConnection(lease=lease, last_seq=lease.resume_seq, last_checkpoint_seq=lease.resume_seq,
                              checkpointed_at=w.clock.fence_s(), drain_until_ms=out.drain_until_ms,
                              stopped_at_ms=stream.drain_stop_ms, fence=w.fence)
        w.held[stream.pk] = held
        held.task = w.tasks.start(stream.pk, w.consumer.consume(held))
        return []

    async def _close(self, stream: HeldStream) -> list[mio.Output]:
        """Stop consuming (``CloseSession``); step the machine with how its task ended."""
        w = self.w
        held = w.held.get(stream.pk)
        if stream.ended:  # lost while consuming: ``lose`` stopped it
            return []
        if held is None or held.lease.epoch != (stream.lease.epoch if stream.lease else None):
            # taken up as not to be consumed: nothing was ever read
            if stream.me != w.me:
                return stream.step(mio.Lost("incarnation ended during the acquire"))
            return stream.step(mio.TaskEnded(unread=True, fence_open=w.fence.allows()))
        held.dropping = True
        # no session open, or one that delivered nothing from past the STOP (it may have died silently)
        unread = not held.reading or not await self.read_through(held, stream.stop_ms)
        held.stop_reason = stream.reason
        held.stopping.set()
        if held.session is not None:
            await held.session.close()
        if held.task is not None:  # None once the task itself gives up (``Worker.give_up``)
            try:
                await asyncio.wait_for(asyncio.shield(held.task), w.config.heartbeat_s)
            except TimeoutError:
                held.task.cancel()
                unread = True  # what it read may not all be stored
                # its writes may be on their way: nothing is released or transferred before they end
                await asyncio.wait({held.task}, timeout=w.config.heartbeat_s)
            except asyncio.CancelledError:
                if (me := asyncio.current_task()) is not None and me.cancelling():
                    raise  # this drop was cancelled, not the consume task it waited for
        if w.held.get(held.pk) is held:
            del w.held[held.pk]
        held.let_go = True  # a task that would not end sends nothing more
        stream.step(mio.Stored(held.last_seq))
        return stream.step(mio.TaskEnded(ended=held.task is None or held.task.done(), unread=unread,
                                         fence_open=w.fence.allows(), drained=held.drained))

    async def read_through(self, held: HeldConnection, stopped_at_ms: int | None) -> bool:
        """Whether ``held``'s open session delivered everything the stream owes the store for the STOP at
        ``stopped_at_ms`` (``fleet.lease.Rules.stop_reach_ms``): a message emitted at or past that reach
        arrived (a session delivers in order).  A live session delivers one soon; waited for until this
        worker's clock is past the reach by the tolerance, as a drain would (``Rules.drain_ends``).  An open
        session may have died silently: a half-open connection delivers nothing and closes nothing (explore
        seed 4239), and its holder released as having read through the STOP, so what the stream emitted
        since the session died was drained by nobody.  Not a STOP: nothing to read through.  A shutdown ends the
        wait (the release then carries the drain mark): the handoff of every other stream waits for it."""
        if stopped_at_ms is None:
            return True
        w = self.w
        reach = w.rules.stop_reach_ms(stopped_at_ms)
        while held.last_ts_ms is None or held.last_ts_ms < reach:
            left_s = (reach + w.rules.tolerance_ms - w.clock.now_ms()) / 1000.0
            if left_s <= 0 or not held.reading or w.stopping.is_set():
                return False
            held.delivered.clear()
            waits = [asyncio.ensure_future(event.wait()) for event in (held.delivered, w.stopping)]
            try:
                await asyncio.wait(waits, timeout=left_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()
        return True
