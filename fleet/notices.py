"""How a worker hears about changes: the SQS notification loop (a hint to examine one connection, a
handoff naming the epoch it released, or a death notice: ``fleet.deathnotice``) and, where the profile
polls, the desired-state check of held streams.

One poller long-polls, and while the queue has a backlog ``notify_pollers - 1`` more read it with short
polls; what they receive is acted on in the background, in parallel, with at most ``claims_in_flight``
notifications being acted on and one at a time per stream (the worker's ``fleet.claims.ClaimSlots``, shared
with the reconcile's sweeps), so a burst of STARTs is claimed as fast as the store answers.  A queue that
falls behind anyway (a short poll comes back with all it asked for), or that cannot be read (a receive
fails), asks the reconcile for a sweep: one listing of the state index claims every stream the backlog
names, however slowly the queue hands it out (moto's receive, for one, costs time in proportion to the
messages queued).  ``SweepAsks`` says when: receives that keep failing ask less and less often (a queue
that timed out for minutes had an idle 1,000-stream worker list the index every half heartbeat, about a
fifth of its CPU), and so does a backlog whose sweeps find nothing to take (a queue delivering its messages
again had a worker holding 5,000 streams list all of them every 2.7 s, about 30 % of its CPU), never less
often than the reconcile interval.

A notification the worker cannot act on (at capacity, not registered, fenced, shutting down) is returned
to the queue for another worker, never deleted.  A STOP read for a stream whose acquire is still in flight
is remembered and honoured at take-up.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

from fleet.errors import StoreError
from fleet.lease import STARTED, ConnectionRecord, StopRequest, WorkerRecord
from fleet.logline import log
from fleet.ports import NoticeHost
from fleet.profiles import NoteAction, SeenAction
from fleet.store import Notification
from fleet.task_set import TaskSet

LONG_POLL_RECEIVE = 1  # messages a long poll asks for
BACKLOG_RECEIVE = 10  # a short poll, after a poll that found some (SQS's most)
# A queue found behind asks for a sweep at most this often (a share of the heartbeat interval).
BACKLOG_SWEEP_SHARE = 0.5


@dataclass
class SweepAsks:
    """When the notification loop asks the reconcile for a sweep (pure: handed the fence clock, seconds).

    A queue found behind asks at most every ``base_s`` (``BACKLOG_SWEEP_SHARE`` of a heartbeat).  A queue
    that cannot be read asks as often at first; each sweep asked while its receives keep failing doubles the
    spacing of the next, up to ``ceiling_s`` (the reconcile interval, or ``base_s`` if that is longer): a
    backlog that cannot be read is still swept within the reconcile interval.  A receive that answers
    (``answered``) ends that doubling.  A queue behind whose sweeps find nothing to take (its backlog names
    streams already held: messages a queue delivers again, or notifications of streams a sweep took first)
    doubles the spacing the same way, until a sweep finds something (``behind``)."""

    base_s: float
    ceiling_s: float
    asked_at: float = float("-inf")
    doublings: int = 0  # sweeps asked since the queue last answered a receive
    fruitless: int = 0  # sweeps asked for a queue behind since a sweep last found something to take

    def spacing_s(self) -> float:
        """How far after the last ask the next may come."""
        return min(math.ldexp(self.base_s, min(self.doublings + self.fruitless, 32)),
                   max(self.base_s, self.ceiling_s))

    def ask(self, now_s: float) -> bool:
        """Whether to ask for a sweep now (noted as asked if so)."""
        if now_s - self.asked_at < self.spacing_s():
            return False
        self.asked_at = now_s
        return True

    def failed(self, now_s: float) -> bool:
        """A receive failed: whether to ask for a sweep now (the next ask then comes twice as far after)."""
        asked = self.ask(now_s)
        self.doublings += asked
        return asked

    def answered(self) -> None:
        """A receive answered: the queue is readable again."""
        self.doublings = 0

    def behind(self, now_s: float, last_found: int | None) -> bool:
        """A short poll came back full: whether to ask for a sweep now.  ``last_found``: what the last sweep
        set out to take (None: none ran yet).  Nothing: the next ask comes twice as far after this one."""
        if last_found != 0:
            self.fruitless = 0
        asked = self.ask(now_s)
        self.fruitless += asked and last_found == 0
        return asked


class Notices:
    def __init__(self, worker: NoticeHost) -> None:
        self.w = worker
        self.slots = worker.claim_slots
        self.quiet_until = 0.0  # monotonic: pollers wait until then (notifications were handed back)
        self.sweep_asks = SweepAsks(worker.config.heartbeat_s * BACKLOG_SWEEP_SHARE, worker.config.reconcile_s)
        self.backlog = asyncio.Event()  # a poll found messages, and no short poll has found none since

    async def loop(self) -> None:
        """One poller long-polls; while the queue has a backlog, ``notify_pollers - 1`` helpers join it with
        short polls (an idle worker sends no more receives than one poller does).  Each hands what it receives
        to a background settle and polls again at once; returns once every poller has stopped and every
        notification received is settled."""
        settles = TaskSet()
        try:
            async with asyncio.TaskGroup() as pollers:
                pollers.create_task(self._poll(settles, lead=True))
                for _ in range(self.w.config.notify_pollers - 1):
                    pollers.create_task(self._poll(settles, lead=False))
        finally:
            await settles.drain()

    async def _poll(self, settles: TaskSet, lead: bool) -> None:
        w = self.w
        backlog = False
        while not w.stopping.is_set():
            if not lead and not self.backlog.is_set():
                await self._backlog_or_stop()
                continue
            if self.quiet_until > self.w.clock.fence_s():
                await w.pause(self.quiet_until - self.w.clock.fence_s())
            # A long poll asks for one message: if this worker dies while it waits, the poll may still take
            # what arrives, which stays invisible to the others for a while (a death notice's other copy,
            # ``fleet.schema.DEATH_NOTICE_COPIES``, then reaches a live worker at once).  A backlog is read
            # with short polls, which never wait, until one finds nothing; never more than there is room for.
            short = backlog or not lead
            room = await self.slots.reserve(BACKLOG_RECEIVE if short else LONG_POLL_RECEIVE)
            if w.stopping.is_set():
                self.slots.release(room)
                return
            try:
                notes = await w.store.receive_notifications(room, wait=not short)
            except StoreError as exc:
                self.slots.release(room)
                log("notify.receive_error", error=str(exc))
                if self.sweep_asks.failed(w.clock.fence_s()):
                    w.reconciler.request_sweep()  # what the queue holds cannot be read now: the index lists it too
                await w.pause(w.config.heartbeat_s)
                continue
            self.sweep_asks.answered()
            self.slots.release(room - len(notes))
            if short and notes and len(notes) == room and self.sweep_asks.behind(w.clock.fence_s(),
                                                                                   w.reconciler.last_found):
                w.reconciler.request_sweep()  # the queue is behind: one listing finds what it holds
            backlog = bool(notes)
            if notes:
                self.backlog.set()
            elif short:
                self.backlog.clear()
            if w.stopping.is_set():
                self.slots.release(len(notes))
                await self._settle(notes, [False] * len(notes))
                return
            if notes:
                settles.spawn(self._act_on(notes))

    async def _backlog_or_stop(self) -> None:
        """Wait until the queue has a backlog or the worker stops."""
        waits = [asyncio.ensure_future(self.backlog.wait()), asyncio.ensure_future(self.w.stopping.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()

    async def _act_on(self, notes: list[Notification]) -> None:
        """Act on received notifications in parallel (each holds a slot until acted on), then settle them."""
        acted = await asyncio.gather(*(self._one(note) for note in notes), return_exceptions=True)
        for error in (a for a in acted if isinstance(a, BaseException)):
            log("notify.error", error=f"{type(error).__name__}: {error}")
        await self._settle(notes, [a is True for a in acted])

    async def _one(self, note: Notification) -> bool:
        try:
            if not note.pk or note.death is not None:
                return await self.on_notification(note)
            return await self.slots.one_at_a_time(note.pk, lambda: self.on_notification(note))
        finally:
            self.slots.release()

    async def _settle(self, notes: list[Notification], acted: list[bool]) -> None:
        """Delete what was acted on, hand the rest back (then poll less for a moment: another worker first)."""
        returned = [n for n, ok in zip(notes, acted, strict=True) if not ok]
        try:
            await self.w.store.delete_notifications([n for n, ok in zip(notes, acted, strict=True) if ok])
            await self.w.store.return_notifications(returned)
        except StoreError as exc:
            log("notify.settle_error", error=str(exc))
        if returned:
            self.quiet_until = self.w.clock.fence_s() + self.w.config.heartbeat_s / 4

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
            w.stop_pending(StopRequest.of_lease(pk, seen.epoch, seen.stopped_at_ms))  # the STOP found that lease
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
