"""Several real ``fleet.worker.Worker`` processes on one in-memory store, on virtual time, under a
hypothesis-chosen schedule of faults; after every step a checker reads only this test's own record of what
happened (Jepsen style: reads of each stream, writes the store accepted, STOPs) and judges DESIGN's
invariants, never the implementation's predicates.

The faults: request delays of any length (the client gives up after its timeout, the request still lands
whenever it lands), lost answers (applied, reported unknown), requests the network delivers twice (a copy
lands later), reordering (what different delays make), process pauses (nothing of the process runs, its
requests wait), crashes followed by an ECS death notice (burial) and a restart, STOP / START churn from the
router, transfers the workers make themselves to balance the fleet, and lease-clock steps within the
tolerance.

The checks:

* I1 one consumer: each holding (stream, incarnation, epoch) consumed from its first read to its last;
  two incarnations' holdings of one stream never overlap.
* I5 STOP honoured: a stream STOPPED (and not STARTED since) is read by nobody later than ``STOP_BOUND_S``
  after the STOP.
* I6 no zombie write: no write the store accepted for a stream (a checkpoint or a release: they carry the
  writer's epoch) comes from an epoch already superseded (by an accepted acquire or transfer at a later
  epoch) when it was accepted.

I2 (nothing lost while STARTED) needs an upstream emitting sequences: it is judged by the scenarios, not
here (the stand-in consumer reads but stores no messages).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import looptime
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fleet.clock import LoopClock
from fleet.connection import HeldConnection, wait_until_set
from fleet.deathnotice import DeathNotice
from fleet.errors import StoreUnavailable
from fleet.expr import Write
from fleet.lease import STARTED, STOPPED
from fleet.memstore import MemoryStore
from fleet.profiles import profile_for
from fleet.worker import Worker
from tests.fleet.memworker import Recorder, add_stream, config

WORKERS = 3
STREAMS = 5
CLUSTER = "arn:aws:ecs:eu-west-1:0:cluster/fleet"
READ_EVERY_S = 0.1  # how often a consumer reads its open session
REQUEST_S = 0.002  # the round trip of a request the schedule does not delay
BASE = config()
RULES = profile_for(BASE).rules
TIMEOUT_S = RULES.timeout_ms / 1000.0
TOLERANCE_MS = int(RULES.tolerance_ms)
STOP_BOUND_S = 2 * RULES.lease_ms / 1000.0  # a STOP is read with a heartbeat, or the holder fences itself
PKS = [f"CONN#c{i}" for i in range(STREAMS)]
# steps per example x examples: about 2,000 steps per run.  The 10,000-step search of the lease protocol is the
# machines' (``test_machines_property``, no request delay cap, thousands of steps a second); what only this test
# checks is the real worker around those machines: the interpreters (``fleet.stream_driver``, ``fleet.liveness``)
# with real request timeouts, cancellations and heartbeat waits, the notification and reconcile loops (a STOP
# read while an acquire is in flight, adoption after a consistent read), burial through ``fleet.deathnotice``,
# and the balancer's transfers.
STEPS = 50
EXAMPLES = 40


@dataclass
class Fault:
    """What the network does to one request: lands after ``delay_s``; its answer lost; a copy lands
    ``copy_after_s`` after it (None: none)."""

    delay_s: float = 0.0
    lose_answer: bool = False
    copy_after_s: float | None = None
    handoffs_only: bool = False  # only for a release or a transfer (any request: False)


def handoff(table: str, write: Write) -> bool:
    """A release or a transfer: a connections-table write that changes the owner to nobody or another."""
    owner = write.update.set.get("lease_owner")
    return table == BASE.connections_table and owner is not None and "ckpt_epoch" in write.update.set


@dataclass
class Proc:
    """One worker process (an incarnation or more, under one id) and what the schedule did to it."""

    worker: Worker
    task_arn: str
    paused_until: float = 0.0
    crashed: bool = False
    offset_ms: int = 0

    def frozen(self, now: float) -> bool:
        return self.crashed or now < self.paused_until


@dataclass
class Record:
    """What happened, as the test saw it (true time: the loop's)."""

    # first and last read of each (pk, worker, gen, epoch), each as (true time, order): virtual time stands
    # still within a step, so reads at one instant are ordered by when they happened (a crashed worker's last
    # read at t, then its burial and another's first read at the same t, is no overlap)
    reads: dict[tuple[str, str, str, int], tuple[tuple[float, int], tuple[float, int]]] = field(default_factory=dict)
    order: itertools.count[int] = field(default_factory=itertools.count)
    superseded: dict[str, list[tuple[float, int]]] = field(default_factory=lambda: collections.defaultdict(list))
    zombie_writes: list[str] = field(default_factory=list)
    stopped_at: dict[str, float] = field(default_factory=dict)  # streams STOPPED since (true time)

    def read(self, pk: str, worker: str, gen: str, epoch: int, at: float) -> None:
        key, now = (pk, worker, gen, epoch), (at, next(self.order))
        first, _ = self.reads.get(key, (now, now))
        self.reads[key] = (first, now)

    def accepted(self, pk: str, written: dict[str, Any], epoch_before: Any, epoch_after: Any, at: float) -> None:
        """A connections-table write the store accepted: the attributes it set, the item's epoch before and
        after it."""
        writer = written.get("ckpt_epoch")  # a checkpoint, a release or a transfer: its writer's epoch
        newest = max((e for _, e in self.superseded[pk]), default=0)
        if writer is not None and int(writer) < newest:
            self.zombie_writes.append(f"{pk}: a write of epoch {writer} accepted at {at:.3f} after epoch "
                                      f"{newest} was granted")
        if epoch_after is not None and epoch_after != epoch_before:  # an acquire or a transfer
            self.superseded[pk].append((at, int(epoch_after)))

    # -- the checks --------------------------------------------------------------------------------------
    def overlaps(self) -> list[str]:
        found = []
        by_pk: dict[str, list[tuple[tuple[str, str, str, int], tuple[tuple[float, int], tuple[float, int]]]]] = (
            collections.defaultdict(list))
        for key, span in self.reads.items():
            by_pk[key[0]].append((key, span))
        for pk, spans in by_pk.items():
            for (a, (a0, a1)), (b, (b0, b1)) in itertools.combinations(spans, 2):
                if a[1:3] != b[1:3] and a0 <= b1 and b0 <= a1:
                    found.append(f"{pk}: {a[1]}/{a[2]}@{a[3]} read {a0[0]:.3f}-{a1[0]:.3f}, "
                                 f"{b[1]}/{b[2]}@{b[3]} read {b0[0]:.3f}-{b1[0]:.3f}")
        return found

    def stops_ignored(self) -> list[str]:
        return [f"{pk}: read at {last:.3f}, STOPPED at {self.stopped_at[pk]:.3f}"
                for (pk, *_), (_, (last, _)) in self.reads.items()
                if pk in self.stopped_at and last > self.stopped_at[pk] + STOP_BOUND_S]


class FaultyNetwork:
    """One process's view of the shared store: its writes go through the network the schedule shapes."""

    def __init__(self, fleet: Fleet, proc: Callable[[], Proc]) -> None:
        self.fleet = fleet
        self.proc = proc

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fleet.store, name)

    async def _sendable(self) -> None:
        """Wait while the process is paused (forever once it crashed): a paused process sends nothing."""
        proc = self.proc()
        while proc.frozen(self.fleet.loop.time()):
            if proc.crashed:
                await asyncio.Event().wait()
            await asyncio.sleep(max(proc.paused_until - self.fleet.loop.time(), REQUEST_S))  # the pause, virtual

    async def receive_notifications(self, max_messages: int = 10, wait: bool = True) -> list[Any]:
        await self._sendable()
        await asyncio.sleep(REQUEST_S)  # a receive takes a round trip, even from a queue with a backlog
        return await self.fleet.store.receive_notifications(max_messages, wait)

    async def get_connection(self, pk: str) -> Any:
        await self._sendable()
        return await self.fleet.store.get_connection(pk)

    async def workers(self) -> Any:
        await self._sendable()
        return await self.fleet.store.workers()

    async def task_stopped(self, cluster: str, task_arn: str) -> int | None:
        await self._sendable()
        return await self.fleet.store.task_stopped(cluster, task_arn)

    async def execute(self, table: str, write: Write, purpose: str = "coordination") -> dict[str, Any]:
        fleet = self.fleet
        await self._sendable()
        fault = fleet.fault_for(table, write)
        landing = fleet.spawn(fleet.land(table, write, purpose, fault.delay_s))
        if fault.copy_after_s is not None:
            fleet.spawn(fleet.land(table, write, purpose, fault.delay_s + fault.copy_after_s))
        try:
            answer = await asyncio.wait_for(asyncio.shield(landing), TIMEOUT_S)
        except TimeoutError:
            raise StoreUnavailable(f"{table}: no answer within the timeout") from None
        if fault.lose_answer:
            raise StoreUnavailable(f"{table}: answer lost")
        return answer


