"""What the worker and its loops depend on, as Protocols.

The worker's own ports: the store it coordinates through and the consumer of a held stream
(``fleet.store.AwsAdapter`` and ``fleet.memstore.MemoryStore`` implement ``WorkerStore``;
``fleet.connection.ConnectionRunner`` implements ``StreamConsumer``).

The loops' ports: each loop or interpreter module (``fleet.liveness``, ``fleet.reconcile``, ``fleet.notices``,
``fleet.release``, ``fleet.stream_driver``) is handed the incarnation it serves as one of the Protocols below,
naming only what that module reads or asks of it; ``fleet.worker.Worker`` implements them all.  No loop
imports ``Worker``."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

from fleet.balance import Gift
from fleet.claims import ClaimSlots
from fleet.clock import Clock
from fleet.config import FleetConfig
from fleet.connection import Fence, HeldConnection
from fleet.deathnotice import DeathNotice
from fleet.expr import Write
from fleet.history import HistoryWriter
from fleet.lease import ConnectionRecord, Holder, Rules, StopRequest, WorkerRecord
from fleet.profiles import Profile
from fleet.region_gate import RegionGate
from fleet.store import Notification
from fleet.task_set import ConsumeTasks, TaskSet


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
    """The operations of ``fleet.store.AwsAdapter`` a worker calls."""

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


class Sweeps(Protocol):
    """Asks the reconcile loop for a sweep now (``fleet.reconcile.Reconciler``), and says what the last
    sweep found to take (None: none has run yet)."""

    def request_sweep(self) -> None: ...

    @property
    def last_found(self) -> int | None: ...


class Registration(Protocol):
    """Whether the current incarnation is registered (``fleet.liveness.Liveness``)."""

    @property
    def registered(self) -> bool: ...


class Gifting(Protocol):
    """Gives streams to idler workers (``fleet.release.Releases``)."""

    async def give_away(self, gifts: list[Gift]) -> None: ...


class DeathJudge(Protocol):
    """Verifies and acts on one death notice (``fleet.deathnotice.DeathNotices``)."""

    async def on_notice(self, notice: DeathNotice) -> bool: ...


class Incarnation(Protocol):
    """What every loop reads of the incarnation it serves: its settings, store, clock and profile, the
    held-stream table, the stop signal, and its history."""

    @property
    def config(self) -> FleetConfig: ...

    @property
    def store(self) -> WorkerStore: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def profile(self) -> Profile: ...

    @property
    def rules(self) -> Rules: ...

    @property
    def me(self) -> Holder: ...

    @property
    def held(self) -> dict[str, HeldConnection]: ...

    @property
    def stopping(self) -> asyncio.Event: ...

    def emit(self, type: str, **fields: Any) -> None: ...

    async def pause(self, seconds: float) -> None: ...


class Dropping(Protocol):
    """Stops consuming a held stream and, with ``release``, gives its lease back (``fleet.worker.Worker.drop``);
    or at once, releasing nothing (``lose``)."""

    async def drop(self, held: HeldConnection, reason: str, release: bool,
                   stopped_at_ms: int | None = None) -> bool: ...

    def lose(self, held: HeldConnection, reason: str) -> None: ...


class Claiming(Protocol):
    """Takes streams up: the acquires in flight, the claim task sets and their slots."""

    @property
    def acquiring(self) -> set[str]: ...

    @property
    def claims(self) -> TaskSet: ...

    @property
    def chores(self) -> TaskSet: ...

    @property
    def claim_slots(self) -> ClaimSlots: ...

    async def try_acquire(self, pk: str, via: str, seen: ConnectionRecord | None = None) -> bool: ...

    async def adopt(self, pk: str, via: str = "adopted") -> bool: ...


class StopHonouring(Protocol):
    """Honours a STOP for a held stream (``fleet.worker.Worker.honour_stop``)."""

    async def honour_stop(self, pk: str, stopped_at_ms: int | None = None) -> None: ...


class ReleaseHost(Incarnation, Dropping, Protocol):
    """What ``fleet.release.Releases`` uses."""


class ReconcileHost(Incarnation, Claiming, Protocol):
    """What ``fleet.reconcile.Reconciler`` uses."""

    @property
    def rng(self) -> random.Random: ...

    @property
    def closing(self) -> bool: ...

    @property
    def liveness(self) -> Registration: ...

    @property
    def releases(self) -> Gifting: ...

    def capacity(self) -> int: ...


class NoticeHost(Incarnation, Claiming, Dropping, StopHonouring, Protocol):
    """What ``fleet.notices.Notices`` uses."""

    def stop_pending(self, request: StopRequest) -> None: ...

    @property
    def reconciler(self) -> Sweeps: ...

    @property
    def death_notices(self) -> DeathJudge: ...

    def able_to_claim(self) -> bool: ...


class LivenessHost(Incarnation, Claiming, Dropping, StopHonouring, Protocol):
    """What ``fleet.liveness.Liveness`` uses: it also starts each new incarnation (``me``, its ``fence``) and
    hands on the STOPs seen while an acquire is in flight (``stop_pending``)."""

    me: Holder
    fence: Fence

    def stop_pending(self, request: StopRequest) -> None: ...

    @property
    def consumer(self) -> StreamConsumer: ...

    @property
    def gate(self) -> RegionGate: ...

    @property
    def reconciler(self) -> Sweeps: ...

    @property
    def rng(self) -> random.Random: ...

    async def end_for_stop(self, held: HeldConnection, reason: str, stopped_at_ms: int | None) -> None: ...


class DriverHost(Incarnation, Protocol):
    """What ``fleet.stream_driver.StreamDriver`` uses: the history, the current incarnation's fence, the
    streams being acquired, each stream's consume task and the consumer that runs it, and whether the worker
    is shutting down."""

    @property
    def history(self) -> HistoryWriter: ...

    @property
    def fence(self) -> Fence: ...

    @property
    def acquiring(self) -> set[str]: ...

    @property
    def tasks(self) -> ConsumeTasks: ...

    @property
    def consumer(self) -> StreamConsumer: ...

    @property
    def closing(self) -> bool: ...
