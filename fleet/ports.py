"""What the worker depends on, as Protocols: the store it coordinates through and the consumer of a held
stream.  ``fleet.store.LeaseStore`` (DynamoDB, SQS, CloudWatch) and ``fleet.memstore.MemoryStore`` (tests)
implement ``WorkerStore``; ``fleet.connection.ConnectionRunner`` implements ``StreamConsumer``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

from fleet.connection import HeldConnection
from fleet.expr import Write
from fleet.lease import ConnectionRecord, Holder, WorkerRecord
from fleet.store import Notification


class RequestCounter(Protocol):
    """Cumulative counts of a process's AWS requests by purpose and of its error answers by code, its
    DynamoDB requests by operation and purpose and the units they are billed (``fleet.aws.AwsClients``); and
    the region gate's Route 53 ARC data-plane clients, (endpoint URL, client), none without a gate."""

    @property
    def requests(self) -> Mapping[str, int]: ...

    @property
    def errors(self) -> Mapping[str, int]: ...

    @property
    def operations(self) -> Mapping[str, int]: ...

    @property
    def units(self) -> Mapping[str, float]: ...

    @property
    def gate_clients(self) -> Sequence[tuple[str, Any]]: ...


class WorkerStore(Protocol):
    """The operations of ``fleet.store.LeaseStore`` a worker calls."""

    @property
    def aws(self) -> RequestCounter: ...

    async def execute(self, table: str, write: Write, purpose: str = "coordination") -> dict[str, Any]: ...

    async def get_connection(self, pk: str) -> ConnectionRecord | None: ...

    def started_connections(
        self, expired_before_ms: int | None = None, max_pages: int | None = None
    ) -> AsyncIterator[ConnectionRecord]: ...

    def unreleased_stopped_connections(self) -> AsyncIterator[ConnectionRecord]: ...

    async def workers(self) -> dict[str, WorkerRecord]: ...

    async def get_worker(self, worker_id: str) -> WorkerRecord | None: ...

    async def notify(self, handoffs: Sequence[tuple[str, int | None]]) -> None: ...

    async def receive_notifications(self, max_messages: int = 10, wait: bool = True) -> list[Notification]: ...

    async def delete_notifications(self, notifications: list[Notification]) -> None: ...

    async def return_notifications(self, notifications: list[Notification]) -> None: ...

    async def put_active_connections(self, count: int, worker_id: str) -> None: ...

    async def task_stopped(self, cluster: str, task_arn: str) -> int | None: ...

    def clock_skew_bounds(self) -> tuple[float, float] | None: ...


class StreamConsumer(Protocol):
    """Consumes one held stream until it is stopped, fenced or given up (``me``: the current incarnation)."""

    me: Holder

    async def consume(self, held: HeldConnection) -> None: ...
