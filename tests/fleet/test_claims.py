"""Claiming in parallel (``fleet.claims``, ``fleet.notices``): a burst of notifications is acted on with at
most ``claims_in_flight`` acquires at once, one at a time per stream, and handshakes are paced."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest

from fleet.claims import HANDSHAKE_JITTER, ClaimSlots, HandshakePacer
from fleet.config import FleetConfig, tuning
from fleet.errors import ConfigError, StoreUnavailable
from fleet.expr import Write
from fleet.memstore import MemoryStore
from fleet.notices import SweepAsks
from fleet.store import Notification
from tests.fleet.memworker import add_stream, config, consumer, history, running, until

pytestmark = pytest.mark.looptime

NO_SWEEP = {"reconcile_ms": 600_000}
PK = "CONN#c1"  # no sweep but the first one (hardened) while a test runs


class GatedStore(MemoryStore):
    """Holds every acquire (a write to the connections table; so is a release) until ``gate`` opens, recording
    how many are in flight at once, overall and per stream; ``full`` is set once ``expected`` are held."""

    def __init__(self, cfg: FleetConfig, expected: int) -> None:
        super().__init__(cfg)
        self.gate = asyncio.Event()
        self.full = asyncio.Event()
        self.expected = expected
        self.in_flight: list[str] = []
        self.most_in_flight = 0
        self.overlapping: list[str] = []  # a pk acquired while an acquire of it was in flight
        self.acquires: list[str] = []
        self.before_write = self._hold

    async def _hold(self, table: str, write: Write) -> None:
        if table != self.config.connections_table:
            return
        pk = str(write.key["pk"])
        if pk in self.in_flight:
            self.overlapping.append(pk)
        self.in_flight.append(pk)
        self.acquires.append(pk)
        self.most_in_flight = max(self.most_in_flight, len(self.in_flight))
        if len(self.in_flight) >= self.expected:
            self.full.set()
        try:
            await self.gate.wait()
        finally:
            self.in_flight.remove(pk)


@pytest.mark.parametrize("profile", ["hardened", "blog"])
async def test_n_notifications_lead_to_n_acquires_with_at_most_k_in_flight(profile: str) -> None:
    n, k = 40, 6
    cfg = config(profile, claims_in_flight=k, notify_pollers=3, **NO_SWEEP)
    store = GatedStore(cfg, expected=k)
    async with running(store) as worker:
        await until(lambda: bool(history(worker).of("reconcile")) or profile == "blog")
        pks = [f"CONN#c{i}" for i in range(n)]
        for pk in pks:
            add_stream(store, pk)
            store.send(pk)
        await store.full.wait()  # k acquires wait at the gate: the pollers received no more than they had room for
        assert len(store.in_flight) == k
        store.gate.set()
        await until(lambda: len(consumer(worker).consumed) == n)
        assert sorted(pk for pk, _ in consumer(worker).consumed) == sorted(pks)
        assert sorted(store.acquires) == sorted(pks)  # one acquire each
    assert store.most_in_flight == k
    assert worker.claim_slots.most_used <= k
    assert {e["via"] for e in history(worker).of("lease.acquire", outcome="ok")} == {"notify"}


class PollCountingStore(MemoryStore):
    """Counts the receives waiting at once, and the short polls."""

    def __init__(self, cfg: FleetConfig) -> None:
        super().__init__(cfg)
        self.waiting = self.most_waiting = self.long_polls = self.short_polls = 0

    async def receive_notifications(self, max_messages: int = 10, wait: bool = True) -> list[Notification]:
        self.long_polls += wait
        self.short_polls += not wait
        self.waiting += 1
        self.most_waiting = max(self.most_waiting, self.waiting)
        try:
            return await super().receive_notifications(max_messages, wait)
        finally:
            self.waiting -= 1


async def test_an_idle_worker_keeps_one_long_poll_and_helpers_join_a_backlog() -> None:
    """Idle, one poll waits at a time (the helpers wait for a backlog, not on the queue); a burst brings the
    helpers' short polls in."""
    store = PollCountingStore(config(notify_pollers=4, **NO_SWEEP))
    async with running(store) as worker:
        await until(lambda: store.long_polls >= 5)
        assert store.most_waiting == 1 and store.short_polls == 0
        for i in range(30):
            add_stream(store, f"CONN#c{i}")
            store.send(f"CONN#c{i}")
        await until(lambda: len(consumer(worker).consumed) == 30)
    assert store.short_polls > 0


