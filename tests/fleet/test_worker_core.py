"""The real ``Worker`` on the in-memory store: the holes of issue 10, each shown closed at the worker level.

Each docstring says how the test fails on commit 9eab16e's logic."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from fleet.clock import LoopClock, SkewEstimator
from fleet.config import FleetConfig
from fleet.connection import HeldConnection
from fleet.expr import Write
from fleet.lease import STARTED, STOPPED, ConnectionRecord, Holder, Rules, StopRequest, WorkerRecord
from fleet.memstore import MemoryStore
from fleet.profiles import Sweep, profile_for
from fleet.store import Notification
from fleet.worker import Worker
from tests.fleet.memworker import Recorder, RecordingConsumer, add_stream, config, consumer, history, running, until

pytestmark = pytest.mark.looptime

PK = "CONN#c1"
CONNS = "wsfleet-connections"
WORKERS = "wsfleet-workers"


def hold_acquire_answers(store: MemoryStore) -> asyncio.Event:
    """From now on every acquire's answer waits until the returned gate is set."""
    gate = asyncio.Event()

    async def slow_answer(table: str, write: Write) -> None:
        if is_acquire(table, write):
            await gate.wait()

    store.after_write = slow_answer
    return gate


@contextlib.asynccontextmanager
async def holding(store: MemoryStore | None = None) -> AsyncIterator[tuple[MemoryStore, Worker]]:
    """A worker running on ``store`` (a new one by default) with ``PK`` STARTED, once it consumes ``PK`` (its
    consume task has begun: held alone, the task may not have run yet)."""
    store = store or MemoryStore(config())
    add_stream(store, PK)
    async with running(store) as worker:
        await until(lambda: consuming(worker))
        yield store, worker


def consuming(worker: Worker) -> bool:
    """Whether the worker's current incarnation holds ``PK`` and its consume task has begun."""
    return PK in worker.held and (PK, worker.me.gen) in consumer(worker).consumed


def is_acquire(table: str, write: Write) -> bool:
    return table == CONNS and "owner_gen" in write.update.set and write.update.set["owner_gen"] != ""


def stop(store: MemoryStore, pk: str, at_ms: int = 1) -> None:
    """What the hardened router writes for STOP at ``at_ms``: STOPPED, then the lease and the stop time found
    into its owner's mailbox."""
    rules = store_rules(store)
    table = store.tables[CONNS]
    table[pk] = found = rules.stop_connection(pk, at_ms).apply(table[pk])
    owner = found.get("lease_owner", "")
    if owner and owner in store.tables[WORKERS]:
        post = rules.post_stop(owner, pk, found.get("epoch"), found.get("stopped_at_ms"))
        store.tables[WORKERS][owner] = post.apply(store.tables[WORKERS][owner])


def stops_pending(worker: Worker) -> set[str]:
    return {request.pk for stream in worker.driver.streams.values() for request in stream.stops_seen}


def store_rules(store: MemoryStore) -> Rules:
    return profile_for(store.config).rules


async def test_a_worker_claims_a_started_stream_consumes_it_and_hands_it_off_on_shutdown() -> None:
    async with holding() as (store, worker):
        me = worker.me
        item = store.item(CONNS, PK)
        assert item is not None and (item["lease_owner"], item["owner_gen"], item["epoch"]) == ("w1", me.gen, 1)
        assert consumer(worker).consumed == [(PK, me.gen)]
    assert store.connection(PK).lease_owner == ""
    assert [n.released_epoch for n in store.queue if n.pk == PK] == [1]
    assert all(e.get("gen") == me.gen for e in history(worker).events if e["type"].startswith(("lease", "worker")))


async def test_hole_3_a_stale_listing_never_brings_back_a_dropped_stream() -> None:
    """Hole 3.  At 9eab16e a sweep took up any listed stream whose owner and generation were ours
    (``_ours``), without a write or a consistent read: after a STOP dropped it, a stale index listing
    brought it back and it was consumed again.  Now adoption needs a consistent read showing it ours and
    STARTED."""
    async with holding() as (store, worker):
        store.freeze_index()  # the index still lists it as ours
        stop(store, PK)
        await until(lambda: PK not in worker.held)
        await worker.reconciler.sweep(Sweep(expired_before_ms=None, max_pages=None))
        assert PK not in worker.held and consumer(worker).consumed == [(PK, worker.me.gen)]


async def test_an_acquire_whose_answer_was_lost_is_adopted_after_a_consistent_read() -> None:
    store = MemoryStore(config())
    add_stream(store, PK)
    store.lose_answer_for = lambda table, write: is_acquire(table, write)
    store.before_write = None
    async with running(store) as worker:
        await until(lambda: bool(history(worker).of("lease.acquire", outcome="ok", via="resolved")))
        assert PK in worker.held