class Consumer:
    """Stands in for the upstream session: while the stream is held and its fence allows, it reads (each
    read recorded, with the incarnation and epoch); a drain finds nothing left and ends."""

    def __init__(self, worker: Worker, fleet: Fleet, proc: Callable[[], Proc]) -> None:
        self.worker = worker
        self.me = worker.me
        self.fleet = fleet
        self.proc = proc

    async def consume(self, held: HeldConnection) -> None:
        if held.draining:
            held.drained = True
            await self.worker.give_up(held, "drained")
            return
        me = self.me
        held.reading = True
        held.last_ts_ms = float("inf")
        loop = self.fleet.loop
        while not held.stopping.is_set():
            if held.fence.allows() and not self.proc().frozen(loop.time()):
                self.fleet.record.read(held.pk, me.worker_id, me.gen, held.lease.epoch, loop.time())
                held.last_seq += 1
            await wait_until_set(held.stopping, READ_EVERY_S)


class Fleet:
    def __init__(self, profile: str = "hardened") -> None:
        self.profile = profile
        self.loop = looptime.new_event_loop(start=0.0)
        self.store = MemoryStore(config(profile), notify_wait_s=0.05)
        self.record = Record()
        self.faults: collections.deque[Fault] = collections.deque()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.incarnations = itertools.count()
        for pk in PKS:
            add_stream(self.store, pk)
        self.procs: list[Proc] = [self.start_proc(i) for i in range(WORKERS)]

    def start_proc(self, i: int) -> Proc:
        arn = f"arn:aws:ecs:eu-west-1:0:task/fleet/w{i}-{next(self.incarnations)}"
        cfg = config(self.profile, worker_id=f"w{i}", task_arn=arn)
        holder: list[Proc] = []
        worker = Worker(cfg, FaultyNetwork(self, lambda: holder[0]), Recorder(cfg.worker_id),  # type: ignore[arg-type]
                        lambda w: Consumer(w, self, lambda: holder[0]), clock=LoopClock())
        holder.append(Proc(worker, arn))
        self.spawn(worker.run())
        return holder[0]

    def fault_for(self, table: str, write: Write) -> Fault:
        """The first fault scheduled that applies to this request (none: it goes through)."""
        for fault in self.faults:
            if not fault.handoffs_only or handoff(table, write):
                self.faults.remove(fault)
                return fault
        return Fault()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = self.loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled():
            task.exception()  # a request nobody waits for any more: its outcome is the record's

    async def land(self, table: str, write: Write, purpose: str, delay_s: float) -> dict[str, Any]:
        await asyncio.sleep(delay_s)  # the request's network delay: a duration under test (virtual)
        key = "#".join(str(v) for v in write.key.values())
        epoch_before = (self.store.tables[table].get(key) or {}).get("epoch")
        answer = await self.store.execute(table, write, purpose)
        if table == self.store.config.connections_table:
            self.record.accepted(key, write.update.set, epoch_before, answer.get("epoch"), self.loop.time())
        return answer

    def run_for(self, seconds: float) -> None:
        self.loop.run_until_complete(asyncio.sleep(seconds))  # the schedule's step: virtual seconds

    def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        for task in asyncio.all_tasks(self.loop):
            task.cancel()
        self.loop.run_until_complete(asyncio.sleep(0))  # one turn: the cancelled tasks run their cleanup
        pending = asyncio.all_tasks(self.loop)
        if pending:
            self.loop.run_until_complete(asyncio.wait(pending, timeout=1.0))
        self.loop.close()

    # -- the router (as ``fleet.router`` sequences it, written straight into the store) -------------------
    def stop(self, pk: str) -> None:
        now = self._router_now()
        table = self.store.tables[self.store.config.connections_table]
        table[pk] = RULES.stop_connection(pk, now).apply(table[pk])
        found = table[pk]
        self.record.stopped_at.setdefault(pk, self.loop.time())
        owner, epoch, stopped = str(found.get("lease_owner", "")), found.get("epoch"), found.get("stopped_at_ms")
        if owner:
            self._apply_unless_refused(self.store.config.workers_table, RULES.post_stop(owner, pk, epoch, stopped))
        elif found.get("drained_epoch") != epoch and stopped is not None:
            self._apply_unless_refused(self.store.config.connections_table, RULES.mark_undrained(pk, stopped))
        self.store.send(pk)

    def start(self, pk: str) -> None:
        table = self.store.tables[self.store.config.connections_table]
        table[pk] = RULES.start_connection(pk, f"ws://u/{pk}", self._router_now()).apply(table[pk])
        self.record.stopped_at.pop(pk, None)
        self.store.send(pk)

    def _apply_unless_refused(self, table: str, write: Write) -> None:
        key = "#".join(str(v) for v in write.key.values())
        current = self.store.tables[table].get(key)
        if write.allowed(current):
            self.store.tables[table][key] = write.apply(current)

    def _router_now(self) -> int:
        async def now() -> int:
            return LoopClock().now_ms()
        return self.loop.run_until_complete(now())


class FleetMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.fleet = Fleet()


    def teardown(self) -> None:
        self.fleet.close()

    @rule(seconds=st.floats(0.01, 0.6))
    def time_passes(self, seconds: float) -> None:
        self.fleet.run_for(seconds)

    @rule(delay_s=st.one_of(st.floats(0.0, 0.2), st.floats(0.2, 30.0)), lose_answer=st.booleans(),
          copy_after_s=st.none() | st.floats(0.0, 10.0), requests=st.integers(1, 6), handoffs_only=st.booleans())
    def network_fault(self, delay_s: float, lose_answer: bool, copy_after_s: float | None, requests: int,
                      handoffs_only: bool) -> None:
        self.fleet.faults.extend(Fault(delay_s, lose_answer, copy_after_s, handoffs_only) for _ in range(requests))

    @rule(i=st.integers(0, WORKERS - 1), seconds=st.floats(0.05, 3.0))
    def pause(self, i: int, seconds: float) -> None:
        proc = self.fleet.procs[i]
        proc.paused_until = max(proc.paused_until, self.fleet.loop.time()) + seconds

    @rule(i=st.integers(0, WORKERS - 1), ms=st.integers(-TOLERANCE_MS // 2, TOLERANCE_MS // 2))
    def clock_step(self, i: int, ms: int) -> None:
        """Each clock stays within half the tolerance of true time: any two within the tolerance."""
        proc = self.fleet.procs[i]
        target = max(-TOLERANCE_MS // 2, min(TOLERANCE_MS // 2, proc.offset_ms + ms))
        proc.worker.clock.step_ms(target - proc.offset_ms)  # type: ignore[attr-defined]
        proc.offset_ms = target

    @rule(i=st.integers(0, WORKERS - 1))
    def crash_and_bury(self, i: int) -> None:
        """The process dies (nothing of it runs again; what it sent still lands); ECS reports its task
        stopped and a notice reaches the fleet; a new process starts under the same id."""
        fleet, proc = self.fleet, self.fleet.procs[i]
        proc.crashed = True
        async def stopped_ms() -> int:
            return LoopClock().now_ms()
        fleet.store.stopped_tasks[proc.task_arn] = fleet.loop.run_until_complete(stopped_ms())
        fleet.store.send("", death=DeathNotice(proc.task_arn, CLUSTER))
        fleet.procs[i] = fleet.start_proc(i)

    @rule(s=st.integers(0, STREAMS - 1))
    def stop(self, s: int) -> None:
        self.fleet.stop(PKS[s])

    @precondition(lambda self: any(
        self.fleet.store.tables[BASE.connections_table][pk]["desired_state"] == STOPPED for pk in PKS))
    @rule(s=st.integers(0, STREAMS - 1))
    def start(self, s: int) -> None:
        if self.fleet.store.tables[BASE.connections_table][PKS[s]]["desired_state"] != STARTED:
            self.fleet.start(PKS[s])

    @invariant()
    def i1_one_consumer(self) -> None:
        assert not self.fleet.record.overlaps(), self.fleet.record.overlaps()

    @invariant()
    def i5_stop_honoured(self) -> None:
        assert not self.fleet.record.stops_ignored(), self.fleet.record.stops_ignored()

    @invariant()
    def i6_no_zombie_write(self) -> None:
        assert not self.fleet.record.zombie_writes, self.fleet.record.zombie_writes


# Derandomized: make test runs the same schedules every time, so a red CI names a schedule anyone can replay,
# and a failure never spends CI's budget shrinking a new one.  To search further, run it with
# ``derandomize=False`` (a fresh clone's random run found the same-instant overlap ``Record`` now orders).
FleetMachine.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_the_fleet_keeps_i1_i5_i6_under_any_schedule = pytest.mark.timeout(120)(FleetMachine.TestCase)



def test_the_checker_catches_a_profile_that_acquires_without_a_condition() -> None:
    """The same fleet on ``unsafe`` (acquires without a condition): two incarnations consume
    one stream at once (its reconcile runs every 3 s here), and I1 says so."""
    fleet = Fleet("unsafe")
    try:
        fleet.run_for(10.0)
        assert fleet.record.overlaps()
    finally:
        fleet.close()