async def test_notifications_of_one_stream_are_acted_on_one_at_a_time() -> None:
    """Copies of one stream's notification received together never race into two acquires: the second waits
    for the first, then finds the stream held."""
    cfg = config(claims_in_flight=8, notify_pollers=2, **NO_SWEEP)
    store = GatedStore(cfg, expected=1)
    pk = "CONN#dup"
    async with running(store) as worker:
        await until(lambda: bool(history(worker).of("reconcile")))
        add_stream(store, pk)
        for _ in range(5):
            store.send(pk)
        await store.full.wait()
        store.gate.set()
        # all received, none being acted on (a poller waiting in a long poll holds the slot of its one message)
        await until(lambda: not store.queue and worker.claim_slots.used <= cfg.notify_pollers)
        assert consumer(worker).consumed == [(pk, worker.me.gen)]
        assert store.acquires == [pk]  # (the release at shutdown is a write too)
    assert store.overlapping == []


class SlowQueueStore(MemoryStore):
    """A queue that answers ``receives`` receives, then none until ``tap`` is set (moto's receive takes
    longer the more is queued: here, forever)."""

    def __init__(self, cfg: FleetConfig, receives: int) -> None:
        super().__init__(cfg)
        self.receives_left = receives
        self.tap = asyncio.Event()

    async def receive_notifications(self, max_messages: int = 10, wait: bool = True) -> list[Notification]:
        if self.receives_left == 0:
            await self.tap.wait()
        self.receives_left -= 1
        return await super().receive_notifications(max_messages, wait)


async def test_a_queue_found_behind_asks_for_a_sweep_that_claims_what_it_names() -> None:
    """A short poll that gets all it asked for asks the reconcile for a sweep, which claims the streams whose
    notifications the queue has not handed out yet; those are then found held, and nothing is acquired twice."""
    n = 30
    store = SlowQueueStore(config(claims_in_flight=4, notify_pollers=1, **NO_SWEEP), receives=3)
    async with running(store) as worker:
        await until(lambda: bool(history(worker).of("reconcile")))
        pks = [f"CONN#c{i}" for i in range(n)]
        for pk in pks:
            add_stream(store, pk)
            store.send(pk)
        await until(lambda: len(consumer(worker).consumed) == n)  # the queue handed out a few of them
        swept = len(history(worker).of("lease.acquire", outcome="ok", via="reconcile"))
        assert swept + len(history(worker).of("lease.acquire", outcome="ok", via="notify")) == n
        assert swept >= n // 2
        store.tap.set()
        await until(lambda: not store.queue and worker.claim_slots.used <= 1)
        assert sorted(pk for pk, _ in consumer(worker).consumed) == sorted(pks)
        assert len(history(worker).of("lease.acquire", outcome="ok")) == n


class FailingQueueStore(MemoryStore):
    """A queue whose every receive fails (as moto's does at times under concurrent receives: HTTP 500)."""

    async def receive_notifications(self, max_messages: int = 10, wait: bool = True) -> list[Notification]:
        await asyncio.sleep(0)  # a request's await (the loop runs the others), not a wait for anything
        raise StoreUnavailable("receive notifications: 500")


async def test_a_queue_that_cannot_be_read_asks_for_a_sweep() -> None:
    store = FailingQueueStore(config(**NO_SWEEP))
    async with running(store) as worker:
        await until(lambda: bool(history(worker).of("reconcile")))
        add_stream(store, PK)
        store.send(PK)
        await until(lambda: [pk for pk, _ in consumer(worker).consumed] == [PK])
    assert [e["via"] for e in history(worker).of("lease.acquire", outcome="ok")] == ["reconcile"]


async def test_a_reservation_waits_for_a_free_slot_and_takes_what_is_left() -> None:
    slots = ClaimSlots(4)
    assert await slots.reserve(10) == 4
    waiting = asyncio.create_task(slots.reserve(10))
    await asyncio.sleep(0)  # one turn of the loop: the reservation has had its chance and still waits
    assert not waiting.done()
    slots.release(3)
    assert await waiting == 3
    assert slots.used == 4 and slots.most_used == 4


