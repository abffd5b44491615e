"""Giving a lease back: the release write, its outcome in the history, and what follows a refusal that the
holder can settle by itself; and giving leases to another worker to balance the fleet (``give_away``).

A release for a STOP (``stopped_at_ms``) holds only while the stream is STOPPED at that time; any other release
(a handoff: shutdown, give-up) only while it is STARTED.  A handoff refused because a STOP landed that the
holder has not read from its mailbox yet is repeated for that STOP with the drain mark: the holder may not
have read what the stream emitted before it, and a worker drains it (``fleet.lease.HardenedRules.release``).
A refused release for a STOP is the worker's to settle (``fleet.worker.Worker._retake``).
"""

from __future__ import annotations

import asyncio
import contextlib

from fleet.balance import Gift, gift_entry, give, transfer
from fleet.connection import HeldConnection
from fleet.errors import ConditionFailed, StoreError
from fleet.lease import STOPPED
from fleet.logline import log
from fleet.ports import ReleaseHost

# reads and releases after a refused handoff, each refused by a newer STOP or START
RELEASE_ATTEMPTS = 3


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
            left = drops[drop]
            left.let_go = True
            if left.task is not None:
                left.task.cancel()
            w.emit("lease.lost", pk=left.pk, epoch=left.lease.epoch, reason="shutdown budget spent: left to lapse")
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

    async def release(self, held: HeldConnection, reason: str, for_stop: int | None, behind: bool) -> str:
        """One release write (``fleet.lease.Rules.release``; a handoff with ``transfer_to`` transfers the lease
        to that incarnation instead, ``fleet.balance.transfer``): its outcome (``ok``, ``fail``, ``info``), in
        the history.  Left to drain (``behind``), it is announced, or nobody drains it before the next sweep."""
        w, to = self.w, held.transfer_to if for_stop is None else None
        now = w.clock.now_ms()
        write = w.rules.release(held.lease, w.me, now, held.last_seq, drained=held.drained,
                                stopped_at_ms=for_stop, behind=behind)
        if to is not None:
            write = transfer(write, held.lease, to, now, w.rules.lease_ms)
        try:
            await w.store.execute(w.config.connections_table, write)
            outcome = "ok"
        except ConditionFailed:
            outcome = "fail"
        except StoreError:
            outcome = "info"
        w.emit("lease.release", pk=held.pk, epoch=held.lease.epoch, outcome=outcome, seq=held.last_seq,
               reason=reason, behind=behind, **({"to": to.worker_id} if to is not None else {}))
        if outcome == "ok" and behind:
            with contextlib.suppress(StoreError):
                await w.store.notify([(held.pk, None)])
        return outcome

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

    async def after_refused_handoff(self, held: HeldConnection, reason: str) -> str:
        """A handoff's release was refused: unless the lease is no longer ours, the stream was STOPPED since.
        Released again for that STOP with the drain mark (or plainly, STARTED again since).  The outcome of
        the last release sent (``fail`` when the lease is not ours any more)."""
        w, outcome = self.w, "fail"
        for _ in range(RELEASE_ATTEMPTS):
            try:
                seen = await w.store.get_connection(held.pk)
            except StoreError as exc:
                log("lease.release_error", pk=held.pk, error=str(exc))
                return "info"
            if not w.profile.holds(seen, w.me, held.lease.epoch):
                return "fail"
            stopped_at = seen.stopped_at_ms if seen.desired_state == STOPPED else None
            outcome = await self.release(held, reason, stopped_at, behind=stopped_at is not None)
            if outcome != "fail":
                return outcome
        return outcome
