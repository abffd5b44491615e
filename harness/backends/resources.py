"""Creating and emptying the fleet's resources on any backend, from the one definition in ``fleet.schema``.

``create_resources`` makes the tables (waiting until they and their indexes are ACTIVE), the dead-letter
queue and the notification queue with its redrive policy, and returns the queue URL; it is idempotent
for tables, so it also serves a LocalStack that was prepared before.  ``clear_data`` empties the tables
and purges the queues between tests.  Both take the environment a fleet process would get
(``Backend.env()``), so they work against embedded servers, LocalStack or real AWS alike.  Setup is
synchronous boto3: it runs before any event loop matters.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from fleet import schema
from fleet.config import FleetConfig
from harness.backends.base import ENDPOINT_ENV_VARS, BackendError

ACTIVE_DEADLINE_S = 60.0
_POLL_S = 0.05
_BATCH_WRITE_MAX = 25


def client(env: Mapping[str, str], service: str) -> Any:
    """A boto3 client for ``service`` configured only from ``env`` (endpoint, region, credentials)."""
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
    endpoint = env.get(ENDPOINT_ENV_VARS[service]) or env.get("AWS_ENDPOINT_URL") or None
    return boto3.client(
        service,
        region_name=region,
        endpoint_url=endpoint,
        aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
        aws_session_token=env.get("AWS_SESSION_TOKEN") or None,
        config=Config(connect_timeout=5, read_timeout=30, retries={"max_attempts": 3, "mode": "standard"}),
    )


def create_resources(env: Mapping[str, str], config: FleetConfig) -> str:
    """Create every table of ``schema.tables(config)`` and the notification queues; return the queue URL."""
    ddb = client(env, "dynamodb")
    sqs = client(env, "sqs")
    for definition in schema.tables(config):
        name = definition["TableName"]
        try:
            ddb.create_table(**definition)
        except ClientError as exc:
            if _code(exc) != "ResourceInUseException":
                raise BackendError(f"creating table {name} at {ddb.meta.endpoint_url}: {exc}") from exc
        except BotoCoreError as exc:
            raise BackendError(f"creating table {name} at {ddb.meta.endpoint_url}: {exc}") from exc
    for definition in schema.tables(config):
        _wait_active(ddb, definition["TableName"])
    try:
        dlq_url = sqs.create_queue(QueueName=schema.DLQ_NAME)["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        queue_url: str = sqs.create_queue(
            QueueName=schema.QUEUE_NAME, Attributes=schema.queue_attributes(dlq_arn)
        )["QueueUrl"]
    except (ClientError, BotoCoreError) as exc:
        raise BackendError(f"creating queue {schema.QUEUE_NAME} at {sqs.meta.endpoint_url}: {exc}") from exc
    return queue_url


def clear_data(env: Mapping[str, str]) -> None:
    """Delete every item of the fleet's tables and every message of its queues (named in ``env``)."""
    config = FleetConfig.from_env(env)
    ddb = client(env, "dynamodb")
    for definition in schema.tables(config):
        keys = [key["AttributeName"] for key in definition["KeySchema"]]
        _delete_all(ddb, definition["TableName"], keys)
    sqs = client(env, "sqs")
    queue_urls = [config.queue_url] if config.queue_url else []
    with contextlib.suppress(ClientError):  # no dead-letter queue on this backend: nothing to purge there
        queue_urls.append(sqs.get_queue_url(QueueName=schema.DLQ_NAME)["QueueUrl"])
    for queue_url in queue_urls:
        _purge(sqs, queue_url)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _wait_active(ddb: Any, name: str) -> None:
    deadline = time.monotonic() + ACTIVE_DEADLINE_S
    while True:
        table = ddb.describe_table(TableName=name)["Table"]
        statuses = [table["TableStatus"]] + [
            index.get("IndexStatus", "ACTIVE") for index in table.get("GlobalSecondaryIndexes", [])
        ]
        if all(status == "ACTIVE" for status in statuses):
            return
        if time.monotonic() > deadline:
            raise BackendError(f"table {name} at {ddb.meta.endpoint_url} not ACTIVE after "
                               f"{ACTIVE_DEADLINE_S:.0f} s (statuses {statuses})")
        time.sleep(_POLL_S)


def _scan_keys(ddb: Any, table: str, keys: list[str]) -> Iterator[dict[str, Any]]:
    names = {f"#k{i}": key for i, key in enumerate(keys)}
    request: dict[str, Any] = {
        "TableName": table,
        "ProjectionExpression": ", ".join(names),
        "ExpressionAttributeNames": names,
    }
    while True:
        page = ddb.scan(**request)
        yield from page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _delete_all(ddb: Any, table: str, keys: list[str]) -> None:
    batch: list[dict[str, Any]] = []
    for item in _scan_keys(ddb, table, keys):
        batch.append({"DeleteRequest": {"Key": {key: item[key] for key in keys}}})
        if len(batch) == _BATCH_WRITE_MAX:
            _write_batch(ddb, table, batch)
            batch = []
    if batch:
        _write_batch(ddb, table, batch)


def _write_batch(ddb: Any, table: str, requests: list[dict[str, Any]]) -> None:
    pending: dict[str, Any] = {table: requests}
    deadline = time.monotonic() + ACTIVE_DEADLINE_S
    while pending:
        pending = ddb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
        if pending and time.monotonic() > deadline:
            raise BackendError(f"could not empty table {table}: writes still unprocessed")


def _purge(sqs: Any, queue_url: str) -> None:
    """PurgeQueue; where the backend refuses a second purge within 60 s, receive and delete instead."""
    try:
        sqs.purge_queue(QueueUrl=queue_url)
        return
    except ClientError as exc:
        if "PurgeQueueInProgress" not in _code(exc):
            raise
    while True:
        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get(
            "Messages", []
        )
        if not messages:
            return
        sqs.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)],
        )
