"""Finding streams to claim: the reconcile loop looks when the profile's ``Pacer`` says, and a sweep lists
STARTED connections from the state index and claims (``claims_in_flight`` at a time) those the profile calls claimable;
where the profile drains, it also lists STOPPED connections still leased and drains those it calls drainable.

A listed stream whose lease is this incarnation's though it holds nothing (an acquire whose answer was
lost) is adopted only after a consistent read shows it still ours and STARTED: a stale listing alone never
brings back a stream that was dropped (STOP, give-up, refused checkpoint).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from fleet.connection import wait_until_set
from fleet.lease import ConnectionRecord, WorkerRecord
from fleet.logline import log
from fleet.ports import ReconcileHost
from fleet.profiles import Sweep


async def _listing(records: AsyncIterator[ConnectionRecord]) -> list[ConnectionRecord]:
    return [record async for record in records]


class Reconciler:
    def __init__(self, worker: ReconcileHost) -> None:
        self.w = worker
        self.pacer = worker.profile.pacer(worker.rng)
        self.balancer = worker.profile.balancer()
        self.requested = False
        self.last_found: int | None = None  # how many streams the last sweep set out to take (claim, drain or
                                            # adopt); None before the first (``fleet.ports.Sweeps``)
        self.wake = asyncio.Event()

    def request_sweep(self) -> None:
        self.requested = True
        self.wake.set()

    async def loop(self) -> None:
        w = self.w
        while not w.stopping.is_set():
            wait = w.config.heartbeat_s
            if w.liveness.registered:
                workers = await w.store.workers() if w.profile.strategy.reads_workers else {}
                look = self.pacer.look(w.clock.now_ms(), w.clock.fence_s(), w.me, workers, self.requested)
                if look.sweep is not None:
                    self.requested = False
                    await self.sweep(look.sweep)
                self._balance(workers)
                wait = look.wait_s
            self.wake.clear()
            if not (self.requested and w.liveness.registered):  # else asked again during that sweep: look now
                await wait_until_set(self.wake, wait)

    def _balance(self, workers: dict[str, WorkerRecord]) -> None:
        """Give streams to workers that joined, when the profile balances and the fleet is out of its band
        (``fleet.balance``)."""
        w = self.w
        if self.balancer is None or not workers or w.closing:
            return
        gifts = self.balancer.consider(w.me.worker_id, len(w.held), workers, w.clock.now_ms(), w.clock.fence_s())
        if gifts:
            w.chores.spawn(w.releases.give_away(gifts))

    async def sweep(self, plan: Sweep) -> None:
        """Claim (or adopt) every claimable connection the index lists, several at a time."""
        w = self.w
        now = w.clock.now_ms()
        # the candidates for a drain are listed in parallel with the STARTED streams (no added round trip)
        drains = w.profile.strategy.drains
        stopped = asyncio.create_task(_listing(w.store.unreleased_stopped_connections())) if drains else None
        try:
            listed = [seen async for seen in w.store.started_connections(plan.expired_before_ms, plan.max_pages)]
            listed += await stopped if stopped is not None else []
        finally:
            if stopped is not None:
                stopped.cancel()
        # owners read after their connections, so no generation is judged from an older read
        workers = await w.store.workers() if w.profile.strategy.reads_workers else {}
        w.emit("reconcile", listed=len(listed), dead=list(plan.dead))
        bounds = w.store.clock_skew_bounds()  # the listings' answers sampled it too
        claims: set[asyncio.Task[bool]] = set()
        claimable = found = 0
        for seen in listed:
            if seen.pk in w.held or seen.pk in w.acquiring:
                continue
            if not w.profile.may_judge(seen, w.me, bounds):
                continue  # another's lease, judged on a clock not known to be within the model
            via = ("adopted" if w.profile.adoptable(seen, w.me)
                   else "reconcile" if w.profile.claimable(seen, w.me, now, workers)
                   else "drain" if w.profile.drainable(seen, w.me, now, workers) else None)
            if via is None:
                continue
            # a dead worker's streams are claimed in parallel, in the worker's claim slots (``claims_in_flight``
            # with the notifications being acted on)
            await w.claim_slots.reserve(1)
            if w.capacity() - len(claims) <= 0:
                w.claim_slots.release()
                break
            claimable += via != "adopted"
            found += 1
            claim = w.claims.spawn(self._claim(seen, via))
            claims.add(claim)
            claim.add_done_callback(claims.discard)
        self.last_found = found
        log("reconcile", listed=len(listed), claimable=claimable)
        if claims:
            await asyncio.wait(claims)

    async def _claim(self, seen: ConnectionRecord, via: str) -> bool:
        """Adopt or acquire one listed stream in the claim slot reserved for it; nothing if it is held or being
        acquired by now (single flight: no await between this check and the claim marking it acquiring)."""
        w = self.w
        try:
            if seen.pk in w.held or seen.pk in w.acquiring:
                return False
            return await (w.adopt(seen.pk) if via == "adopted" else w.try_acquire(seen.pk, via, seen))
        finally:
            w.claim_slots.release()
