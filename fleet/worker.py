"""The worker process: claims connections, keeps their upstream sessions, and hands them off.

``Worker`` holds the state of one worker process (its incarnation, its held streams, its fence) and wires
its parts together.  Every decision is its profile's (``fleet.profiles``) or a pure machine's; the loops and
interpreters are collaborators in their own modules:

* ``fleet.stream_driver``: runs each held stream's machine (``fleet.stream_machine.HeldStream``: acquire,
  take up, stop, release or transfer, retake); ``fleet.release``: handoffs together, and balancing gifts.

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
import gc
import os
import random
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import uvloop

from fleet.aws import AwsClients
from fleet.claims import ClaimSlots
from fleet.clock import Clock, LeaseClock
from fleet.config import PROFILES, FleetConfig
from fleet.connection import ConnectionRunner, Fence, HeldConnection, wait_until_set
from fleet.deathnotice import DeathNotices, task_arn_from_metadata
from fleet.errors import ConfigError, StoreError, StoreUnavailable
from fleet.history import HistoryWriter
from fleet.lease import ConnectionRecord, Holder, StopRequest
from fleet.liveness import Liveness, new_gen
from fleet.logline import log
from fleet.machine_io import LetGo, StopAt
from fleet.metrics import publish_active_connections
from fleet.notices import Notices
from fleet.ports import StreamConsumer, WorkerStore
from fleet.profiles import profile_for
from fleet.reconcile import Reconciler
from fleet.region_gate import gate_for
from fleet.release import Releases
from fleet.store import AwsAdapter
from fleet.stream_driver import StreamDriver
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
        self.stopping = asyncio.Event()
        self.closing = False  # shutting down: an acquire that lands now is released, not taken up
        self.claims = TaskSet()
        self.claim_slots = ClaimSlots(config.claims_in_flight)  # fleet.claims: notifications' and sweeps' claims
        self.chores = TaskSet()  # STOP drops and checkpoints, off the heartbeat
        self.liveness = Liveness(self)
        self.reconciler = Reconciler(self)
        self.notices = Notices(self)
        self.releases = Releases(self)
        self.driver = StreamDriver(self)  # runs each held stream's machine (``fleet.stream_machine``)
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
        """Claim ``pk`` (as ``seen`` shows it) unless held, being acquired, or this worker may not claim;
        whether it is consumed now."""
        if pk in self.held or pk in self.acquiring or not self.able_to_claim():
            return False
        return await self.driver.claim(pk, via, seen)

    async def adopt(self, pk: str, via: str = "adopted") -> bool:
        """``pk``'s lease is ours though we hold nothing (listed so, or a gift): acquired again at the next
        epoch if a consistent read agrees, never at the epoch read (``fleet.stream_machine``, hole 3)."""
        return await self.driver.adopt(pk, via)

    def stop_pending(self, request: StopRequest) -> None:
        """A STOP read while its stream's acquire is in flight: honoured at take-up."""
        self.driver.stop_pending(request)

    # -- letting go ----------------------------------------------------------------------------------
    async def give_up(self, held: HeldConnection, reason: str) -> None:
        """The consume task's last act: hand ``held`` off (drained, or its upstream out of reach).  The task's
        work is over, so the release must not wait for the task that runs it: it would wait a heartbeat,
        then cancel that task and the release with it (the lease stayed held and unannounced: every drained
        release until explore seed 3231)."""
        held.task = None
        self.tasks.over(held.pk)  # a refused release may take the stream up again (a retake)
        log("lease.give_up", pk=held.pk, reason=reason)
        await self.releases.hand_off([held], reason)

    async def drop(self, held: HeldConnection, reason: str, release: bool, stopped_at_ms: int | None = None) -> bool:
        """Stop consuming ``held``; with ``release`` give the lease back (to ``held.transfer_to`` when set),
        else let it lapse; ``stopped_at_ms``: for that STOP.  Whether a release was accepted."""
        if stopped_at_ms is not None:
            return await self.driver.let_go(held, StopAt(stopped_at_ms, reason))
        return await self.driver.let_go(held, LetGo(reason, held.transfer_to, release))

    def lose(self, held: HeldConnection, reason: str) -> None:
        """Stop consuming ``held`` at once, releasing nothing (``lease.lost``)."""
        self.driver.lose(held, reason)

    async def honour_stop(self, pk: str, stopped_at_ms: int | None = None) -> None:
        """A STOP for ``pk`` (at ``stopped_at_ms``): stop and release it, unless a drain (it ends by itself)."""
        held = self.held.get(pk)
        if held is not None:
            await self.driver.let_go(held, StopAt(stopped_at_ms))

    async def end_for_stop(self, held: HeldConnection, reason: str, stopped_at_ms: int | None) -> None:
        """``held``'s stream was STOPPED (at ``stopped_at_ms``; None: read it): stop consuming it and release
        it for that STOP."""
        await self.driver.let_go(held, StopAt(stopped_at_ms, reason))


STARTUP_PATIENCE_S = 15.0  # a backend starting beside us gets this long
# The cyclic garbage collector's thresholds (young, middle, old generation).  A worker keeps every held
# stream's session, tasks and buffers (a few hundred objects each) for as long as it holds it, and its
# requests leave cycles (futures, exceptions) that die a few milliseconds later.  With CPython's defaults
# (700, 10, 10) what is in flight at a young collection reaches the old generation, and once a quarter of
# it is new a full collection walks every held stream's objects: a worker holding 1,000 quiet streams spent
# about a quarter of its CPU there (issue 26).  A young collection every 7,000 net allocations lets
# request-scoped objects die young, so far fewer reach the old generation and full collections are rarer.
# The old generation's own rule (a full collection once a quarter of it is new) is kept: a dropped stream's
# session dies there, and is freed only by a full collection (with that rule off, a worker whose streams
# churned grew by 80 MB).
GC_THRESHOLDS = (7_000, 10, 10)
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
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        # libuv's loop: its polling and socket reads are C, not Python, about a sixth of the client CPU of a
        # worker storing 2,000 messages a second (issue 26, bench.write_cost)
        uvloop.run(serve(config))
    except StoreError as exc:
        print(f"wsfleet worker: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
