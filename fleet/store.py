"""The fleet's AWS adapter: executes lease decisions (``fleet.expr.Write``) as DynamoDB conditional
writes, puts and reads the items of each stream's fenced message log (``fleet.batch_log``: one conditional
PutItem per batch or takeover mark, on every backend), reads connections and workers, and sends and
receives notifications and metrics.

Every request goes through ``fleet.aws.aws_errors`` (so callers see ``ConditionFailed`` /
``StoreUnavailable`` / ``StoreError`` only) and is counted by purpose in ``AwsClients.requests``:
``coordination`` (every DynamoDB request but message persistence) or ``messages``; every error answer is
counted by its code in ``AwsClients.errors``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from fleet.aws import AwsClients, aws_errors, consistent_scan, pages, send_messages
from fleet.batch_log import LogItem
from fleet.deathnotice import DeathNotice, parse_death_notice, stopped_at_in
from fleet.expr import Write
from fleet.lease import STARTED, STOPPED, ConnectionRecord, WorkerRecord
from fleet.schema import STATE_INDEX
from fleet.typed import from_typed, to_typed, typed_request


@dataclass(frozen=True)
class Notification:
    """``{"pk": ...}`` from the queue; a handoff also names the epoch it released (``released_epoch``).  An
    ECS task state change event (``fleet.deathnotice``) carries ``death`` instead of a pk."""

    pk: str
    receipt: str
    released_epoch: int | None = None
    death: DeathNotice | None = None


# A received notification stays hidden this long, not the queue's 30 s: one handed to a worker that died
# before acting on it (its long poll was still waiting when the process was killed, and the queue answered
# it anyway) is seen by another worker a second later.  That matters most for the death notice of that very
# worker.  A live worker acts within it; if not, a second delivery is harmless (every action is conditional).
RECEIVED_VISIBILITY_S = 1
NOTIFY_REQUESTS_IN_FLIGHT = 8  # SendMessageBatch requests of one announcement sent at once


def _notification(text: str, receipt: str) -> Notification:
    """A queue message as a notification; a malformed one has no pk and no notice (deleted unread)."""
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return Notification(pk="", receipt=receipt)
    if "pk" not in body:
        return Notification(pk="", receipt=receipt, death=parse_death_notice(body))
    epoch = body.get("released_epoch")
    return Notification(pk=str(body["pk"]), receipt=receipt,
                        released_epoch=epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None)


class AwsAdapter:
    """The fleet's AWS adapter for one process: its DynamoDB tables, the notification queue, ECS task state and
    the ActiveConnections metric."""

    def __init__(self, aws: AwsClients) -> None:
        self.aws = aws
        self.config = aws.config

    def clock_skew_bounds(self) -> tuple[float, float] | None:
        """``(lower, upper)`` ms: the lease clock is ahead of DynamoDB's clock by more than ``lower`` and at
        most ``upper`` (negative: behind), from recent answers' ``Date`` headers; None until enough."""
        return self.aws.skew_bounds()

    # -- writes --------------------------------------------------------------------------------------
    async def execute(self, table: str, write: Write, purpose: str = "coordination") -> dict[str, Any]:
        """Send one conditional write; return the item as it now stands (puts: as written).

        Raises ``ConditionFailed`` when the condition was refused.
        """
        request = typed_request(write.render())
        self.aws.requests[purpose] += 1
        async with aws_errors(f"{'put' if write.replace else 'update'} {table}", self.aws.errors):
            if write.replace:
                await self.aws.ddb.put_item(TableName=table, **request)
                return write.apply(None)
            response = await self.aws.ddb.update_item(TableName=table, ReturnValues="ALL_NEW", **request)
        return from_typed(response.get("Attributes", {}))

    async def put_log_item(self, item: LogItem) -> None:
        """Put one item of a stream's message log (``fleet.batch_log``) onto its number if the number is free
        (``attribute_not_exists(sk)``): one conditional PutItem, on every backend, sent lean
        (``fleet.lean_put``).  Raises ``ConditionFailed`` when the number is taken (``LogWriter.on_refused`` says
        what to read), ``StoreUnavailable`` when the outcome is unknown (``LogWriter.on_unknown``: send it
        again)."""
        self.aws.requests["messages"] += 1
        async with aws_errors(f"put {self.config.messages_table}", self.aws.errors):
            await self.aws.lean.ddb.put_item(TableName=self.config.messages_table, Item=to_typed(item.to_item()),
                                             ConditionExpression="attribute_not_exists(sk)")

    async def log_tail(self, pk: str) -> LogItem | None:
        """The last item of ``pk``'s message log (None: empty), read consistently: one Query, newest first,
        ``Limit`` 1."""
        self.aws.requests["messages"] += 1
        async with aws_errors("query messages", self.aws.errors):
            response = await self.aws.ddb.query(
                TableName=self.config.messages_table, KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues=to_typed({":pk": pk}), ScanIndexForward=False, Limit=1,
                ConsistentRead=True)
        items = response.get("Items", [])
        return LogItem.from_item(from_typed(items[0])) if items else None

    async def log_item(self, pk: str, b: int) -> LogItem | None:
        """Item ``b`` of ``pk``'s message log (None: absent), read consistently."""
        self.aws.requests["messages"] += 1
        async with aws_errors("get messages", self.aws.errors):
            response = await self.aws.ddb.get_item(TableName=self.config.messages_table,
                                                   Key=to_typed({"pk": pk, "sk": b}), ConsistentRead=True)
        item = response.get("Item")
        return LogItem.from_item(from_typed(item)) if item else None

    # -- reads ---------------------------------------------------------------------------------------
    async def _read(self, table: str, pk: str, consistent: bool = True) -> dict[str, Any] | None:
        """One item by key (a coordination request)."""
        self.aws.requests["coordination"] += 1
        async with aws_errors(f"get {table}", self.aws.errors):
            response = await self.aws.ddb.get_item(TableName=table, Key=to_typed({"pk": pk}),
                                                   ConsistentRead=consistent)
        item = response.get("Item")
        return from_typed(item) if item else None

    async def get_connection(self, pk: str) -> ConnectionRecord | None:
        """A connection item, read consistently unless the client settings say otherwise."""
        item = await self._read(self.config.connections_table, pk, self.aws.settings.consistent_reads)
        return ConnectionRecord.from_item(item) if item else None

    def started_connections(
        self, expired_before_ms: int | None = None, max_pages: int | None = None
    ) -> AsyncIterator[ConnectionRecord]:
        """STARTED connections from the state index, optionally only those whose lease expired.

        ``max_pages`` 1 reproduces the published reconcile (one page); None reads every page.
        """
        key_condition = "desired_state = :s"
        values: dict[str, Any] = {":s": STARTED}
        if expired_before_ms is not None:
            key_condition += " AND lease_expires_at_ms < :now"
            values[":now"] = expired_before_ms
        return self._state_index(key_condition, values, max_pages)

    def unreleased_stopped_connections(self) -> AsyncIterator[ConnectionRecord]:
        """STOPPED connections whose lease was never released (``lease_expires_at_ms > 0``: a release zeroes
        it), from every page of the state index: the only ones that can need a drain."""
        return self._state_index("desired_state = :s AND lease_expires_at_ms > :zero", {":s": STOPPED, ":zero": 0},
                                 None)

    async def _state_index(
        self, key_condition: str, values: dict[str, Any], max_pages: int | None
    ) -> AsyncIterator[ConnectionRecord]:
        typed_values = to_typed(values)  # once: every page's request carries the same condition values
        async for item in pages(self.aws, "query state index", lambda extra: self.aws.ddb.query(
                TableName=self.config.connections_table, IndexName=STATE_INDEX,
                KeyConditionExpression=key_condition, ExpressionAttributeValues=typed_values, **extra),
                max_pages):
            yield ConnectionRecord.from_item(item)

    async def workers(self) -> dict[str, WorkerRecord]:
        """Every worker incarnation's liveness item (hardened), read consistently."""
        records = [WorkerRecord.from_item(item)
                   async for item in consistent_scan(self.aws, self.config.workers_table, "scan workers")]
        return {record.worker_id: record for record in records}

    async def get_worker(self, worker_id: str) -> WorkerRecord | None:
        """One worker incarnation's liveness item (hardened), read consistently."""
        item = await self._read(self.config.workers_table, worker_id)
        return WorkerRecord.from_item(item) if item else None

    # -- notifications and metrics -------------------------------------------------------------------
    async def notify(self, handoffs: Sequence[tuple[str, int | None]]) -> None:
        """Announce released streams ``(pk, released epoch)`` (None: read it first), ten to a request
        (SendMessageBatch's limit), ``NOTIFY_REQUESTS_IN_FLIGHT`` requests at once: a shutdown announcing
        2,000 streams one request after another took over a minute on a loaded queue.  Every request is
        tried; the first failure is raised after (``fleet.aws.send_messages``: a message the queue refused
        inside an answered request included)."""
        slots = asyncio.Semaphore(NOTIFY_REQUESTS_IN_FLIGHT)

        async def send(batch: Sequence[tuple[str, int | None]]) -> None:
            async with slots:
                await send_messages(self.aws, self.config.queue_url, [
                    {"pk": pk} if epoch is None else {"pk": pk, "released_epoch": epoch} for pk, epoch in batch])

        sent = await asyncio.gather(*(send(handoffs[start:start + 10]) for start in range(0, len(handoffs), 10)),
                                    return_exceptions=True)
        failed = next((result for result in sent if isinstance(result, BaseException)), None)
        if failed is not None:
            raise failed

    async def receive_notifications(self, max_messages: int = 10, wait: bool = True) -> list[Notification]:
        """Up to ``max_messages``; with ``wait`` a long poll, else whatever the queue has now (a short poll)."""
        async with aws_errors("receive notifications", self.aws.errors):
            response = await self.aws.sqs.receive_message(
                QueueUrl=self.config.queue_url,
                MaxNumberOfMessages=max_messages,
                WaitTimeSeconds=self.config.notify_wait_s if wait else 0,
                VisibilityTimeout=RECEIVED_VISIBILITY_S,
            )
        found = []
        for message in response.get("Messages", []):
            receipt = message.get("ReceiptHandle", "")
            found.append(_notification(message.get("Body", ""), receipt))
        return found

    async def task_stopped(self, cluster: str, task_arn: str) -> int | None:
        """When ECS reports the task's process exited (Unix ms, ``fleet.deathnotice.stopped_at_in``); None
        when it runs, ECS does not know the task, or reports no stop time."""
        async with aws_errors("describe the task", self.aws.errors):
            response = await self.aws.ecs.describe_tasks(cluster=cluster, tasks=[task_arn])
        return stopped_at_in(response, task_arn)

    async def delete_notifications(self, notifications: list[Notification]) -> None:
        if not notifications:
            return
        async with aws_errors("delete notifications", self.aws.errors):
            await self.aws.sqs.delete_message_batch(
                QueueUrl=self.config.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": n.receipt} for i, n in enumerate(notifications)],
            )

    async def return_notifications(self, notifications: list[Notification]) -> None:
        """Make received notifications visible again at once (for another worker to act on)."""
        if not notifications:
            return
        async with aws_errors("return notifications", self.aws.errors):
            await self.aws.sqs.change_message_visibility_batch(
                QueueUrl=self.config.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": n.receipt, "VisibilityTimeout": 0}
                         for i, n in enumerate(notifications)],
            )

    async def put_active_connections(self, count: int, worker_id: str) -> None:
        async with aws_errors("put metric", self.aws.errors):
            await self.aws.cloudwatch.put_metric_data(
                Namespace="wsfleet",
                MetricData=[
                    {"MetricName": "ActiveConnections", "Value": float(count), "Unit": "Count"},
                    {
                        "MetricName": "ActiveConnections",
                        "Dimensions": [{"Name": "WorkerId", "Value": worker_id}],
                        "Value": float(count),
                        "Unit": "Count",
                    },
                ],
            )
