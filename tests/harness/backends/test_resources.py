"""Creating and emptying resources: idempotent creation, and clear_data leaves tables and queues empty."""

from __future__ import annotations

import json

from fleet import schema
from fleet.config import FleetConfig
from harness.backends import EmbeddedBackend, clear_data, create_resources
from harness.backends.resources import client


def test_resources_match_the_schema(backend: EmbeddedBackend) -> None:
    env = backend.env()
    ddb = client(env, "dynamodb")
    connections = ddb.describe_table(TableName=backend.tables["connections"])["Table"]
    assert [index["IndexName"] for index in connections["GlobalSecondaryIndexes"]] == [schema.STATE_INDEX]
    assert connections["TableStatus"] == "ACTIVE"
    sqs = client(env, "sqs")
    attributes = sqs.get_queue_attributes(QueueUrl=backend.queue_url, AttributeNames=["All"])["Attributes"]
    redrive = json.loads(attributes["RedrivePolicy"])
    assert redrive["deadLetterTargetArn"].endswith(":" + schema.DLQ_NAME)
    assert int(redrive["maxReceiveCount"]) == schema.MAX_RECEIVES


def test_creating_again_is_harmless(backend: EmbeddedBackend) -> None:
    assert create_resources(backend.env(), FleetConfig.from_env(backend.env())) == backend.queue_url


def test_clear_data_empties_tables_and_queues(backend: EmbeddedBackend) -> None:
    env = backend.env()
    ddb = client(env, "dynamodb")
    sqs = client(env, "sqs")
    for i in range(60):  # more than two batch writes' worth
        ddb.put_item(TableName=backend.tables["messages"], Item={"pk": {"S": "CONN#c"}, "sk": {"N": str(i)}})
    ddb.put_item(TableName=backend.tables["connections"], Item={"pk": {"S": "CONN#c"}})
    ddb.put_item(TableName=backend.tables["workers"], Item={"pk": {"S": "worker-1"}})
    sqs.send_message(QueueUrl=backend.queue_url, MessageBody=json.dumps({"pk": "CONN#c"}))
    clear_data(env)
    clear_data(env)  # twice in a row: a second purge within 60 s must not fail
    for table in backend.tables.values():
        assert ddb.scan(TableName=table, Select="COUNT")["Count"] == 0
    received = sqs.receive_message(QueueUrl=backend.queue_url, WaitTimeSeconds=0)
    assert received.get("Messages", []) == []


def test_clean_backend_starts_empty(clean_backend: EmbeddedBackend) -> None:
    ddb = client(clean_backend.env(), "dynamodb")
    assert ddb.scan(TableName=clean_backend.tables["connections"], Select="COUNT")["Count"] == 0
