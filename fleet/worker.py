"""The worker process: claims connections, keeps their upstream sessions, and hands them off.

``Worker`` holds the state of one worker process (its incarnation, its held streams, its fence) and the
steps every profile shares: acquire, take up, drop, hand off.  Every decision is its profile's
(``fleet.profiles``); the loops are collaborators in their own modules:

* ``fleet.liveness``: registration, the heartbeat (the profile's renewals, the STOP mailbox, checkpoints),
  the clock-skew check and the self-fencing watchdog.
* ``fleet.reconcile``: looks paced by the profile, sweeps of the state index, adoption after a consistent
  read.
* ``fleet.notices``: the SQS notification loop and, where the profile polls, the desired-state check.
* metrics: ActiveConnections to CloudWatch.

SIGTERM or SIGINT: no new take-ups, in-flight claims cancelled (one that still lands is released), then
every lease released (``hardened`` also checkpoints and notifies so another worker picks the stream up at
once), the worker item retired, exit 0.

Run as ``python -m fleet.worker [--profile NAME] [--worker-id ID]`` (or ``wsfleet worker``), configured by
``WSFLEET_*`` variables; the options override ``WSFLEET_PROFILE`` / ``WSFLEET_WORKER_ID``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from fleet import stream_machine as machine
from fleet.aws import AwsClients
from fleet.claims import ClaimSlots
from fleet.clock import Clock, LeaseClock
from fleet.config import PROFILES, FleetConfig
from fleet.connection import ConnectionRunner, Fence, HeldConnection, wait_until_set
from fleet.deathnotice import DeathNotices, task_arn_from_metadata
from fleet.errors import ConditionFailed, ConfigError, StoreError, StoreUnavailable
from fleet.history import HistoryWriter
from fleet.lease import STARTED, ConnectionRecord, Holder, Lease, StopRequest
from fleet.liveness import Liveness, new_gen
from fleet.logline import log
from fleet.metrics import publish_active_connections
from fleet.notices import Notices
from fleet.ports import StreamConsumer, WorkerStore
from fleet.profiles import profile_for
from fleet.reconcile import Reconciler
from fleet.region_gate import gate_for
from fleet.release import Releases
from fleet.store import AwsAdapter
from fleet.task_set import ConsumeTasks, TaskSet


class Worker:
    def __init__(self, config: FleetConfig, store: WorkerStore, history: HistoryWriter,
                 consumer: Callable[[Worker], StreamConsumer], clock: Clock | None = None,
                 rng: random.Random | None = None) -> None:
        self.config = config
        self.store = store
        self.history = history
        self.profile = profile_for(config)
        self.rules = self.profile.rules
        self.me = Holder(config.worker_id, new_gen())
        self.clock: Clock = clock or LeaseClock(config.clock_offset_ms, config.clock_offset_file)
        self.rng = rng or random.Random()
        self.fence = Fence(clock=self.clock.fence_s)  # this incarnation's (``Liveness.register`` makes each one's)
        self.gate = gate_for(config, store.aws.gate_clients, self.clock.fence_s)
        self.held: dict[str, HeldConnection] = {}
        self.tasks = ConsumeTasks()  # a stream whose task still runs is not acquired again (``_acquire``)
        self.acquiring: set[str] = set()
        self.pending_stops: set[StopRequest] = set()  # STOPs seen while their stream's acquire was in flight
        self.stopping = asyncio.Event()
        self.closing = False  # shutting down: an acquire that lands now is released, not taken up
        self.claims = TaskSet()
        self.claim_slots = ClaimSlots(config.claims_in_flight)  # fleet.claims: notifications' and sweeps' claims
        self.chores = TaskSet()  # STOP drops and checkpoints, off the heartbeat
        self.liveness = Liveness(self)
        self.reconciler = Reconciler(self)
        self.notices = Notices(self)
        self.releases = Releases(self)
        self.death_notices = DeathNotices(store, self.rules, self.clock, config.workers_table,
                                          self.profile.strategy.buries, self.emit, self.reconciler.request_sweep)
        self.consumer = consumer(self)

    def emit(self, type: str, **fields: Any) -> None:
        """One history event of this incarnation (``worker`` and ``gen`` added)."""
        self.history.emit(type, worker=self.me.worker_id, gen=self.me.gen, **fields)

    # -- lifecycle -----------------------------------------------------------------------------------
    async def run(self) -> None:
        self.emit("worker.start", profile=self.profile.name, pid=os.getpid())
        log("worker.start", worker=self.me.worker_id, gen=self.me.gen, profile=self.profile.name)
        await self.liveness.register()
        loops: list[Callable[[], Awaitable[None]]] = [
            self.liveness.heartbeat_loop, self.liveness.fence_watchdog, self.reconciler.loop,
            lambda: publish_active_connections(self.store, self.me.worker_id, self.held, self.stopping,
                                               self.config.scaled_s(self.config.metric_interval_ms))
        ]
        check_every = self.profile.desired_check_s()
        if check_every is not None:
            loops.append(lambda: self.notices.desired_state_loop(check_every))
        tasks = [asyncio.create_task(self._forever(loop)) for loop in loops]
        # Not cancelled on shutdown: a long poll abandoned mid-wait would still be handed a notification by
        # the queue (our own handoff ones included) and hide it for the visibility timeout.  It finishes its
        # poll and hands back whatever it got.
        notifications = asyncio.create_task(self._forever(self.notices.loop))
        await self.stopping.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._shutdown()
        await notifications

    async def _forever(self, loop: Callable[[], Awaitable[None]]) -> None:
        """Run a loop, logging and restarting it after an unexpected error instead of dying silently."""
        while not self.stopping.is_set():
            try:
                await loop()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log("loop.error", loop=getattr(loop, "__name__", "loop"), error=f"{type(exc).__name__}: {exc}")
                await self.pause(self.config.heartbeat_s)

    async def pause(self, seconds: float) -> None:
        await wait_until_set(self.stopping, seconds)

    async def _shutdown(self) -> None:
        """Graceful: take nothing new up, cancel claims, finish chores, release (and hand off), then retire
        unless a stream was left to lapse."""
        self.closing = True
        await self.claims.cancel()
        await self.chores.drain()
        held = list(self.held.values())
        lapsing = await self.releases.hand_off(held, "shutdown", self.config.shutdown_budget_s)
        retire = self.rules.retire(self.me)
        # a stream left to lapse may still have writes in flight: the incarnation lapses with it, at its expiry
        if retire is not None and self.liveness.registered and not lapsing:
            try:
                await self.store.execute(self.config.workers_table, retire)
            except StoreError as exc:
                log("retire.error", error=str(exc))
        self.emit("worker.stop", reason="shutdown")
        log("worker.stop", worker=self.me.worker_id, released=len(held))

    # -- acquiring -----------------------------------------------------------------------------------
    def capacity(self) -> int:
        return self.config.max_connections - len(self.held) - len(self.acquiring)

    def able_to_claim(self) -> bool:
        return (self.capacity() > 0 and self.liveness.registered and not self.closing
                and not self.stopping.is_set() and self.fence.allows())

    async def try_acquire(self, pk: str, via: str, seen: ConnectionRecord | None = None) -> bool:
        if pk in self.held or pk in self.acquiring or not self.able_to_claim():
            return False
        me = self.me
        with self._acquiring(pk):
            return await self._acquire(pk, via, seen, me)

    @contextlib.contextmanager
    def _acquiring(self, pk: str) -> Iterator[None]:
        """``pk`` is being acquired (STOPs read meanwhile are kept pending) until the block ends."""
        self.acquiring.add(pk)
        try:
            yield
        finally:
            self.acquiring.discard(pk)
            self.forget_pending_stops(pk)

    async def _acquire(self, pk: str, via: str, seen: ConnectionRecord | None, me: Holder,
                       stored_seq: int = 0) -> bool:
        """Send the acquire (the caller marks ``pk`` acquiring); take up what it granted, after ``stored_seq``."""
        if self.tasks.running(pk):  # an earlier take-up's consume task may still write (``ConsumeTasks``)
            log("lease.acquire_deferred", pk=pk, via=via)
            return False
        write = self.rules.acquire(pk, me, self.clock.now_ms(), seen)
        try:
            item = await self.store.execute(self.config.connections_table, write)
        except ConditionFailed:
            self.emit("lease.acquire", pk=pk, outcome="fail", via=via)
            log("lease.acquire", pk=pk, outcome="fail", via=via)
            return False
        except StoreUnavailable as exc:
            self.emit("lease.acquire", pk=pk, outcome="info", via=via, note=str(exc)[:200])
            log("lease.acquire", pk=pk, outcome="info", via=via)
            settled = await self._settle(pk, me, None if seen is None else (seen.epoch or 0) + 1)
            if settled is None:
                return False
            item, via = settled, "resolved"
        return await self._take_up(pk, item, via, me, stored_seq)

    async def _retake(self, held: HeldConnection) -> None:
        """A release for a STOP was refused: unless the lease is no longer ours, the stream was STARTED since
        (maybe STOPPED again), nobody else would take it up: acquire it again (a new epoch, which the old
        lease's STOPs do not stop) and consume it, or drain it up to the newer STOP."""
        pk, me = held.pk, self.me
        if pk in self.acquiring or self.closing or not self.fence.allows():
            return  # our lease stays: the reconcile adopts it, or it is taken over once we are gone
        with self._acquiring(pk):
            for _ in range(RETAKE_ATTEMPTS):
                try:
                    seen = await self.store.get_connection(pk)
                except StoreError as exc:
                    log("lease.retake_error", pk=pk, error=str(exc))
                    return
                if not self.profile.holds(seen, me, held.lease.epoch):
                    return  # taken, or already taken up again
                via = "restarted" if seen.desired_state == STARTED else "drain"
                if await self._acquire(pk, via, seen, me, held.last_seq):
                    return

    async def adopt(self, pk: str, via: str = "adopted") -> bool:
        """``pk``'s lease is ours though we hold nothing (listed so, or a gift): if a consistent read agrees,
        acquire it again at the next epoch and take it up.  Never at the epoch read: a release or transfer of
        ours whose answer was lost may still land and free that epoch while we consume it."""
        me = self.me
        with self._acquiring(pk):
            try:
                seen = await self.store.get_connection(pk)
            except StoreError:
                return False
            return seen is not None and self.profile.owned(seen, me) and await self._acquire(pk, via, seen, me)

    def forget_pending_stops(self, pk: str) -> None:
        """The acquire of ``pk`` is over: the STOPs seen during it were honoured or did not apply."""
        self.pending_stops -= {r for r in self.pending_stops if r.pk == pk}

    async def _settle(self, pk: str, me: Holder, epoch: int | None) -> dict[str, Any] | None:
        """After an acquire of unknown outcome: the item if a read shows it ours (``Profile.owned``) at
        ``epoch`` (None: any), else None (where the profile does not settle, our lease simply lapses)."""
        if not self.profile.strategy.settles_unknown_acquire:
            return None
        try:
            seen = await self.store.get_connection(pk)
        except StoreError:
            return None  # still unknown: our fence and the worker item's expiry settle it
        owned = self.profile.owned(seen, me) and (epoch is None or (seen is not None and seen.epoch == epoch))
        return dict(seen.__dict__) if seen is not None and owned else None

    async def _take_up(self, pk: str, item: dict[str, Any], via: str, me: Holder, stored_seq: int = 0) -> bool:
        """Start consuming a stream whose lease the store says ``me`` holds, unless the profile says not."""
        lease = Lease.granted(item)
        if stored_seq > lease.resume_seq:
            lease = dataclasses.replace(lease, resume_seq=stored_seq)
        self.history.emit("lease.acquire", pk=pk, worker=me.worker_id, gen=me.gen, epoch=lease.epoch,
                          outcome="ok", via=via, expires_ms=item.get("lease_expires_at_ms"))
        log("lease.acquire", pk=pk, outcome="ok", epoch=lease.epoch, via=via)
        if me != self.me:  # that incarnation ended while the acquire was in flight: it consumes nothing
            self.history.emit("lease.lost", pk=pk, worker=me.worker_id, gen=me.gen, epoch=lease.epoch,
                              reason="incarnation ended during the acquire")
            return False
        if self.profile.strategy.drains and self.profile.stop_seen(lease, self.pending_stops):
            # STOPPED during the acquire: what the previous owner left unpersisted is drained, if the item,
            # read again, is still ours to drain
            item = await self._settle(pk, me, lease.epoch) or item
        drain_until = self.profile.drain_until_ms(item)
        held = HeldConnection(lease=lease, last_seq=lease.resume_seq, last_checkpoint_seq=lease.resume_seq,
                              checkpointed_at=self.clock.fence_s(), drain_until_ms=drain_until,
                              stopped_at_ms=machine.stopped_at(item) if drain_until else None, fence=self.fence)
        self.held[pk] = held
        start = machine.take_up(item, closing=self.closing, drains=self.profile.strategy.drains,
                                drain_until_ms=drain_until, consumes=self.profile.consumes(item, self.pending_stops),
                                stops_seen_ms=[r.stopped_at_ms for r in self.pending_stops if r.pk == pk
                                               and r.stops(lease.epoch) and r.stopped_at_ms is not None])
        if start.start is machine.Start.HAND_OFF:
            await self.releases.hand_off([held], start.reason)
            return False
        if start.start is machine.Start.END_FOR_STOP:
            await self.end_for_stop(held, start.reason, start.stopped_at_ms)
            if self.held.get(pk) is not held or held.dropping:
                return False  # else a read showed it STARTED again since that STOP: consumed after all
        held.task = self.tasks.start(pk, self.consumer.consume(held))
        return True

    # -- letting go ----------------------------------------------------------------------------------
    async def give_up(self, held: HeldConnection, reason: str) -> None:
        """The consume task's last act: hand ``held`` off (drained, or its upstream out of reach).  The task's
        work is over, so the release must not wait for the task that runs it: it would wait a heartbeat,
        then cancel that task and the release with it (the lease stayed held and unannounced: every drained
        release until explore seed 3231)."""
        held.task = None
        self.tasks.over(held.pk)  # a refused release may take the stream up again (``_retake``)
        log("lease.give_up", pk=held.pk, reason=reason)
        await self.releases.hand_off([held], reason)

    async def drop(self, held: HeldConnection, reason: str, release: bool, stopped_at_ms: int | None = None) -> bool:
        """Stop consuming ``held``; with ``release`` give the lease back: for the STOP at ``stopped_at_ms``
        when given (a finished drain: for the STOP it drained to), and taken up again (``_retake``) when that
        is no longer the stream's latest STOP; else a handoff (or its ``transfer_to``), repeated for a STOP that
        landed unseen (``fleet.release.Releases.after_refused_handoff``).  Whether a release was accepted."""
        if self.held.get(held.pk) is not held or held.dropping:
            return False
        held.dropping = True
        # no session open, or one that delivered nothing from past the STOP (it may have died silently)
        unread = not held.reading or not await self.releases.read_through(held, stopped_at_ms)
        held.stop_reason = reason
        held.stopping.set()
        if held.session is not None:
            await held.session.close()
        if held.task is not None:  # None once the task itself gives up (``give_up``)
            try:
                await asyncio.wait_for(asyncio.shield(held.task), self.config.heartbeat_s)
            except TimeoutError:
                held.task.cancel()
                unread = True  # what it read may not all be stored
                # its writes may be on their way: nothing is released or transferred before they end
                await asyncio.wait({held.task}, timeout=self.config.heartbeat_s)
            except asyncio.CancelledError:
                if (me := asyncio.current_task()) is not None and me.cancelling():
                    raise  # this drop was cancelled, not the consume task it waited for
        if self.held.get(held.pk) is held:
            del self.held[held.pk]
        held.let_go = True  # a task that would not end sends nothing more
        letting = machine.let_go(release=release, reason=reason, fence_open=self.fence.allows(),
                                 task_ended=held.task is None or held.task.done(), draining=held.draining,
                                 drained=held.drained, drain_stop_ms=held.stopped_at_ms, stop_ms=stopped_at_ms,
                                 unread=unread)
        if isinstance(letting, machine.Lapse):
            self.emit("lease.lost", pk=held.pk, epoch=held.lease.epoch, reason=letting.reason)
            return False
        outcome = await self.releases.release(held, reason, letting.for_stop_ms, letting.behind)
        if outcome == "fail" and machine.after_refusal(letting) is machine.Refused.RETAKE:
            await self._retake(held)
        elif outcome == "fail":
            outcome = await self.releases.after_refused_handoff(held, reason)
        return outcome == "ok"

    async def honour_stop(self, pk: str, stopped_at_ms: int | None = None) -> None:
        """A STOP for ``pk`` (at ``stopped_at_ms``): stop and release it, unless a drain (it ends by itself)."""
        held = self.held.get(pk)
        if held is not None and not held.draining:
            await (self.end_for_stop(held, "STOP", stopped_at_ms) if self.profile.strategy.drains
                   else self.drop(held, "STOP", release=True))

    async def end_for_stop(self, held: HeldConnection, reason: str, stopped_at_ms: int | None) -> None:
        """``held``'s stream was STOPPED (at ``stopped_at_ms``): stop consuming it and release it for that
        STOP (``drop``).  A STOP of unknown time (a refused checkpoint, an older router's entry) is read
        first: the item shows it, or the stream STARTED again (still ours: it goes on), or not ours."""
        release = True
        if stopped_at_ms is None:
            try:
                seen = await self.store.get_connection(held.pk)
            except StoreError as exc:
                log("lease.stop_read_error", pk=held.pk, error=str(exc))
                await self.drop(held, reason, release=True)  # refused unless still ours
                return
            read = machine.on_stop_read(seen, ours=self.profile.holds(seen, self.me, held.lease.epoch))
            if read.go_on:
                return
            reason, release, stopped_at_ms = reason + read.reason_suffix, read.release, read.stop_ms
        await self.drop(held, reason, release=release, stopped_at_ms=stopped_at_ms)


RETAKE_ATTEMPTS = 3  # reads and acquires after a refused release for a STOP, each refused by a newer START or STOP
STARTUP_PATIENCE_S = 15.0  # a backend starting beside us gets this long
USAGE = f"usage: python -m fleet.worker [--profile {{{','.join(PROFILES)}}}] [--worker-id ID] [--help]"


async def reach_backend(store: AwsAdapter) -> None:
    """Read the connections table until it answers; after ``STARTUP_PATIENCE_S`` give up with the reason."""
    deadline = time.monotonic() + STARTUP_PATIENCE_S
    while True:
        try:
            await store.get_connection("CONN#__startup_probe__")
            return
        except StoreUnavailable as exc:
            if time.monotonic() > deadline:
                raise StoreUnavailable(f"DynamoDB did not answer for {STARTUP_PATIENCE_S:.0f} s: {exc}") from exc
            await asyncio.sleep(0.5)


async def serve(config: FleetConfig) -> None:
    if not config.task_arn:
        config = config.with_changes(task_arn=await task_arn_from_metadata())
    history = HistoryWriter(config.history_path, config.worker_id)
    profile = profile_for(config)
    async with AwsClients(config, profile.client_settings) as aws:
        store = AwsAdapter(aws)
        await reach_backend(store)

        def runner(w: Worker) -> ConnectionRunner:
            return ConnectionRunner(config, w.rules, w.me, store, history, w.clock, w.give_up,
                                    reconnect_policy=w.profile.reconnect_policy)

        worker = Worker(config, store, history, runner)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stopping.set)
        await worker.run()
    history.close()


def parse_options(args: list[str]) -> dict[str, str]:
    """``--profile`` / ``--worker-id`` (``--name value`` or ``--name=value``); ConfigError on anything else."""
    options: dict[str, str] = {}
    names = {"--profile": "profile", "--worker-id": "worker_id"}
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        name, eq, value = arg.partition("=")
        if name not in names:
            raise ConfigError(f"unknown argument {arg!r}")
        if not eq:
            if not rest or rest[0].startswith("--"):
                raise ConfigError(f"{name} needs a value")
            value = rest.pop(0)
        options[names[name]] = value
    return options


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        print(USAGE)
        print("Settings (environment): " + ", ".join(sorted(FleetConfig().to_env())))
        return 0
    try:
        config = FleetConfig.from_env().with_changes(**parse_options(args))
    except ConfigError as exc:
        print(f"wsfleet worker: {exc}\n{USAGE}", file=sys.stderr)
        return 2
    if not config.queue_url:
        print("wsfleet worker: WSFLEET_QUEUE_URL is not set (the notification queue)", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(config))
    except StoreError as exc:
        print(f"wsfleet worker: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
