"""A worker's liveness: registering its incarnation, the heartbeat (renewals the profile decides, the STOP
mailbox they return, due checkpoints), the clock-skew check, and the self-fencing watchdog.

Registration and renewal are decided by the incarnation's pure machine (``fleet.incarnation.Incarnation``):
this module reads the clocks it asks for, in its order, sends its writes and carries out what their answers
make it output (a new fence, a moved deadline, an abandon, the STOP mailbox and gifts).
Every fence time is read on the worker clock's fence clock (``fleet.clock.Clock.fence_s``: ``CLOCK_BOOTTIME``,
which keeps counting while the machine is suspended, unlike ``CLOCK_MONOTONIC``: a VM resumed after a suspend
must find its fence closed).  A renewal's fence is anchored on the fence clock read before the lease clock
that computed its expiry, so however long the process stalls before the request goes out, the fence never
outlives the expiry written.  Each registration starts a new ``Fence``: the one of an abandoned incarnation
stays closed for its tasks still finishing.
STOP drops and checkpoints run as background tasks, so a burst of them never delays the next renewal.
A fence that has closed never reopens: a renewal answered after the deadline (even within the request
timeout) does not move it, since a stream may already have stopped on the closed fence; the watchdog then
abandons the incarnation, so no stream stays held by a live incarnation that no longer consumes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

from fleet import machine_io as mio
from fleet.balance import parse_gift
from fleet.connection import Fence, HeldConnection, wait_until_set
from fleet.errors import ConditionFailed, StoreError
from fleet.incarnation import Incarnation
from fleet.lease import Holder, StopRequest
from fleet.logline import log
from fleet.ports import LivenessHost
from fleet.stream_driver import answer_of


def new_gen() -> str:
    return uuid.uuid4().hex[:12]


class Liveness:
    def __init__(self, worker: LivenessHost) -> None:
        self.w = worker
        self.machine = self._incarnation()
        self.handled_stops: frozenset[str] = frozenset()
        self.taken_gifts: frozenset[str] = frozenset()  # gifts acted on, deleted with the next renewal
        self.reported_skew: tuple[float, float] | None = None
        self.checkpointing: set[str] = set()

    async def heartbeat_loop(self) -> None:
        w = self.w
        while not w.stopping.is_set():
            started = w.clock.fence_s()
            renewed = await self.renew()
            aws = w.store.aws
            w.emit("requests", held=len(w.held), errors=dict(aws.errors), operations=dict(aws.operations),
                   units=dict(aws.units), **dict(aws.requests))
            await self._wait_sampling_the_clock(started + w.profile.heartbeat_wait_s(renewed))

    async def register(self) -> None:
        """Register this incarnation (a profile without worker liveness needs no write), unless the region
        gate is closed."""
        w = self.w
        if not await w.gate.admits():
            return
        if self._skew_out_of_model():
            return  # the heartbeat keeps sampling the server's clock (``_wait_sampling_the_clock``)
        await self._beat()

    async def _wait_sampling_the_clock(self, until_s: float) -> None:
        """Wait until ``until_s`` (fence clock).  Meanwhile, while the skew estimate does not let this worker
        judge another's lease (``Profile.judges_expiry``), read its worker item at random moments, a quarter
        heartbeat apart on average: every answer is a sample of the server's clock, whose ``Date`` has whole
        seconds, and only answers at many phases of the second narrow the estimate.  Renewals alone, a
        heartbeat apart, come at the same few phases: an idle worker's estimate (a standby's, gated off,
        which sends nothing) stayed too wide to judge any lease for minutes.  A worker fenced for skew keeps
        sampling too, or an estimate made from stale ``Date`` headers (a server's cached one) would keep it
        out of the fleet for good."""
        w = self.w
        while not w.stopping.is_set() and not w.profile.judges_expiry(w.store.clock_skew_bounds()):
            step = w.rng.uniform(0.0, w.config.heartbeat_s / 2)
            if w.clock.fence_s() + step >= until_s:
                break
            await w.pause(step)
            with contextlib.suppress(StoreError):
                await w.store.get_worker(w.me.worker_id)
        await w.pause(until_s - w.clock.fence_s())

    async def renew(self) -> bool:
        """Send this heartbeat's renewals; whether every one was answered in time.  First the region gate
        (``fleet.region_gate``): while it is closed an incarnation holding streams abandons them."""
        w = self.w
        if not self.registered:
            await self.register()
            return self.registered
        if not await w.gate.admits():
            await self.abandon("self-fenced: the region is not active (region gate)", retire=True)
            return False
        if self._skew_out_of_model():
            await self.abandon("self-fenced: clock skew beyond the tolerance", retire=True)
            return False
        renewed = await self._beat()
        self._checkpoints_due()
        return renewed

    @property
    def registered(self) -> bool:
        return self.machine.registered

    async def _beat(self) -> bool:
        """One heartbeat of the incarnation's machine (``fleet.stream_machine.Incarnation``): its clock reads
        in the order it asks for them (the fence anchor before the expiry: hole 7), its writes in parallel,
        then what their answers make it do."""
        w, machine = self.w, self.machine
        handled, taken = self.handled_stops, self.taken_gifts
        beat = mio.Heartbeat(tuple(h.lease for h in w.held.values()), handled, taken, w.gate.open_until)
        sends: list[mio.Send] = []
        pending = machine.step(beat)
        while pending:
            out = pending.pop(0)
            if isinstance(out, mio.ReadClock):
                reading = w.clock.fence_s() if out.clock is mio.ClockName.FENCE else w.clock.now_ms()
                pending += machine.step(mio.Reading(out.clock, reading))
            elif isinstance(out, mio.Send):
                sends.append(out)
        answers = await asyncio.gather(*(self._send(s) for s in sends))
        for answer in answers:
            was_registered = machine.registered
            for out in machine.step(answer):
                await self._execute(out, handled, taken, was_registered)
        return machine.registered and machine.beat_ok

    async def _send(self, send: mio.Send) -> mio.Answer:
        w = self.w
        # one call per table, named by its setting (the deployment checks derive IAM grants from these)
        if send.pk is None:
            return await answer_of(w.store.execute(w.config.workers_table, send.write), None, w.clock.fence_s)
        return await answer_of(w.store.execute(w.config.connections_table, send.write), send.pk, w.clock.fence_s)

    async def _execute(self, out: mio.Output, handled: frozenset[str], taken: frozenset[str],
                       was_registered: bool) -> None:
        w = self.w
        if isinstance(out, mio.Emit):
            w.emit(out.type, **out.fields)
        elif isinstance(out, mio.Arm) and not was_registered:  # a new incarnation: a fence of its own (hole 8)
            w.fence = Fence(deadline=out.at_s, clock=w.clock.fence_s)
            w.reconciler.request_sweep()
        elif isinstance(out, mio.Arm):
            w.fence.deadline = out.at_s
        elif isinstance(out, mio.Abandon):
            await self.abandon(out.reason, out.retire)
        elif isinstance(out, mio.LoseStream) and (held := w.held.get(out.pk)) is not None:
            await w.drop(held, out.reason, release=False)
        elif isinstance(out, mio.Mailbox):
            self._settle_mailbox(handled, out.record.stop_requests)
            if out.on_time:
                self._take_gifts(taken, out.record.gifts)

    def _incarnation(self) -> Incarnation:
        w = self.w
        return Incarnation(w.profile, w.me, w.config.task_arn, w.config.workers_table)

    def _settle_mailbox(self, deleted: frozenset[str], mailbox: frozenset[str]) -> None:
        w = self.w
        plan = w.profile.settle_stops(mailbox, {pk: h.lease.epoch for pk, h in w.held.items()}, w.acquiring)
        self.handled_stops = (self.handled_stops - deleted) | plan.handled
        for request in plan.pending:
            w.stop_pending(request)
        for request in plan.drop:
            w.chores.spawn(self._drop_stopped(request))

    def _take_gifts(self, deleted: frozenset[str], gifts: frozenset[str]) -> None:
        """Take up each stream transferred to this worker (``fleet.balance``) once a consistent read shows it
        ours; each gift is deleted with the next renewal, taken up or not."""
        w = self.w
        self.taken_gifts -= deleted
        for entry in gifts - self.taken_gifts:
            self.taken_gifts |= {entry}
            gift = parse_gift(entry)
            if gift is not None and gift[0] not in w.held and gift[0] not in w.acquiring:
                w.claims.spawn(w.adopt(gift[0], via="balance"))

    async def _drop_stopped(self, request: StopRequest) -> None:
        held = self.w.held.get(request.pk)
        if held is not None and request.stops(held.lease.epoch):  # not a lease taken up since the plan
            await self.w.honour_stop(request.pk, request.stopped_at_ms)
        self.handled_stops |= {request.entry}

    def _checkpoints_due(self) -> None:
        every = self.w.profile.checkpoint_every_s()
        if every is None:
            return
        now = self.w.clock.fence_s()
        for held in list(self.w.held.values()):
            # a drain checkpoints with its release (a checkpoint requires STARTED)
            due = (now - held.checkpointed_at >= every and held.last_seq != held.last_checkpoint_seq
                   and not held.draining)
            if due and held.pk not in self.checkpointing:
                self.checkpointing.add(held.pk)
                held.checkpointed_at = now
                self.w.chores.spawn(self._checkpoint(held))

    async def _checkpoint(self, held: HeldConnection) -> None:
        w = self.w
        try:
            write = w.rules.checkpoint(held.lease, w.me, w.clock.now_ms(), held.last_seq)
            if write is None or not held.fence.allows():  # its incarnation's fence
                return
            seq, sent = held.last_seq, time.time() * 1000.0
            try:
                await w.store.execute(w.config.connections_table, write)
                outcome = "ok"
                held.last_checkpoint_seq = seq
            except ConditionFailed:
                outcome = "fail"
            except StoreError:
                outcome = "info"
            w.emit("checkpoint", pk=held.pk, epoch=held.lease.epoch, seq=seq, outcome=outcome, sent=sent)
            if outcome == "fail":
                # fenced, or no longer STARTED: a read settles which, and which STOP it is
                await w.end_for_stop(held, "checkpoint refused", None)
        finally:
            self.checkpointing.discard(held.pk)

    def _skew_out_of_model(self) -> bool:
        w = self.w
        bounds = w.store.clock_skew_bounds()
        if bounds is not None and w.profile.skew_worth_reporting(self.reported_skew, bounds):
            self.reported_skew = bounds
            w.emit("clock.skew", low_ms=bounds[0], high_ms=bounds[1], fences=w.profile.skew_fences(bounds))
        return w.profile.skew_fences(bounds)

    async def abandon(self, reason: str, retire: bool) -> None:
        """Drop every stream and continue as a new incarnation (registered by the next heartbeat).

        With ``retire``, once no write of the old incarnation can still land (a request timeout plus the
        fencing margin after the fence closed), its worker item is expired at once, so its streams are
        claimable now rather than when the item would have run out.
        """
        w = self.w
        w.fence.broken = True
        self.lose_all(reason)
        old = w.me
        w.me = w.consumer.me = Holder(old.worker_id, new_gen())
        self.machine = self._incarnation()
        self.handled_stops = frozenset()
        write = w.rules.retire(old)
        if not retire or write is None:
            return
        await w.pause(w.config.scaled_s(w.config.aws_timeout_ms + w.config.fence_margin_ms))
        try:
            await w.store.execute(w.config.workers_table, write)
        except StoreError as exc:
            log("retire.error", error=str(exc))

    def lose_all(self, reason: str) -> None:
        """Stop every stream at once, releasing nothing (the incarnation is fenced)."""
        w = self.w
        for held in list(w.held.values()):
            w.lose(held, reason)
        log("lease.lost_all", reason=reason)

    async def fence_watchdog(self) -> None:
        w = self.w
        while not w.stopping.is_set():
            remaining = w.fence.deadline - w.clock.fence_s()
            if remaining <= 0 and self.registered and not w.fence.broken:
                await self.abandon("self-fenced: no renewal before the fencing deadline", retire=True)
                remaining = w.config.heartbeat_s
            await wait_until_set(w.stopping, min(max(remaining, 0.01), w.config.heartbeat_s))

