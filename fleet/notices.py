"""How a worker hears about changes: the SQS notification loop (a hint to examine one connection, a
handoff naming the epoch it released, or a death notice: ``fleet.deathnotice``) and, where the profile
polls, the desired-state check of held streams.

A notification the worker cannot act on (at capacity, not registered, fenced, shutting down) is returned
to the queue for another worker, never deleted.  A STOP read for a stream whose acquire is still in flight
is remembered and honoured at take-up.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from fleet.errors import StoreError
from fleet.lease import STARTED, ConnectionRecord, StopRequest, WorkerRecord
from fleet.logline import log
from fleet.profiles import NoteAction, SeenAction
from fleet.store import Notification

if TYPE_CHECKING:
    from fleet.worker import Worker


LONG_POLL_RECEIVE = 1  # messages a long poll asks for
BACKLOG_RECEIVE = 10  # a short poll, after a poll that found some (SQS's most)


class Notices:
    def __init__(self, worker: Worker) -> None:
        self.w = worker

    async def loop(self) -> None:
        w = self.w
        backlog = False
        while not w.stopping.is_set():
            try:
                # A long poll asks for one message: if this worker dies while it waits, the poll may still take
                # what arrives, which stays invisible to the others for a while (a death notice's other copy,
                # ``fleet.schema.DEATH_NOTICE_COPIES``, then reaches a live worker at once).  A backlog is read
                # with short polls, which never wait, until one finds nothing.
                notes = await (w.store.receive_notifications(BACKLOG_RECEIVE, wait=False) if backlog
                               else w.store.receive_notifications(LONG_POLL_RECEIVE))
            except StoreError as exc:
                log("notify.receive_error", error=str(exc))
                await w.pause(w.config.heartbeat_s)
                continue
            backlog = bool(notes)
            try:
                if w.stopping.is_set():
                    await w.store.return_notifications(notes)
                    return
                acted = await asyncio.gather(*(self.on_notification(note) for note in notes))
                await w.store.delete_notifications([n for n, ok in zip(notes, acted, strict=True) if ok])
                returned = [n for n, ok in zip(notes, acted, strict=True) if not ok]
                await w.store.return_notifications(returned)
            except StoreError as exc:
                log("notify.settle_error", error=str(exc))
                continue
            if returned:
                await w.pause(w.config.heartbeat_s / 4)  # let another worker take them first

    async def on_notification(self, note: Notification) -> bool:
        """Act on one notification; False when this worker cannot (it goes back to the queue)."""
        w, pk = self.w, note.pk
        if note.death is not None:
            return await w.death_notices.on_notice(note.death)
        if not pk:
            return True  # malformed: nothing anyone could act on
        held = pk in w.held
        action = w.profile.on_notification(note.released_epoch, held)
        if action is NoteAction.IGNORE:
            return True
        if not held and not w.able_to_claim():
            return False
        if action is NoteAction.ACQUIRE:
            return await self._claim(pk, "notify")
        if action is NoteAction.ACQUIRE_RELEASED:
            # the releaser said what it left, so try that directly (the condition checks it is still free
            # at that epoch; if not, somebody else was faster and nothing is written)
            released = ConnectionRecord(pk=pk, desired_state=STARTED, ws_url="", epoch=note.released_epoch)
            return await self._claim(pk, "handoff", released)
        try:
            seen = await w.store.get_connection(pk)
            owners: dict[str, WorkerRecord] = {}
            if seen is not None and seen.lease_owner and seen.lease_owner != w.me.worker_id:
                # read after the connection item, so at least as new: a generation it does not carry has
                # been replaced, never not yet registered
                owner = await w.store.get_worker(seen.lease_owner)
                owners = {owner.worker_id: owner} if owner is not None else {}
        except StoreError as exc:
            log("notify.read_error", pk=pk, error=str(exc))
            return False
        if seen is None:
            return True
        if not w.profile.may_judge(seen, w.me, w.store.clock_skew_bounds()):
            return False  # another's lease, and our clock not known to be within the model: back it goes
        decision = w.profile.on_seen(seen, pk in w.held, pk in w.acquiring, w.me, w.clock.now_ms(), owners)
        if decision is SeenAction.DROP:  # not waited for: reading through the STOP takes a while
            w.chores.spawn(w.honour_stop(pk, seen.stopped_at_ms))
        elif decision is SeenAction.STOP_PENDING:
            w.pending_stops.add(StopRequest.of_lease(pk, seen.epoch, seen.stopped_at_ms))  # the STOP found that lease
        elif decision is SeenAction.CLAIM:
            return await self._claim(pk, "notify", seen)
        elif decision is SeenAction.DRAIN:
            return await self._claim(pk, "drain", seen)
        return True

    async def _claim(self, pk: str, via: str, seen: ConnectionRecord | None = None) -> bool:
        """Acquire as a claim the shutdown can cancel; False (the notification goes back) if it did."""
        claim = self.w.claims.spawn(self.w.try_acquire(pk, via, seen))
        try:
            await claim
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return False
        return True

    async def desired_state_loop(self, every_s: float) -> None:
        """Read each held stream's desired state every ``every_s`` (the published design's STOP path)."""
        w = self.w
        while not w.stopping.is_set():
            await w.pause(every_s)
            for held in list(w.held.values()):
                try:
                    seen = await w.store.get_connection(held.pk)
                except StoreError as exc:
                    log("desired_state.error", pk=held.pk, error=str(exc))
                    continue
                if seen is None or seen.desired_state != STARTED:
                    await w.drop(held, "STOP", release=True)
