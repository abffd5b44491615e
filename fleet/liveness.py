"""A worker's liveness: registering its incarnation, the heartbeat (renewals the profile decides, the STOP
mailbox they return, due checkpoints), the clock-skew check, and the self-fencing watchdog.

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
from typing import Any

from fleet.balance import parse_gift
from fleet.connection import Fence, HeldConnection, wait_until_set
from fleet.errors import ConditionFailed, StoreError
from fleet.lease import Holder, StopRequest, WorkerRecord
from fleet.logline import log
from fleet.ports import LivenessHost
from fleet.profiles import Renewal


def new_gen() -> str:
    return uuid.uuid4().hex[:12]


class Liveness:
    def __init__(self, worker: LivenessHost) -> None:
        self.w = worker
        self.registered = False
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
        sent = w.clock.fence_s()  # before the expiry is computed: the fence never outlives it
        write = w.rules.register(w.me, w.clock.now_ms(), w.config.task_arn)
        if write is None:
            self.registered = True
            return
        try:
            await w.store.execute(w.config.workers_table, write)
        except StoreError as exc:
            w.emit("worker.register", outcome="fail", note=str(exc)[:200])
            return
        self.registered = True
        w.fence = Fence(deadline=min(w.profile.fence_deadline(sent), w.gate.open_until), clock=w.clock.fence_s)
        w.emit("lease.renew", outcome="ok", expires_ms=write.update.set["expires_at_ms"])
        w.reconciler.request_sweep()

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
        handled, taken = self.handled_stops, self.taken_gifts
        sent = w.clock.fence_s()  # before the expiries are computed: the fence never outlives them
        renewals = w.profile.renewals(w.me, [h.lease for h in w.held.values()], w.clock.now_ms(), handled, taken)
        results = await asyncio.gather(*(self._renew(r, sent, handled, taken) for r in renewals))
        self._checkpoints_due()
        return all(results)

    async def _renew(self, renewal: Renewal, sent: float, handled: frozenset[str], taken: frozenset[str]) -> bool:
        """Send one renewal whose expiry was computed no earlier than ``sent`` (fence clock)."""
        w = self.w
        try:
            item = await self._send(renewal)
        except ConditionFailed:
            w.emit("lease.renew", pk=renewal.pk, outcome="fail")
            if renewal.pk is None:
                await self.abandon("worker lease expired", retire=False)
            elif (held := w.held.get(renewal.pk)) is not None:
                await w.drop(held, "renew refused", release=False)
            return False
        except StoreError as exc:
            w.emit("lease.renew", pk=renewal.pk, outcome="info", note=str(exc)[:200])
            return False
        expires = item.get("expires_at_ms", item.get("lease_expires_at_ms"))
        answered = w.clock.fence_s()
        on_time = w.profile.on_time(answered - sent)
        if on_time and renewal.pk is None and answered >= w.fence.deadline:
            # the fence has closed: a stream may already have stopped on it, so it never reopens; the
            # watchdog abandons this incarnation (whose streams would otherwise stay held, unconsumed)
            w.emit("lease.renew", outcome="info", note="answered after the fence closed", expires_ms=expires)
            on_time = False
        elif on_time:
            if renewal.pk is None:
                w.fence.deadline = min(max(w.fence.deadline, w.profile.fence_deadline(sent)), w.gate.open_until)
            w.emit("lease.renew", pk=renewal.pk, outcome="ok", expires_ms=expires)
        else:
            # it may have landed after a taker read us as expired, so it does not move the fence
            w.emit("lease.renew", pk=renewal.pk, outcome="info", note="answered late", expires_ms=expires)
        if renewal.pk is None:
            record = WorkerRecord.from_item(item)
            self._settle_mailbox(handled, record.stop_requests)
            if on_time:
                self._take_gifts(taken, record.gifts)
        return on_time

    async def _send(self, renewal: Renewal) -> dict[str, Any]:
        # one call per table, named by its setting (the deployment checks derive IAM grants from these)
        if renewal.pk is None:
            return await self.w.store.execute(self.w.config.workers_table, renewal.write)
        return await self.w.store.execute(self.w.config.connections_table, renewal.write)

    def _settle_mailbox(self, deleted: frozenset[str], mailbox: frozenset[str]) -> None:
        w = self.w
        plan = w.profile.settle_stops(mailbox, {pk: h.lease.epoch for pk, h in w.held.items()}, w.acquiring)
        self.handled_stops = (self.handled_stops - deleted) | plan.handled
        w.pending_stops |= plan.pending
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
        self.registered = False
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
            held.stop_reason = reason
            held.stopping.set()
            if held.session is not None:
                held.session.abort()
            if held.task is not None:
                held.task.cancel()
            del w.held[held.pk]
            w.emit("lease.lost", pk=held.pk, epoch=held.lease.epoch, reason=reason)
        log("lease.lost_all", reason=reason)

    async def fence_watchdog(self) -> None:
        w = self.w
        while not w.stopping.is_set():
            remaining = w.fence.deadline - w.clock.fence_s()
            if remaining <= 0 and self.registered and not w.fence.broken:
                await self.abandon("self-fenced: no renewal before the fencing deadline", retire=True)
                remaining = w.config.heartbeat_s
            await wait_until_set(w.stopping, min(max(remaining, 0.01), w.config.heartbeat_s))

