"""An in-memory ``fleet.ports.WorkerStore``: tables of plain items on which ``fleet.expr.Write`` values are
applied by the pure interpreter, so every condition is the real one, with no AWS.

Every write suspends its caller once before it applies, as a request on the network does (a task cancelled
then loses it).  For tests: ``before_write`` can delay or fail a write before it applies, ``after_write``
delays its answer once it applied (a request cancelled then has landed anyway), ``lose_answer_for`` applies
a write then reports its outcome as unknown (counted as a ``Timeout`` error), ``freeze_index`` makes the
state index answer from a snapshot (a stale listing), ``skew`` is what ``clock_skew_bounds`` reports,
``returned`` lists notifications handed back, and ``stopped_tasks`` holds the tasks ECS would report
STOPPED, each with the stop time it would report (``task_stopped``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from fleet.config import FleetConfig
from fleet.deathnotice import DeathNotice
from fleet.errors import ConditionFailed, StoreUnavailable
from fleet.expr import Item, Write
from fleet.lease import STARTED, STOPPED, ConnectionRecord, WorkerRecord
from fleet.store import Notification


class Requests:
    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.operations: Counter[str] = Counter()  # no billing in memory
        self.units: dict[str, float] = {}
        self.gate_clients: list[tuple[str, Any]] = []  # no region gate in memory


class MemoryStore:
    def __init__(self, config: FleetConfig, notify_wait_s: float = 0.05) -> None:
        self.config = config
        self.aws = Requests()
        self.tables: dict[str, dict[str, Item]] = {
            config.connections_table: {}, config.workers_table: {}, config.messages_table: {}
        }
        self.queue: list[Notification] = []
        self.queue_changed = asyncio.Event()
        self.notify_wait_s = notify_wait_s
        self.skew: tuple[float, float] | None = (-5.0, 5.0)  # answers agree: the clocks are within 5 ms
        self.metrics: list[tuple[str, int]] = []  # ActiveConnections put: (worker id, count)
        self.before_write: Callable[[str, Write], Awaitable[None]] | None = None
        self.after_write: Callable[[str, Write], Awaitable[None]] | None = None
        self.returned: list[Notification] = []
        self.lose_answer_for: Callable[[str, Write], bool] = lambda table, write: False
        self.index_snapshot: list[ConnectionRecord] | None = None
        self.stopped_tasks: dict[str, int] = {}  # task ARN: when ECS says its process exited (Unix ms)
        self._receipts = 0

    # -- helpers for tests ---------------------------------------------------------------------------
    def item(self, table: str, pk: str) -> Item | None:
        return self.tables[table].get(pk)

    def connection(self, pk: str) -> ConnectionRecord:
        return ConnectionRecord.from_item(self.tables[self.config.connections_table][pk])

    def freeze_index(self) -> None:
        self.index_snapshot = list(self._listing())

    def _listing(self) -> list[ConnectionRecord]:
        items = self.tables[self.config.connections_table].values()
        return [ConnectionRecord.from_item(i) for i in items if i.get("desired_state") == STARTED]

    # -- WorkerStore ---------------------------------------------------------------------------------
    async def execute(self, table: str, write: Write, purpose: str = "coordination") -> dict[str, Any]:
        self.aws.requests[purpose] += 1
        await asyncio.sleep(0)  # a store's answer is never synchronous: the caller's task is suspended here
        if self.before_write is not None:
            await self.before_write(table, write)
        key = "#".join(str(v) for v in write.key.values())
        current = self.tables[table].get(key)
        if not write.allowed(current):
            raise ConditionFailed(f"{table}: condition not met")
        self.tables[table][key] = write.apply(current)
        answer = dict(self.tables[table][key])  # as the write left it (ALL_NEW)
        if self.after_write is not None:
            await self.after_write(table, write)
        if self.lose_answer_for(table, write):
            self.aws.errors["Timeout"] += 1
            raise StoreUnavailable(f"{table}: answer lost")
        return answer

    async def get_connection(self, pk: str) -> ConnectionRecord | None:
        self.aws.requests["coordination"] += 1
        item = self.tables[self.config.connections_table].get(pk)
        return ConnectionRecord.from_item(item) if item else None

    async def started_connections(
        self, expired_before_ms: int | None = None, max_pages: int | None = None
    ) -> AsyncIterator[ConnectionRecord]:
        self.aws.requests["coordination"] += 1
        listing = self.index_snapshot if self.index_snapshot is not None else self._listing()
        for record in listing:
            if expired_before_ms is None or record.lease_expires_at_ms < expired_before_ms:
                yield record

    async def unreleased_stopped_connections(self) -> AsyncIterator[ConnectionRecord]:
        self.aws.requests["coordination"] += 1
        for item in list(self.tables[self.config.connections_table].values()):
            if item.get("desired_state") == STOPPED and int(item.get("lease_expires_at_ms", 0)) > 0:
                yield ConnectionRecord.from_item(item)

    async def workers(self) -> dict[str, WorkerRecord]:
        self.aws.requests["coordination"] += 1
        return {pk: WorkerRecord.from_item(i) for pk, i in self.tables[self.config.workers_table].items()}

    async def get_worker(self, worker_id: str) -> WorkerRecord | None:
        self.aws.requests["coordination"] += 1
        item = self.tables[self.config.workers_table].get(worker_id)
        return WorkerRecord.from_item(item) if item else None

    async def notify(self, handoffs: Sequence[tuple[str, int | None]]) -> None:
        for pk, epoch in handoffs:
            self.send(pk, epoch)

    def send(self, pk: str, released_epoch: int | None = None, death: DeathNotice | None = None) -> None:
        self._receipts += 1
        self.queue.append(Notification(pk=pk, receipt=str(self._receipts), released_epoch=released_epoch,
                                       death=death))
        self.queue_changed.set()

    async def receive_notifications(self, max_messages: int = 10, wait: bool = True) -> list[Notification]:
        if not self.queue and not wait:
            return []
        if not self.queue:
            self.queue_changed.clear()
            try:
                await asyncio.wait_for(self.queue_changed.wait(), self.notify_wait_s)
            except TimeoutError:
                return []
        taken, self.queue = self.queue[:max_messages], self.queue[max_messages:]
        return taken

    async def delete_notifications(self, notifications: list[Notification]) -> None:
        return None  # received notifications are already off the queue

    async def return_notifications(self, notifications: list[Notification]) -> None:
        self.returned.extend(notifications)
        self.queue.extend(notifications)
        if notifications:
            self.queue_changed.set()

    async def put_active_connections(self, count: int, worker_id: str) -> None:
        self.metrics.append((worker_id, count))

    def clock_skew_bounds(self) -> tuple[float, float] | None:
        return self.skew

    async def task_stopped(self, cluster: str, task_arn: str) -> int | None:
        self.aws.requests["ecs"] += 1
        return self.stopped_tasks.get(task_arn)