def test_handshakes_are_paced_at_the_rate_with_jitter() -> None:
    now = [100.0]
    pacer = HandshakePacer(500.0, random.Random(7), clock=lambda: now[0])
    delays = [pacer.slot() for _ in range(1000)]
    assert delays[0] == 0.0
    assert delays == sorted(delays)
    gaps = [b - a for a, b in itertools.pairwise(delays)]
    low, high = (share / 500.0 for share in HANDSHAKE_JITTER)
    assert all(low - 1e-12 <= g <= high + 1e-12 for g in gaps)
    assert len(set(round(g, 9) for g in gaps)) > 100  # jittered, not a fixed step
    assert 1.8 < delays[-1] < 2.2  # 1,000 handshakes at 500 a second: about 2 s
    now[0] += 10.0  # a quiet spell: the next handshake goes at once
    assert pacer.slot() == 0.0


def test_the_claim_settings_are_tunable_and_checked() -> None:
    assert tuning({"WSFLEET_CLAIMS_IN_FLIGHT": "128"}, ["notify_pollers=8", "handshake_rate=250"]) == {
        "claims_in_flight": 128, "notify_pollers": 8, "handshake_rate": 250.0}
    for bad in ({"claims_in_flight": 0}, {"notify_pollers": 0}, {"handshake_rate": 0.0}):
        with pytest.raises(ConfigError):
            FleetConfig(**bad)  # type: ignore[arg-type]


class CountedFailingQueueStore(FailingQueueStore):
    """A queue whose every receive fails, counting them."""

    def __init__(self, cfg: FleetConfig) -> None:
        super().__init__(cfg)
        self.receives = 0

    async def receive_notifications(self, max_messages: int = 10, wait: bool = True) -> list[Notification]:
        self.receives += 1
        return await super().receive_notifications(max_messages, wait)


async def test_a_queue_that_keeps_failing_asks_for_sweeps_ever_less_often() -> None:
    """20 receives failing in a row (one a heartbeat) ask for 5 sweeps (after failures 1, 2, 4, 8 and 16), not
    one each: a worker whose queue timed out for minutes listed the state index every heartbeat."""
    store = CountedFailingQueueStore(config(**NO_SWEEP))
    async with running(store) as worker:
        await until(lambda: store.receives >= 20, timeout_s=60 * store.config.heartbeat_s)
        sweeps = len(history(worker).of("reconcile"))
    assert sweeps <= 1 + 5, sweeps  # the first look's sweep (hardened), then the ones asked for


def test_receives_failing_in_a_row_space_the_sweeps_they_ask_for_up_to_the_reconcile_interval() -> None:
    """Half a heartbeat of 5 s, reconcile interval 30 s, a receive failing every 15 s: the spacing goes 5, 10,
    20, then 30 s (the ceiling); an answered receive brings it back to half a heartbeat."""
    asks = SweepAsks(base_s=5.0, ceiling_s=30.0)
    assert [t for t in range(0, 150, 15) if asks.failed(float(t))] == [0, 15, 45, 75, 105, 135]
    asks.answered()
    assert asks.ask(140.0)  # a full short poll, 5 s after the last ask
    assert not asks.ask(144.0)
    assert asks.failed(145.0)  # the first failure after an answer: half a heartbeat again


def test_sweeps_asked_for_a_queue_found_behind_keep_half_a_heartbeat_apart_while_they_find_streams() -> None:
    asks = SweepAsks(base_s=5.0, ceiling_s=30.0)
    assert [t for t in range(0, 20) if asks.behind(float(t), None if t < 5 else 2)] == [0, 5, 10, 15]


def test_a_queue_behind_whose_sweeps_find_nothing_to_take_asks_for_them_ever_less_often() -> None:
    """Every short poll comes back full but names streams already held (a queue delivering its messages
    again): each sweep finds nothing, so the spacing goes 10, 20, then 30 s (the ceiling); a sweep that finds
    a stream brings it back to half a heartbeat.  A worker holding 5,000 streams listed them all every 2.7 s."""
    asks = SweepAsks(base_s=5.0, ceiling_s=30.0)
    assert [t for t in range(0, 130) if asks.behind(float(t), 0)] == [0, 10, 30, 60, 90, 120]
    assert asks.behind(125.0, 3) and asks.behind(130.0, 1) and not asks.behind(134.0, 1)


def test_a_reconcile_interval_shorter_than_half_a_heartbeat_leaves_the_spacing_at_half_a_heartbeat() -> None:
    asks = SweepAsks(base_s=5.0, ceiling_s=2.0)
    assert [t for t in range(0, 40, 5) if asks.failed(float(t))] == [0, 5, 10, 15, 20, 25, 30, 35]
