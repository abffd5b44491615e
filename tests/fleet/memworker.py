"""The real ``fleet.worker.Worker`` on a ``fleet.memstore.MemoryStore``: no AWS, no upstream.  A
``RecordingConsumer`` stands in for the upstream session (it records which incarnation consumed which stream
and waits to be stopped), and ``Recorder`` keeps every history event in memory.  Workers read time through a
``fleet.clock.LoopClock``: a test marked ``looptime`` runs them on virtual time, waiting for nothing real."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from fleet.clock import LoopClock
from fleet.config import FleetConfig
from fleet.connection import HeldConnection
from fleet.history import HistoryWriter
from fleet.lease import Holder
from fleet.memstore import MemoryStore
from fleet.profiles import profile_for
from fleet.worker import Worker

# lease 1 s, heartbeat 250 ms, request timeout 150 ms, fencing margin 100 ms, tolerance 50 ms
TIMESCALE = 0.05


def config(profile: str = "hardened", worker_id: str = "w1", **changes: Any) -> FleetConfig:
    return FleetConfig(profile=profile, worker_id=worker_id, timescale=TIMESCALE, **changes)  # type: ignore[arg-type]


class Recorder(HistoryWriter):
    def __init__(self, src: str) -> None:
        super().__init__(None, src)
        self.events: list[dict[str, Any]] = []

    def emit(self, type: str, **fields: Any) -> dict[str, Any]:
        event = super().emit(type, **fields)
        self.events.append(event)
        return event

    def of(self, type: str, **match: Any) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == type and all(e.get(k) == v for k, v in match.items())]


class RecordingConsumer:
    """Records each take-up: a stream consumed until stopped (``consumed``), or a drain (``drained``), which
    finds nothing left to read and ends at once as ``fleet.connection.ConnectionRunner`` ends one."""

    def __init__(self, worker: Worker) -> None:
        self.me: Holder = worker.me
        self.worker = worker
        self.consumed: list[tuple[str, str]] = []  # (pk, gen)
        self.drained: list[tuple[str, str]] = []  # (pk, gen)
        self.stuck: set[str] = set()  # pks whose task outlives the stop until cancelled, then writes once more
        # pks whose task outlives the stop and its cancel, until the test sets the event (a cancelled task
        # still storing its backlog)
        self.lingering: dict[str, asyncio.Event] = {}

    async def consume(self, held: HeldConnection) -> None:
        if held.draining:
            self.drained.append((held.pk, self.me.gen))
            held.drained = True
            await self.worker.give_up(held, "drained")
            return
        self.consumed.append((held.pk, self.me.gen))
        held.reading = True
        held.last_ts_ms = float("inf")  # it reads everything the stream emits, up to any STOP
        await held.stopping.wait()
        linger = self.lingering.pop(held.pk, None)
        if linger is not None:
            try:
                await asyncio.Event().wait()
            finally:
                await linger.wait()
        if held.pk in self.stuck:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                # its last write was already on its way: it reaches the store as the task ends
                rules = profile_for(self.worker.config).rules
                write = rules.message(held.lease, self.me, held.last_seq + 1, "late", 0)
                await self.worker.store.execute(self.worker.config.messages_table, write, purpose="messages")
                raise


def add_stream(store: MemoryStore, pk: str, **fields: Any) -> None:
    rules = profile_for(store.config).rules
    item = rules.start_connection(pk, f"ws://u/{pk}", 0).apply(None)
    store.tables[store.config.connections_table][pk] = {**item, **fields}


async def until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait for ``predicate`` to hold (checked each 5 ms), failing the test after ``timeout_s``."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.005)  # a poll of the condition waited for, not a wait for time to pass


@contextlib.asynccontextmanager
async def running(store: MemoryStore, cfg: FleetConfig | None = None,
                  consumer: type[RecordingConsumer] = RecordingConsumer) -> AsyncIterator[Worker]:
    """A worker running on ``store`` until the block ends (then a graceful shutdown, awaited)."""
    history = Recorder((cfg or store.config).worker_id)
    worker = Worker(cfg or store.config, store, history, consumer, clock=LoopClock())
    task = asyncio.create_task(worker.run())
    try:
        await until(lambda: worker.liveness.registered or task.done())
        yield worker
    finally:
        worker.stopping.set()
        await asyncio.wait_for(task, 10)


def consumer(worker: Worker) -> RecordingConsumer:
    assert isinstance(worker.consumer, RecordingConsumer)
    return worker.consumer


def history(worker: Worker) -> Recorder:
    assert isinstance(worker.history, Recorder)
    return worker.history
