"""The final scan: every stored message with its writer, every connection item, across pages (moto); and a
stream's stored head, which the settle phase waits on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fleet.batch_log import BATCH, MARK, LogItem, Message, Writer
from fleet.schema import connections_table, messages_table
from fleet.wire import to_wire
from harness.ground_truth import record_final

TABLES = {"messages": "msgs", "connections": "conns"}


class Recorder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(self, type: str, **fields: Any) -> dict[str, Any]:
        self.events.append({"type": type, **fields})
        return self.events[-1]

    def of(self, type: str) -> dict[str, dict[str, Any]]:
        return {e["pk"]: e for e in self.events if e["type"] == type}


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x",
                              aws_secret_access_key="x")
        client.create_table(**messages_table(TABLES["messages"]))
        client.create_table(**connections_table(TABLES["connections"]))
        yield client


def put_message(client: Any, pk: str, sk: int, seq: int, **writer: Any) -> None:
    item: dict[str, Any] = {"pk": {"S": pk}, "sk": {"N": str(sk)}, "message_data": {"S": f"{pk[5:]}:{seq}"}}
    for name, value in writer.items():
        item[name] = {"N": str(value)} if isinstance(value, int) else {"S": value}
    client.put_item(TableName=TABLES["messages"], Item=item)


def test_items_keep_their_writer_and_missing_attributes_are_null(dynamodb: Any) -> None:
    put_message(dynamodb, "CONN#a", 2, 2, worker_id="worker-1", gen="ab", epoch=3, sent_ms=1700000000123)
    put_message(dynamodb, "CONN#a", 1, 1, worker_id="worker-2", gen="cd", epoch=4, sent_ms=1700000000456)
    put_message(dynamodb, "CONN#b", 1700000000999, 7)  # a blog-style item: keyed by time, no writer
    dynamodb.put_item(TableName=TABLES["connections"], Item={
        "pk": {"S": "CONN#a"}, "desired_state": {"S": "STARTED"}, "lease_owner": {"S": "worker-2"},
        "owner_gen": {"S": "cd"}, "epoch": {"N": "4"}, "last_seq": {"N": "1"}, "ckpt_worker": {"S": "worker-2"},
        "ckpt_gen": {"S": "cd"}, "ckpt_epoch": {"N": "4"}})
    recorder = Recorder()

    record_final(recorder, dynamodb, TABLES, {"a": {"id": "a", "head_seq": 9}}, ["a", "b", "c"])

    assert recorder.of("final.emitted") == {"CONN#a": {"type": "final.emitted", "pk": "CONN#a", "head_seq": 9}}
    persisted = recorder.of("final.persisted")
    assert persisted["CONN#a"]["seqs"] == [1, 2]
    assert persisted["CONN#a"]["items"] == [
        {"seq": 1, "worker": "worker-2", "gen": "cd", "epoch": 4, "sent_ms": 1700000000456},
        {"seq": 2, "worker": "worker-1", "gen": "ab", "epoch": 3, "sent_ms": 1700000000123},
    ]
    assert persisted["CONN#b"]["items"] == [{"seq": 7, "worker": None, "gen": None, "epoch": None,
                                             "sent_ms": None}]
    assert persisted["CONN#c"]["seqs"] == [] and persisted["CONN#c"]["items"] == []
    connections = recorder.of("final.connection")
    assert {k: v for k, v in connections["CONN#a"].items() if k != "type"} == {
        "pk": "CONN#a", "desired_state": "STARTED", "lease_owner": "worker-2", "owner_gen": "cd", "epoch": 4,
        "last_seq": 1, "ckpt_worker": "worker-2", "ckpt_gen": "cd", "ckpt_epoch": 4}
    assert set(connections) == {"CONN#a", "CONN#b", "CONN#c"}
    assert all(v is None for k, v in connections["CONN#b"].items() if k not in ("type", "pk"))


def test_every_page_is_read(dynamodb: Any) -> None:
    filler = "x" * 4000  # ~4 KB per item: 400 items are more than one 1 MB scan page
    for seq in range(1, 401):
        dynamodb.put_item(TableName=TABLES["messages"], Item={
            "pk": {"S": "CONN#big"}, "sk": {"N": str(seq)}, "message_data": {"S": f"big:{seq}"},
            "pad": {"S": filler}})
    first_page = dynamodb.scan(TableName=TABLES["messages"])
    assert "LastEvaluatedKey" in first_page  # the scan really is paginated
    recorder = Recorder()

    record_final(recorder, dynamodb, TABLES, {}, ["big"])

    assert recorder.of("final.persisted")["CONN#big"]["seqs"] == list(range(1, 401))


def test_a_hardened_log_batch_counts_each_of_its_messages_and_a_mark_none(dynamodb: Any) -> None:
    """The fenced log (``fleet.batch_log``): each message of a batch is one stored message, named after the
    batch's writer (its ``written_ms`` as ``sent_ms``); a takeover mark stores none."""
    writer = Writer("worker-1", "ab", 3, 1)
    items = [LogItem("CONN#a", 1, MARK, writer, 1, 0, 5),
             LogItem("CONN#a", 2, BATCH, writer, 1, 2, 6, (Message(1, 0, "a:1"), Message(2, 0, "a:2")))]
    for item in items:
        dynamodb.put_item(TableName=TABLES["messages"], Item=to_wire(item.to_item()))
    recorder = Recorder()

    record_final(recorder, dynamodb, TABLES, {}, ["a"])

    persisted = recorder.of("final.persisted")["CONN#a"]
    assert persisted["seqs"] == [1, 2]
    assert persisted["items"][0] == {"seq": 1, "worker": "worker-1", "gen": "ab", "epoch": 3, "sent_ms": 6}