async def test_hole_4_sigterm_during_an_acquire_leaves_nothing_consumed_or_held() -> None:
    """Hole 4.  At 9eab16e shutdown neither cancelled claims nor closed anything first: an acquire answered
    after ``_shutdown`` snapshotted ``held`` was taken up and consumed, never released.  Now in-flight claims
    are cancelled (one that still landed is left to the retired incarnation, claimable at once), and an
    acquire answered during shutdown is released and announced."""
    store = MemoryStore(config())
    add_stream(store, PK)
    add_stream(store, "CONN#c2")
    stopping = asyncio.Event()
    settled: list[str] = []

    async def answer_after_the_snapshot(table: str, write: Write) -> None:
        if is_acquire(table, write):
            try:
                await stopping.wait()
                await asyncio.sleep(0.05)  # the answer's delay (virtual): it arrives while the shutdown is under way
                settled.append("answered")
            except asyncio.CancelledError:
                settled.append("cancelled")
                raise

    store.after_write = answer_after_the_snapshot
    async with running(store) as worker:
        await until(lambda: len(worker.acquiring) == 2)
        me = worker.me
        stopping.set()
    await until(lambda: len(settled) == 2)
    # the shutdown cancelled both claims after their writes landed: nothing consumed, nothing held
    assert consumer(worker).consumed == [] and worker.held == {}
    retired = WorkerRecord.from_item(store.tables[WORKERS]["w1"])
    taker = store_rules(store)
    for pk in (PK, "CONN#c2"):
        seen = store.connection(pk)
        assert (seen.lease_owner, seen.owner_gen) == ("w1", me.gen)
        assert taker.claimable(seen, Holder("w2", "g2"), 10**6, {"w1": retired})


async def test_hole_4_an_acquire_answered_during_shutdown_is_released_and_announced() -> None:
    store = MemoryStore(config())

    async with running(store) as worker:
        await until(lambda: bool(history(worker).of("reconcile")))
        worker.reconciler.pacer.next_sweep_s = float("inf")
        add_stream(store, PK)
        gate = hold_acquire_answers(store)
        seen = store.connection(PK)
        acquire = asyncio.create_task(worker.try_acquire(PK, "test", seen))  # not a tracked claim
        await until(lambda: PK in worker.acquiring)
        worker.closing = True
        gate.set()
        assert await acquire is False
    assert consumer(worker).consumed == [] and store.connection(PK).lease_owner == ""
    assert [n.pk for n in store.queue] == [PK]


async def test_hole_6_a_stop_landing_while_the_acquire_is_in_flight_is_honoured_at_take_up() -> None:
    """Hole 6.  At 9eab16e a mailbox entry for a stream not yet held was deleted as handled with the next
    renewal; the acquire answered afterwards (applied before the STOP, so it reads STARTED) was taken up and
    the stream consumed until teardown.  Now the entry stays pending and take-up drains what the stream
    emitted before the STOP instead of consuming it, then releases."""
    store = MemoryStore(config())
    add_stream(store, PK)

    gate = hold_acquire_answers(store)
    async with running(store) as worker:
        await until(lambda: PK in worker.acquiring)
        stop(store, PK)
        renewals = len(history(worker).of("lease.renew", outcome="ok"))
        await until(lambda: len(history(worker).of("lease.renew", outcome="ok")) >= renewals + 2)
        assert PK in stops_pending(worker)
        gate.set()
        await until(lambda: PK not in worker.acquiring and PK not in worker.held)
        assert consumer(worker).consumed == []
        # what the stream emitted before the STOP is nobody else's to persist: drained, then released
        assert consumer(worker).drained == [(PK, worker.me.gen)]
        await until(lambda: "stop_requests" not in (store.item(WORKERS, "w1") or {}))
    assert store.connection(PK).lease_owner == ""
    assert store.connection(PK).drained_epoch == store.connection(PK).epoch == 1


async def test_a_stop_seen_during_the_acquire_then_a_start_again_leaves_the_stream_consumed() -> None:
    """A STOP whose time is not known (an entry of an older router) pending at take-up, while the stream is
    STARTED again: the read that settles which STOP it was shows it STARTED, so the stream is consumed,
    neither released (nobody would take it up) nor left held unconsumed."""
    store = MemoryStore(config())
    add_stream(store, PK)
    gate = hold_acquire_answers(store)
    async with running(store) as worker:
        await until(lambda: PK in worker.acquiring)
        worker.stop_pending(StopRequest.parse(f"{PK}@1"))
        gate.set()
        await until(lambda: bool(consumer(worker).consumed))
        assert PK in worker.held and worker.held[PK].task is not None
    assert history(worker).of("lease.release", pk=PK, reason="shutdown")


async def test_hole_6_a_stop_read_from_a_notification_during_the_acquire_is_honoured() -> None:
    store = MemoryStore(config())
    add_stream(store, PK)

    gate = hold_acquire_answers(store)
    async with running(store) as worker:
        await until(lambda: PK in worker.acquiring)
        store.tables[CONNS][PK]["desired_state"] = STOPPED  # STOP with no mailbox post (owner unknown)
        store.send(PK)
        await until(lambda: PK in stops_pending(worker))
        gate.set()
        await until(lambda: PK not in worker.acquiring)
        assert consumer(worker).consumed == []


