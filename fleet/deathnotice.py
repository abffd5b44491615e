"""Death notices: ECS says a task has stopped, so the worker incarnation it ran has exited and can never
write again; its streams are taken at once instead of when its lease lapses.

A notice is the EventBridge event ``ECS Task State Change`` of a task whose process exited (the task
STOPPED, or its containers STOPPED while the task deprovisions), delivered to the workers' queue (terraform:
an EventBridge rule; locally the harness's supervisor sends the same events when a worker process exits).
Nothing in a queue message is trusted: before acting, the receiver asks ECS itself (``DescribeTasks``,
through the store) whether the task's process has exited, and when (``executionStoppedAt``, else
``stoppedAt``).  A forged, wrong or early notice (the task RUNNING, unknown to ECS, or STOPPED with no stop
time) changes nothing.  Nor is ECS's answer alone enough: an incarnation that renewed after the stop time
ECS reports is alive, whatever ECS says (the pinned moto, for one, moved a running task a step toward
STOPPED on every DescribeTasks), and is left alone.  Confirmed, every incarnation registered with that
task (``task_arn`` in its worker item) is buried: its item expires now (``fleet.lease.HardenedRules.bury``,
conditioned on its generation, its task and no renewal since the stop), so its streams are claimable
(the owner can never renew) and the receiver sweeps at once.  A late notice for a worker id registered
since by a new incarnation touches only the dead one.  A paused or partitioned worker's task is RUNNING:
no notice, and its streams wait for its lease to lapse, as before.

If the store cannot answer (ECS or DynamoDB down) the notice goes back to the queue; a profile without
worker liveness (``blog``) has nothing to bury and drops it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import aiohttp

from fleet.clock import Clock
from fleet.errors import ConditionFailed, StoreError
from fleet.expr import Write
from fleet.lease import Rules, WorkerRecord
from fleet.logline import log

TASK_STATE_CHANGE = "ECS Task State Change"
STOPPED = "STOPPED"
METADATA_URI = "ECS_CONTAINER_METADATA_URI_V4"  # set by ECS in every container


async def task_arn_from_metadata(environ: Mapping[str, str] = os.environ, timeout_s: float = 2.0) -> str:
    """On ECS, the ARN of the task running this process, from the task metadata endpoint; elsewhere, or if
    the endpoint does not answer (then logged), "": the worker runs, and death notices cannot name it."""
    base = environ.get(METADATA_URI)
    if not base:
        return ""
    try:
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(f"{base}/task") as response:
            task = await response.json(content_type=None)
        return str(task["TaskARN"])
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as exc:
        log("task_metadata.error", error=f"{type(exc).__name__}: {exc}")
        return ""


def _exited(task: Mapping[str, Any]) -> bool:
    """Whether an ECS task (an event's ``detail``, or a DescribeTasks entry) says its process has exited:
    the task is STOPPED, or every container of it is (Fargate reports the container STOPPED at once, then
    the task STOPPING, DEPROVISIONING and, often tens of seconds later, STOPPED; each is an event)."""
    if task.get("lastStatus") == STOPPED:
        return True
    containers = task.get("containers")
    return (isinstance(containers, list) and bool(containers)
            and all(isinstance(c, Mapping) and c.get("lastStatus") == STOPPED for c in containers))


@dataclass(frozen=True)
class DeathNotice:
    """A task of ``cluster`` whose process exited (``reason``: ECS's ``stoppedReason``)."""

    task_arn: str
    cluster: str
    reason: str = ""

    def event(self, task_status: str = STOPPED, exit_code: int | None = None) -> dict[str, Any]:
        """The EventBridge event that says so (the body a notice arrives with): the task at ``task_status``,
        its container STOPPED with ``exit_code``."""
        container: dict[str, Any] = {"name": "worker", "lastStatus": STOPPED}
        if exit_code is not None:
            container["exitCode"] = exit_code
        return {
            "version": "0",
            "source": "aws.ecs",
            "detail-type": TASK_STATE_CHANGE,
            "detail": {"taskArn": self.task_arn, "clusterArn": self.cluster, "lastStatus": task_status,
                       "desiredStatus": STOPPED, "stoppedReason": self.reason, "containers": [container]},
        }


def parse_death_notice(body: Mapping[str, Any]) -> DeathNotice | None:
    """The notice an ECS task state change event carries: None unless its process exited and it is named."""
    detail = body.get("detail")
    if body.get("detail-type") != TASK_STATE_CHANGE or not isinstance(detail, Mapping) or not _exited(detail):
        return None
    arn, cluster = detail.get("taskArn"), detail.get("clusterArn")
    if not isinstance(arn, str) or not isinstance(cluster, str) or not arn or not cluster:
        return None
    return DeathNotice(arn, cluster, str(detail.get("stoppedReason", "")))


def stopped_at_in(described: Mapping[str, Any], task_arn: str) -> int | None:
    """When a DescribeTasks answer says the process of ``task_arn`` exited (Unix ms): its
    ``executionStoppedAt`` (its containers stopped), else its ``stoppedAt``.  None while it runs, when ECS
    does not know it, or when it says the task stopped without saying when (nothing to hold renewals to)."""
    for task in described.get("tasks", []):
        if isinstance(task, Mapping) and task.get("taskArn") == task_arn and _exited(task):
            for field in ("executionStoppedAt", "stoppedAt"):
                stopped_at = _unix_ms(task.get(field))
                if stopped_at is not None:
                    return stopped_at
    return None


def _unix_ms(value: object) -> int | None:
    """A timestamp as the SDK parses it (an aware ``datetime``), or as JSON carries it (Unix seconds)."""
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value * 1000)
    return None


class BurialStore(Protocol):
    """The store operations a burial uses (``fleet.store.AwsAdapter``, ``fleet.memstore.MemoryStore``)."""

    async def task_stopped(self, cluster: str, task_arn: str) -> int | None: ...

    async def workers(self) -> dict[str, WorkerRecord]: ...

    async def execute(self, table: str, write: Write, purpose: str = "coordination") -> dict[str, Any]: ...


class DeathNotices:
    """Buries the incarnations a confirmed notice names, through ``store`` by ``rules`` on ``clock``'s wall
    time, into ``workers_table``; ``emit`` records each notice's outcome and ``on_burial`` is called after a
    burial (a sweep takes the dead's streams).  Nothing is buried where ``buries`` is False."""

    def __init__(self, store: BurialStore, rules: Rules, clock: Clock, workers_table: str, buries: bool,
                 emit: Callable[..., None], on_burial: Callable[[], None]) -> None:
        self.store = store
        self.rules = rules
        self.clock = clock
        self.workers_table = workers_table
        self.buries = buries
        self.emit = emit
        self.on_burial = on_burial

    async def on_notice(self, notice: DeathNotice) -> bool:
        """Verify and act on one notice; False when it could not be settled (it goes back to the queue)."""
        if not self.buries:
            return True
        try:
            stopped_at = await self.store.task_stopped(notice.cluster, notice.task_arn)
            registered = {} if stopped_at is None else await self.store.workers()
        except StoreError as exc:
            log("death_notice.error", task=notice.task_arn, error=str(exc))
            return False
        buried: list[str] = []
        now = self.clock.now_ms()
        for record in registered.values():
            if record.task_arn != notice.task_arn or self.rules.dead(record, now):
                continue  # not that task's, or dead already (buried by an earlier notice of the same exit)
            assert stopped_at is not None  # (nothing was read otherwise)
            write = self.rules.bury(record, stopped_at)
            if write is None:
                continue
            try:
                await self.store.execute(self.workers_table, write)
            except ConditionFailed:
                continue  # replaced, renewed since the stop (alive, whatever ECS says), or buried by another receiver
            except StoreError as exc:
                log("death_notice.error", task=notice.task_arn, error=str(exc))
                return False
            buried.append(f"{record.worker_id}@{record.gen}")
        self.emit("death.notice", task=notice.task_arn, outcome="refuted" if stopped_at is None else "confirmed",
                  stopped_at_ms=stopped_at, buried=buried, reason=notice.reason[:200])
        log("death_notice", task=notice.task_arn, stopped_at_ms=stopped_at, buried=buried)
        if buried:
            self.on_burial()
        return True
