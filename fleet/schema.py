"""Table, index and queue definitions: the one source the embedded backend, the LocalStack init script and
the terraform consistency tests all read.

DESIGN §2a: connections table keyed by ``pk`` = ``CONN#<id>`` with a GSI on (``desired_state``,
``lease_expires_at_ms``); messages table keyed by (``pk``, ``sk``); one notification queue whose body is
``{"pk": ...}``.  The ``hardened`` profile adds the workers table (per-worker liveness and the STOP
mailbox); ``blog`` leaves it empty.
"""

from __future__ import annotations

import json
from typing import Any

from fleet.config import FleetConfig

STATE_INDEX = "desired_state-lease_expires_at_ms-index"
CONN_PREFIX = "CONN#"
# The router's control journal (``fleet.router``): one item per stream in the connections table, written by
# routers only; it has neither index attribute, so the state index never holds it.
JOURNAL_PREFIX = "CTL#"
QUEUE_NAME = "wsfleet-notify"
DLQ_NAME = "wsfleet-notify-dlq"
# A notification received this many times without being deleted moves to the dead-letter queue.
MAX_RECEIVES = 5
# EventBridge puts each worker-stopped event on the queue this many times (one rule, as many targets): the
# dead worker's own last long poll may take a copy (it asks for one message while idle, fleet.notices),
# which stays invisible for a while; another copy reaches a live worker at once.
DEATH_NOTICE_COPIES = 2


def conn_pk(connection_id: str) -> str:
    return CONN_PREFIX + connection_id


def journal_pk(connection_id: str) -> str:
    return JOURNAL_PREFIX + connection_id


def connection_id_of(pk: str) -> str:
    return pk[len(CONN_PREFIX):] if pk.startswith(CONN_PREFIX) else pk


def connections_table(name: str) -> dict[str, Any]:
    """CreateTable arguments for the connections table and its state index."""
    return {
        "TableName": name,
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "desired_state", "AttributeType": "S"},
            {"AttributeName": "lease_expires_at_ms", "AttributeType": "N"},
        ],
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": STATE_INDEX,
                "KeySchema": [
                    {"AttributeName": "desired_state", "KeyType": "HASH"},
                    {"AttributeName": "lease_expires_at_ms", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        "BillingMode": "PAY_PER_REQUEST",
    }


def messages_table(name: str) -> dict[str, Any]:
    """CreateTable arguments for the messages table: ``sk`` is a number (blog: ms; hardened: seq)."""
    return {
        "TableName": name,
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "N"},
        ],
        "KeySchema": [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        "BillingMode": "PAY_PER_REQUEST",
    }


def workers_table(name: str) -> dict[str, Any]:
    """CreateTable arguments for the workers table (hardened: one liveness item per worker)."""
    return {
        "TableName": name,
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "BillingMode": "PAY_PER_REQUEST",
    }


def tables(config: FleetConfig) -> list[dict[str, Any]]:
    """Every table the fleet uses, in creation order."""
    return [
        connections_table(config.connections_table),
        messages_table(config.messages_table),
        workers_table(config.workers_table),
    ]


def queue_attributes(dlq_arn: str | None = None) -> dict[str, str]:
    """Attributes of the notification queue; with a dead-letter queue's ARN, its redrive policy."""
    attributes = {"VisibilityTimeout": "30", "MessageRetentionPeriod": "345600"}
    if dlq_arn:
        attributes["RedrivePolicy"] = (
            json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVES)})
        )
    return attributes