async def test_notifications_the_worker_cannot_act_on_go_back_to_the_queue() -> None:
    """At 9eab16e every received notification was deleted, acted on or not: a handoff reaching a worker at
    capacity was lost, and the stream waited for a sweep.  (Deleting it again makes the wait for its return
    time out; acting on it at capacity fails the last assertion.)"""
    store = MemoryStore(config(max_connections=1))
    add_stream(store, PK)
    add_stream(store, "CONN#c2", desired_state=STARTED)
    async with running(store) as worker:
        await until(lambda: len(worker.held) == 1)
        other = next(pk for pk in (PK, "CONN#c2") if pk not in worker.held)
        store.send(other, released_epoch=0)
        await until(lambda: any(n.pk == other for n in store.returned))  # deleted unread, it never would be
        assert other not in worker.held and store.connection(other).lease_owner == ""  # handed back, not acted on


async def test_a_burst_of_stop_drops_never_holds_back_the_heartbeat() -> None:
    """At 9eab16e STOP drops ran one at a time inside the heartbeat loop: slow releases of a burst of STOPs
    delayed the next renewal past the fence, and the worker fenced itself off every stream.  Now drops are
    background chores."""
    store = MemoryStore(config())
    pks = [f"CONN#c{i}" for i in range(6)]
    for pk in pks:
        add_stream(store, pk)

    async def slow_release(table: str, write: Write) -> None:
        if table == CONNS and write.update.set.get("lease_owner") == "":
            # a slow backend (a virtual delay, under test): 6 releases in a row would outlast the 0.75 s fence
            await asyncio.sleep(0.4)

    async with running(store) as worker:
        await until(lambda: len(worker.held) == len(pks))
        store.before_write = slow_release
        for pk in pks:
            stop(store, pk)
        await until(lambda: not worker.held)
        assert not history(worker).of("lease.lost")
        assert all(e["reason"] == "STOP" for e in history(worker).of("lease.release"))


@pytest.mark.parametrize("skew_ms", [45.0, -45.0])
async def test_skew_beyond_the_tolerance_fences_the_worker_and_is_reported(skew_ms: float) -> None:
    async with holding() as (store, worker):  # tolerance 50 ms: 0.8 of it is 40 ms
        first = worker.me
        store.skew = (skew_ms - 2, skew_ms + 2)
        await until(lambda: not worker.liveness.registered)
        assert PK not in worker.held
        [reported] = [e for e in history(worker).of("clock.skew") if e["low_ms"] != -5.0]  # not the first, agreeing
        assert reported["fences"] is True and reported["low_ms"] == skew_ms - 2
        store.skew = (-5.0, 5.0)
        await until(lambda: worker.liveness.registered and consuming(worker))
        assert worker.me.gen != first.gen
        assert [c for c in consumer(worker).consumed if c[0] == PK] == [(PK, first.gen), (PK, worker.me.gen)]


async def test_a_lease_judged_gone_on_a_clock_not_known_within_the_model_is_not_taken_over() -> None:
    """Explore seed 4148: woken from a freeze with its clock stepped 1.9 s ahead, a worker took over a live
    worker's streams before enough answers showed the skew.  While the estimate is unsettled (the newest
    answers disagree with the older ones) it claims streams nobody holds, never another's lease; once the
    answers agree, within the model, it takes the dead owner's stream over."""
    store = MemoryStore(config())
    store.skew = None
    add_stream(store, PK, lease_owner="w2", owner_gen="gen-b", epoch=3, lease_expires_at_ms=5)
    store.tables[WORKERS]["w2"] = {"pk": "w2", "gen": "gen-b", "expires_at_ms": 5}  # long dead by any clock
    add_stream(store, "CONN#c2")
    async with running(store) as worker:
        await until(lambda: "CONN#c2" in worker.held)
        for _ in range(2):  # two more sweeps
            looks = len(history(worker).of("reconcile"))
            worker.reconciler.request_sweep()
            await until(lambda n=looks: len(history(worker).of("reconcile")) > n)
        assert PK not in worker.held and store.connection(PK).lease_owner == "w2"
        store.send(PK)
        await until(lambda: bool(store.returned))  # the notification goes back, unacted on
        assert PK not in worker.held
        store.skew = (-5.0, 5.0)
        worker.reconciler.request_sweep()
        await until(lambda: consuming(worker))
    assert store.connection(PK).epoch == 4


