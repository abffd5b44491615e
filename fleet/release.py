"""Handing leases off together: a shutdown's or a give-up's handoff (each stream let go through its machine,
``fleet.stream_driver``, then the releases announced in batches), and giving leases to another worker to
balance the fleet (``give_away``).

What a single release sends, and what follows its refusal (the repeat of a refused handoff for the STOP it
missed, the retake of a refused release for a STOP), is the held stream's machine's
(``fleet.stream_machine.HeldStream``).
"""

from __future__ import annotations

import asyncio

from fleet.balance import Gift, gift_entry, give
from fleet.connection import HeldConnection
from fleet.errors import StoreError
from fleet.logline import log
from fleet.ports import ReleaseHost


class Releases:
    def __init__(self, worker: ReleaseHost) -> None:
        self.w = worker

    async def hand_off(self, held: list[HeldConnection], reason: str, budget_s: float | None = None) -> int:
        """Release these leases together, then announce what the profile announces of them in batches, so
        other workers' long polls return them together (with the released epoch, so a taker acquires at once).

        With ``budget_s`` (a shutdown: ``FleetConfig.shutdown_budget_s``) all of it ends within that time: a
        slow store must not keep the process past its stop timeout (2,000 streams on a loaded local backend
        took over a minute, and the platform's SIGKILL then ends everything at once).  A stream whose release
        was not answered by then stops being consumed and is left to lapse at lease expiry (``lease.lost``), as
        a crashed worker's would (its release, if in flight, may land: either way nobody else held it); the
        announcement gets what is left of the budget.  Returns how many were left to lapse (the incarnation is
        then not retired: they lapse with it, at its expiry)."""
        w = self.w
        if not held:
            return 0
        deadline = None if budget_s is None else asyncio.get_running_loop().time() + budget_s
        drops = {asyncio.ensure_future(w.drop(h, reason, release=True)): h for h in held}
        try:
            done, pending = await asyncio.wait(drops, timeout=budget_s)
        except asyncio.CancelledError:  # as a gather would: the caller's cancel reaches its drops
            for drop in drops:
                drop.cancel()
            raise
        if pending:
            log("shutdown.budget_spent", budget_s=budget_s, left=len(pending))
        for drop in pending:  # not awaited: a drop waiting on its consume task outlives one cancel
            drop.cancel()
            w.lose(drops[drop], "shutdown budget spent: left to lapse")
        released = [drops[d] for d in done if not d.cancelled() and d.exception() is None and d.result() is True]
        # left to lapse: not let go within the budget, or let go while its consume task would not end
        lapsing = len(pending)
        for drop in done:
            task = drops[drop].task
            lapsing += task is not None and not task.done()
        handoffs = w.profile.handoffs([(h.pk, h.lease.epoch) for h in released])
        if not handoffs:
            return lapsing
        try:
            async with asyncio.timeout_at(deadline):
                await w.store.notify(handoffs)
        except StoreError as exc:
            log("notify.error", error=str(exc), streams=len(handoffs))
        except TimeoutError:
            log("shutdown.announce_cut", streams=len(handoffs))
        return lapsing

    async def give_away(self, gifts: list[Gift]) -> None:
        """Give streams to idler workers (``fleet.balance``): the latest taken up, each stopped and its lease
        transferred to the recipient, then named in its gifts (else its next sweep finds them)."""
        w = self.w
        movable = [h for h in w.held.values() if h.task is not None and not h.dropping and not h.draining]
        for gift in gifts:
            keep = len(movable) - min(gift.count, len(movable))
            chosen, movable = movable[keep:], movable[:keep]
            if not chosen:
                return
            to = gift.recipient
            w.emit("balance.give", to=to.worker_id, streams=len(chosen))
            for held in chosen:
                held.transfer_to = to
            moved = await asyncio.gather(*(w.drop(h, "rebalance", release=True) for h in chosen),
                                         return_exceptions=True)
            entries = frozenset(gift_entry(h.pk, h.lease.epoch + 1) for h, ok in zip(chosen, moved, strict=True)
                                if ok is True)
            if entries:
                try:
                    await w.store.execute(w.config.workers_table, give(to, entries, w.clock.now_ms()))
                except StoreError as exc:
                    log("balance.give_error", to=to.worker_id, error=str(exc)[:200])