class DatedStore(MemoryStore):
    """A store whose skew estimate is made as ``fleet.aws`` makes it: every answer dated, as DynamoDB dates it,
    in whole seconds of the server's clock (here the workers' own lease clock: no skew), fed with its send and
    receive times (virtual, so equal) to a real ``SkewEstimator``."""

    def __init__(self, config: FleetConfig) -> None:
        super().__init__(config)
        self.server = LoopClock()
        self.estimator = SkewEstimator()

    def _answered(self) -> None:
        now_ms = self.server.fence_s() * 1000.0
        self.estimator.add(now_ms, now_ms, self.server.now_ms() // 1000 * 1000)

    async def execute(self, table: str, write: Write, purpose: str = "coordination") -> dict[str, Any]:
        try:
            return await super().execute(table, write, purpose)
        finally:
            self._answered()

    async def workers(self) -> dict[str, WorkerRecord]:
        self._answered()
        return await super().workers()

    async def get_worker(self, worker_id: str) -> WorkerRecord | None:
        self._answered()
        return await super().get_worker(worker_id)

    def clock_skew_bounds(self) -> tuple[float, float] | None:
        return self.estimator.bounds(self.server.now_ms() - self.server.fence_s() * 1000.0)


async def test_an_idle_worker_settles_its_clock_on_whole_second_dates_and_takes_a_dead_owners_stream_over() -> None:
    """Issue 28's region failover on the merged main: a standby worker holding nothing sends only its
    renewals, a heartbeat apart, so the ``Date`` headers of its answers (whole seconds) are read at the same
    few phases of the server's second, and its skew estimate stays wider than the model: since another's
    lease is judged only on an estimate within it, it never took the dead owner's stream over (here: four
    phases, 250 ms apart, leave the estimate about 750 ms wide against the 80 ms allowed).  While its
    estimate does not let it judge, a worker now reads its worker item at random moments between its
    renewals, and takes the stream over once the answers settle the estimate."""
    store = DatedStore(config())
    add_stream(store, PK, lease_owner="w2", owner_gen="gen-b", epoch=3, lease_expires_at_ms=5)
    store.tables[WORKERS]["w2"] = {"pk": "w2", "gen": "gen-b", "expires_at_ms": 5}  # long dead by any clock
    async with running(store) as worker:
        await until(lambda: consuming(worker), timeout_s=30.0)
        bounds = store.clock_skew_bounds()
        assert bounds is not None and worker.profile.judges_expiry(bounds), bounds
    assert store.connection(PK).epoch == 4


class RoutingControl:
    """A stand-in of Route 53 ARC's data plane as the region gate reads it: one routing control."""

    def __init__(self) -> None:
        self.state = "Off"

    async def get_routing_control_state(self, RoutingControlArn: str) -> dict[str, str]:
        return {"RoutingControlState": self.state}


async def test_a_standby_gated_off_settles_its_clock_and_takes_over_once_its_region_is_on() -> None:
    """Issue 28's region failover on the merged main: a standby worker whose region's control is Off sends
    nothing to DynamoDB, so when its region was turned On it had no estimate of the server's clock, and then
    only its renewals' answers to make one: it claimed the dead primary's streams 22 s after activation
    (RTO 30 s against 8.7 s).  Gated off, it now samples the server's clock meanwhile (and registers nothing),
    so it takes the stream over at its first sweep once the region is On."""
    store = DatedStore(config(region_gate_endpoints=("us-west-2=http://arc",), region_gate_control="west"))
    control = RoutingControl()
    store.aws.gate_clients = [("http://arc", control)]
    add_stream(store, PK, lease_owner="w2", owner_gen="gen-b", epoch=3, lease_expires_at_ms=5)
    store.tables[WORKERS]["w2"] = {"pk": "w2", "gen": "gen-b", "expires_at_ms": 5}  # long dead by any clock
    worker = Worker(store.config, store, Recorder("w1"), RecordingConsumer, clock=LoopClock())
    task = asyncio.create_task(worker.run())
    try:
        await until(lambda: worker.profile.judges_expiry(store.clock_skew_bounds()), timeout_s=30.0)
        assert "w1" not in store.tables[WORKERS] and not worker.held
        control.state = "On"
        await until(lambda: consuming(worker), timeout_s=4 * store.config.heartbeat_s)
    finally:
        worker.stopping.set()
        await asyncio.wait_for(task, 10)
    assert store.connection(PK).epoch == 4


class ReceiveRecordingStore(MemoryStore):
    """Records how many messages each receive asked for."""

    def __init__(self, config: FleetConfig) -> None:
        super().__init__(config)
        self.receives: list[tuple[int, bool, int]] = []  # (messages asked for, long poll, messages received)

    async def receive_notifications(self, max_messages: int = 10, wait: bool = True) -> list[Notification]:
        received = await super().receive_notifications(max_messages, wait)
        self.receives.append((max_messages, wait, len(received)))
        return received


async def test_a_long_poll_asks_for_one_notification_and_a_backlog_is_read_with_short_polls() -> None:
    """A worker that dies during a long poll may still take what arrives: asking for one message, it takes at
    most one copy of a death notice (``fleet.schema.DEATH_NOTICE_COPIES``), and another reaches a live worker
    at once.  Once a poll finds messages, the backlog is read ten at a time with polls that never wait, so no
    poll asking for more than one is ever left waiting.  (Per poller: this worker has one.)"""
    store = ReceiveRecordingStore(config(notify_pollers=1))
    async with running(store):
        await until(lambda: len(store.receives) >= 2)
        for pk in (PK, "CONN#c2", "CONN#c3"):
            add_stream(store, pk)
            store.send(pk)
        await until(lambda: sum(got for *_, got in store.receives) == 3 and store.receives[-1][2] == 0)
    asked = [(ask, long) for ask, long, _ in store.receives]
    assert asked[1:] == [(10, False) if got else (1, True) for *_, got in store.receives[:-1]]
    assert (1, True, 1) in store.receives  # three waiting, one taken


class DateSampledStore(MemoryStore):
    """A store whose skew estimate changes only with a worker-item read's answer (the estimate from
    DynamoDB's ``Date`` headers moves only with answers): the next read's answer shows the clocks agree."""

    async def get_worker(self, worker_id: str) -> WorkerRecord | None:
        self.skew = (-5.0, 5.0)
        return await super().get_worker(worker_id)


async def test_a_worker_fenced_by_a_stale_skew_estimate_keeps_sampling_and_comes_back() -> None:
    """A stale ``Date`` header (a server's cached date) once put the estimate out of the model: the worker
    fenced itself, sent nothing more, so no answer could correct the estimate and it stayed out for good.
    Fenced for skew, it now keeps reading its worker item, and rejoins once the answers agree."""
    async with holding(DateSampledStore(config())) as (store, worker):
        first = worker.me
        store.skew = (45.0, 49.0)
        await until(lambda: worker.me != first)
        await until(lambda: worker.liveness.registered and consuming(worker))
    assert [e["fences"] for e in history(worker).of("clock.skew")][:2] == [False, True]  # agreeing, then out


async def test_blog_renews_each_lease_and_stops_on_the_desired_state_read() -> None:
    store = MemoryStore(config("blog"))
    add_stream(store, PK)
    async with running(store) as worker:
        store.send(PK)
        await until(lambda: PK in worker.held)
        await until(lambda: bool(history(worker).of("lease.renew", pk=PK, outcome="ok")))
        assert store.tables[WORKERS] == {}
        store.tables[CONNS][PK]["desired_state"] = STOPPED
        await until(lambda: PK not in worker.held)
        [released] = history(worker).of("lease.release")
        assert released["reason"] == "STOP" and not store.queue  # blog announces nothing
    assert ConnectionRecord.from_item(store.tables[CONNS][PK]).lease_owner == ""


async def test_a_handoff_whose_claim_the_shutdown_cancels_goes_back_to_the_queue() -> None:
    store = MemoryStore(config())

    async with running(store) as worker:
        add_stream(store, PK)
        hold_acquire_answers(store)  # never answered: the shutdown finds the acquire in flight
        store.send(PK, released_epoch=0)
        await until(lambda: PK in worker.acquiring)
    # back in the queue, not deleted (a poller whose long poll was still waiting at the shutdown may receive it
    # once more, and hands it back again)
    assert {n.pk for n in store.returned} == {PK} and [n.pk for n in store.queue] == [PK] and worker.held == {}


async def test_an_acquire_answered_after_the_incarnation_ended_is_not_taken_up() -> None:
    store = MemoryStore(config())

    async with running(store) as worker:
        await until(lambda: bool(history(worker).of("reconcile")))
        worker.reconciler.pacer.next_sweep_s = float("inf")
        add_stream(store, PK)
        gate = hold_acquire_answers(store)
        first = worker.me
        acquire = asyncio.create_task(worker.try_acquire(PK, "test", store.connection(PK)))
        await until(lambda: PK in worker.acquiring)
        store.tables[WORKERS]["w1"]["gen"] = "replaced"  # the next renewal is refused: a new incarnation
        await until(lambda: worker.me != first)
        gate.set()
        assert await acquire is False
        [lost] = history(worker).of("lease.lost", pk=PK)
        assert lost["gen"] == first.gen and consumer(worker).consumed == [] and PK not in worker.held


# -- issue 10, I2 vs I5: a STOPPED stream whose owner died is drained -------------------------------------
def orphan(store: MemoryStore, pk: str = PK, owner_expires_ms: int | None = None) -> None:
    """``pk`` held by w2 (epoch 3), then STOPPED; w2's worker item expiring at ``owner_expires_ms`` (None:
    gone, as after its incarnation was replaced and its item deleted)."""
    add_stream(store, pk, lease_owner="w2", owner_gen="gen-b", epoch=3, lease_expires_at_ms=5, last_seq=7)
    stop(store, pk)
    if owner_expires_ms is not None:
        store.tables[WORKERS]["w2"] = {"pk": "w2", "gen": "gen-b", "expires_at_ms": owner_expires_ms}


async def test_a_stopped_stream_whose_owner_died_is_drained_once_then_released() -> None:
    """At 9eab16e (and with ``drains`` off) nobody acquires it: what it emitted between its owner's last
    write and the STOP is never persisted (the stop-during-takeover regression)."""
    store = MemoryStore(config())
    orphan(store)
    async with running(store) as worker:
        await until(lambda: bool(consumer(worker).drained))
        await until(lambda: store.connection(PK).lease_owner == "")
        worker.reconciler.request_sweep()
        looks = len(history(worker).of("reconcile"))
        await until(lambda: len(history(worker).of("reconcile")) > looks)
    assert consumer(worker).drained == [(PK, worker.me.gen)] and consumer(worker).consumed == []
    drain = history(worker).of("lease.acquire", pk=PK, outcome="ok")
    assert [(e["via"], e["epoch"], e["gen"]) for e in drain] == [("drain", 4, worker.me.gen)]
    assert history(worker).of("lease.release", pk=PK, outcome="ok", reason="drained")
    item = store.connection(PK)
    assert (item.drained_epoch, item.epoch, item.lease_expires_at_ms, item.desired_state) == (4, 4, 0, STOPPED)


async def test_a_stop_of_a_stream_nobody_held_is_drained_once_marked() -> None:
    """STARTED, then STOPPED before anyone acquired it: the router's mark (``mark_undrained``) has a worker
    drain what it emitted in between; before this, nothing listed it and it was lost."""
    store = MemoryStore(config())
    add_stream(store, PK)  # no worker ran while it was STARTED
    stop(store, PK, at_ms=10)
    table = store.tables[CONNS]
    table[PK] = store_rules(store).mark_undrained(PK, 10).apply(table[PK])
    async with running(store) as worker:
        await until(lambda: bool(consumer(worker).drained) and PK not in worker.held)
    assert [e["via"] for e in history(worker).of("lease.acquire", pk=PK, outcome="ok")] == ["drain"]
    item = store.connection(PK)
    assert (item.lease_owner, item.lease_expires_at_ms, item.drained_epoch) == ("", 0, 1)


def assert_released_for_the_stop_then_drained(store: MemoryStore, worker: Worker) -> None:
    """The STOP's release carried the drain mark, then a drain read the rest and released the stream."""
    released = history(worker).of("lease.release", pk=PK, outcome="ok")
    assert [e["reason"] for e in released] == ["STOP", "drained"]
    item = store.connection(PK)
    assert (item.lease_owner, item.lease_expires_at_ms, item.drained_epoch) == ("", 0, 2)


async def test_a_stop_honoured_while_the_upstream_was_unreachable_leaves_the_stream_to_drain() -> None:
    """The owner cut off from the upstream (explore benchmark seed 1060's sibling 1063: a partition) still
    honours the STOP, but it read nothing the stream emitted meanwhile: released as done, that was lost.
    Released with the drain mark and announced, it is drained (here by the owner itself, reading again)."""
    async with holding() as (store, worker):
        worker.held[PK].reading = False  # its session dropped and has not come back
        stop(store, PK, at_ms=10)
        await until(lambda: bool(consumer(worker).drained) and PK not in worker.held)
    assert_released_for_the_stop_then_drained(store, worker)


async def test_a_stop_over_a_session_that_died_silently_leaves_the_stream_to_drain() -> None:
    """Explore seed 4239: a half-open connection (a proxy that stopped forwarding) kept the owner's session
    open while it delivered nothing.  Released as read through the STOP, what the stream emitted since the
    session died was drained by nobody.  Nothing delivered from past the STOP: released with the drain mark,
    and drained."""
    async with holding() as (store, worker):
        worker.held[PK].last_ts_ms = 5.0  # the last message delivered, long before the STOP
        stop(store, PK, at_ms=10)
        await until(lambda: bool(consumer(worker).drained) and PK not in worker.held)
    assert_released_for_the_stop_then_drained(store, worker)


async def test_a_stop_over_a_live_session_waits_for_a_message_past_its_reach_and_leaves_nothing_to_drain() -> None:
    """A live session delivers what the stream emits past the STOP's reach soon after the STOP: the holder
    waits for it, then releases as read through the STOP, with nothing left to drain."""
    async with holding() as (store, worker):
        held = worker.held[PK]
        held.last_ts_ms = 5.0
        at_ms = int(time.time() * 1000) + 60_000  # the router's clock ahead: the wait lasts until the message
        stop(store, PK, at_ms=at_ms)
        await until(lambda: held.dropping)  # waiting for a message past the STOP's reach
        assert not history(worker).of("lease.release", pk=PK)
        held.last_ts_ms = float(store_rules(store).stop_reach_ms(at_ms))
        held.delivered.set()
        await until(lambda: PK not in worker.held)
    released = history(worker).of("lease.release", pk=PK, outcome="ok")
    assert [e["reason"] for e in released] == ["STOP"]
    assert store.connection(PK).drained_epoch == held.lease.epoch  # released as read through: nothing owed
    assert not consumer(worker).drained


async def test_a_shutdown_ends_the_wait_for_a_message_past_the_stops_reach() -> None:
    """The wait holds up the handoff of every other stream (a shutdown finishes its chores first): a shutdown
    ends it, and the STOP's release carries the drain mark."""
    store = MemoryStore(config())
    add_stream(store, PK)
    async with asyncio.timeout(10):  # the wait alone would last past a minute
        async with running(store) as worker:
            await until(lambda: consuming(worker))
            held = worker.held[PK]
            held.last_ts_ms = 5.0
            stop(store, PK, at_ms=int(time.time() * 1000) + 60_000)
            await until(lambda: held.dropping)
    released = history(worker).of("lease.release", pk=PK, outcome="ok")
    assert [(e["reason"], e["behind"]) for e in released] == [("STOP", True)]


async def test_a_stop_whose_writes_did_not_finish_leaves_the_stream_to_drain() -> None:
    """The owner read up to the STOP, but its task did not end within a heartbeat of being stopped (writes
    still queued at a slow backend) and was cancelled: what it read may not all be stored, so it is
    released with the drain mark, not as drained, and drained."""
    async with holding() as (store, worker):
        consumer(worker).stuck.add(PK)
        stop(store, PK, at_ms=10)
        await until(lambda: bool(consumer(worker).drained) and PK not in worker.held)
    assert_released_for_the_stop_then_drained(store, worker)


async def test_a_stream_whose_task_did_not_end_is_not_taken_up_again_until_it_ends() -> None:
    """Explore seed 391: a stream given away whose consume task did not end within the wait was left to
    lapse, still listed as ours, and the same incarnation adopted it at the next epoch while the old task was
    still storing.  Now the stream is let go (its writes may no longer go out) and nothing acquires it again
    before that task ends; then it is adopted."""
    async with holding() as (store, worker):
        ending = consumer(worker).lingering[PK] = asyncio.Event()
        held = worker.held[PK]
        assert not await worker.drop(held, "rebalance", release=True)
        assert history(worker).of("lease.lost", pk=PK)[-1]["reason"] == "rebalance: its writes did not end"
        assert held.task is not None and not held.task.done() and not held.may_send()
        assert not await worker.adopt(PK)
        await worker.reconciler.sweep(Sweep(expired_before_ms=None, max_pages=None))
        assert PK not in worker.held and consumer(worker).consumed == [(PK, worker.me.gen)]
        assert store.connection(PK).epoch == 1
        ending.set()
        await until(lambda: held.task is not None and held.task.done())
        worker.reconciler.request_sweep()
        await until(lambda: PK in worker.held)
        assert consumer(worker).consumed == [(PK, worker.me.gen)] * 2 and store.connection(PK).epoch == 2


async def test_a_stopped_stream_whose_owner_lives_is_left_to_its_owner() -> None:
    store = MemoryStore(config())
    orphan(store, owner_expires_ms=10**13)
    async with running(store) as worker:
        worker.reconciler.request_sweep()
        await until(lambda: len(history(worker).of("reconcile")) >= 2)
    assert consumer(worker).drained == [] and store.connection(PK).lease_owner == "w2"


async def test_a_start_after_the_stop_makes_it_an_ordinary_stream_again() -> None:
    store = MemoryStore(config())
    orphan(store)
    table = store.tables[CONNS]
    table[PK] = store_rules(store).start_connection(PK, "ws://u/c1", 2).apply(table[PK])
    async with running(store) as worker:
        await until(lambda: bool(consumer(worker).consumed))
        assert not worker.held[PK].draining
    assert consumer(worker).drained == []


class UnfinishedDrains(RecordingConsumer):
    """A drain that reads until it is stopped, never reaching its end."""

    async def consume(self, held: HeldConnection) -> None:
        if not held.draining:
            return await super().consume(held)
        self.drained.append((held.pk, self.me.gen))
        held.reading = True
        await held.stopping.wait()


async def test_a_drain_cut_short_is_not_released_so_it_is_drained_again() -> None:
    """Released unfinished, the stream would be nobody's and never drained: left to lapse instead."""
    store = MemoryStore(config())
    orphan(store)
    async with running(store, consumer=UnfinishedDrains) as worker:
        await until(lambda: bool(consumer(worker).drained))
    assert history(worker).of("lease.lost", pk=PK, reason="shutdown: drain unfinished")
    assert store.connection(PK).lease_owner == "w1" and not history(worker).of("lease.release", pk=PK)


async def test_issue_10_a_second_stop_after_a_restart_is_not_lost_to_the_first() -> None:
    """STOP, START, STOP again (issue 10, I5).  The owner drops the stream on STOP1 and marks its mailbox entry
    handled; START and a re-acquire follow before the renewal that deletes that entry, and STOP2 posts to the
    same owner.  While an entry was the bare pk, STOP2's post was a no-op on the set and the deletion of
    STOP1's entry took STOP2 with it: the stream was consumed until teardown.  Now each entry names the lease
    it stops, so STOP1's deletion leaves STOP2's.  (STOP2's notification is assumed to reach another worker.)"""
    store = MemoryStore(config())
    add_stream(store, PK)
    renewals_allowed = asyncio.Event()
    renewals_allowed.set()

    async def hold_renewals(table: str, write: Write) -> None:
        if table == WORKERS:
            await renewals_allowed.wait()

    async def close_after_the_first_stop_is_read(table: str, write: Write) -> None:
        if table == WORKERS and (store.item(WORKERS, "w1") or {}).get("stop_requests"):
            renewals_allowed.clear()  # the next renewal (deleting STOP1's entry) waits for STOP2

    async with running(store) as worker:
        await until(lambda: consuming(worker))
        store.before_write, store.after_write = hold_renewals, close_after_the_first_stop_is_read
        stop(store, PK)
        await until(lambda: PK not in worker.held and not renewals_allowed.is_set())
        store.after_write = None
        store.tables[CONNS][PK] = store_rules(store).start_connection(PK, "ws://u/c1", 2).apply(store.tables[CONNS][PK])
        store.send(PK)
        await until(lambda: PK in worker.held and worker.held[PK].lease.epoch == 2)
        stop(store, PK)
        renewals_allowed.set()
        # dropped from ``held`` before its release is sent: wait for the release itself
        await until(lambda: len(history(worker).of("lease.release", reason="STOP")) > 1, timeout_s=2.0)
        assert [e["epoch"] for e in history(worker).of("lease.release", reason="STOP")] == [1, 2]
    assert store.connection(PK).desired_state == STOPPED


def start(store: MemoryStore, pk: str, at_ms: int = 2) -> None:
    """What the router writes for START (the notification is not sent)."""
    table = store.tables[CONNS]
    table[pk] = store_rules(store).start_connection(pk, f"ws://u/{pk}", at_ms).apply(table[pk])


def hold_writes(store: MemoryStore, table_name: str) -> asyncio.Event:
    """From now on every write to ``table_name`` waits (before it is applied) until the returned gate is set."""
    gate = asyncio.Event()

    async def held(table: str, write: Write) -> None:
        if table == table_name:
            await gate.wait()

    store.before_write = held
    return gate


def releases(worker: Worker) -> list[tuple[int, str]]:
    return [(e["epoch"], e["outcome"]) for e in history(worker).of("lease.release", pk=PK)]


@pytest.mark.parametrize("stopped_again", [False, True])
async def test_issue_10_stops_read_after_a_start_again(stopped_again: bool) -> None:
    """STOP, then START (and STOP again) before the owner reads its mailbox (the stop-start-stop
    regression).  Released on the first STOP, the stream was STARTED with nobody consuming it (the START's
    notification found it still held) and, STOPPED again, what it emitted in between was lost.  The release
    for a STOP now requires that STOP: refused, the owner acquires the stream again at a new epoch and
    consumes it.  Of two STOPs read together the latest is honoured, which the owner consumed up to."""
    async with holding() as (store, worker):
        mailbox_read = hold_writes(store, WORKERS)
        stop(store, PK, at_ms=10)
        start(store, PK, at_ms=20)
        if stopped_again:
            stop(store, PK, at_ms=30)
        mailbox_read.set()
        if stopped_again:
            await until(lambda: PK not in worker.held)
            assert releases(worker) == [(1, "ok")]
            item = store.connection(PK)
            assert (item.lease_owner, item.stopped_at_ms, item.epoch) == ("", 30, 1)
            return
        await until(lambda: PK in worker.held and worker.held[PK].lease.epoch == 2)
        assert not worker.held[PK].draining and releases(worker) == [(1, "fail")]
        assert history(worker).of("lease.acquire", pk=PK, outcome="ok", via="restarted", epoch=2)
        assert consumer(worker).consumed == [(PK, worker.me.gen)] * 2


async def test_issue_10_a_stop_superseded_during_its_release_is_drained_to_the_newer_stop() -> None:
    """START and STOP again while the release for the first STOP is on its way: the stream was STARTED after
    the owner stopped consuming, so the owner acquires it again and drains it up to the newer STOP."""
    async with holding() as (store, worker):
        release_sent = hold_writes(store, CONNS)
        stop(store, PK, at_ms=10)
        await until(lambda: PK not in worker.held)  # its release is waiting
        start(store, PK, at_ms=20)
        stop(store, PK, at_ms=30)
        release_sent.set()
        await until(lambda: bool(consumer(worker).drained) and PK not in worker.held)
        drain = history(worker).of("lease.acquire", pk=PK, outcome="ok", via="drain")
        assert [e["epoch"] for e in drain] == [2]
    item = store.connection(PK)
    assert (item.lease_owner, item.drained_epoch, item.stopped_at_ms) == ("", 2, 30)


@pytest.mark.parametrize("cause", ["upstream unreachable past budget", "shutdown"])
async def test_a_stop_landing_before_a_handoff_release_leaves_the_stream_to_drain(cause: str) -> None:
    """Explore seed 3231: the owner, cut off from the upstream, gave the stream up (or shut down) just after a
    STOP landed that it had not yet read from its mailbox.  Its plain release cleared the lease with no drain
    mark, and what the stream emitted between its last read and the STOP was stored by nobody.  A release
    that is not for a STOP holds only while the stream is STARTED; refused, it is repeated for the STOP found,
    with the drain mark, and the stream is drained."""
    async with holding() as (store, worker):
        held = worker.held[PK]
        held.reading = False  # its session dropped and has not come back
        table = store.tables[CONNS]
        table[PK] = store_rules(store).stop_connection(PK, 10).apply(table[PK])  # its mailbox is not read yet
        if cause == "shutdown":
            await worker.releases.hand_off([held], cause)
        else:
            await worker.give_up(held, cause)
        await until(lambda: bool(consumer(worker).drained) and PK not in worker.held)
    released = history(worker).of("lease.release", pk=PK)
    assert [(e["reason"], e["outcome"]) for e in released] == [(cause, "fail"), (cause, "ok"), ("drained", "ok")]
    item = store.connection(PK)
    assert (item.lease_owner, item.lease_expires_at_ms, item.drained_epoch, item.stopped_at_ms) == ("", 0, 2, 10)


async def test_a_shutdown_whose_releases_never_answer_ends_within_its_budget() -> None:
    """A store that stops answering the releases must not keep a stopping worker alive (it did, until the
    platform's SIGKILL): past the shutdown budget what was not released is left to lapse, and it retires."""
    async with holding() as (store, worker):
        never = asyncio.Event()

        async def unanswered(table: str, write: Write) -> None:
            if table == CONNS:
                await never.wait()

        store.before_write = unanswered
    assert [e["reason"] for e in history(worker).of("lease.lost", pk=PK)] == ["shutdown budget spent: left to lapse"]
    assert history(worker).of("worker.stop") and not history(worker).of("lease.release", pk=PK)
    assert store.item(CONNS, PK)["lease_owner"] == worker.me.worker_id  # to lapse at expiry
