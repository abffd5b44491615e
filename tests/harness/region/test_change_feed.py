"""Tests of harness.region.change_feed against a real dynalite: each accepted write is reported with its
image once its answer has passed, a refused write reports nothing, and a client sees the endpoint's own
answers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from harness.backends.servers import ServerProcess, start_dynalite
from harness.region.change_feed import ChangeFeedProxy

Change = tuple[str, dict[str, Any], "dict[str, Any] | None", float]


class Changes(list[Change]):
    """What the feed reported.  It reports after answering, so a test waits for the count it expects."""

    def __init__(self) -> None:
        super().__init__()
        self.grew = threading.Condition()

    def add(self, *change: Any) -> None:
        with self.grew:
            self.append(change)  # type: ignore[arg-type]
            self.grew.notify_all()

    def until(self, count: int) -> Changes:
        with self.grew:
            assert self.grew.wait_for(lambda: len(self) >= count, timeout=10), self
        return self


@pytest.fixture(scope="module")
def dynalite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_dynalite(tmp_path_factory.mktemp("dynalite"))
    yield server
    server.stop()


@pytest.fixture
def feed(dynalite: ServerProcess) -> Iterator[tuple[Any, Changes]]:
    changes = Changes()
    proxy = ChangeFeedProxy(dynalite.url, changes.add).start()
    client = boto3.client("dynamodb", endpoint_url=proxy.url, region_name="us-east-1",
                          aws_access_key_id="test", aws_secret_access_key="test")
    name = f"feed-{len(client.list_tables()['TableNames'])}"
    client.create_table(TableName=name, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                        BillingMode="PAY_PER_REQUEST")
    client.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 0.1})
    client.table_name = name  # type: ignore[attr-defined]
    yield client, changes
    proxy.stop()


def key(pk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}}


def test_puts_updates_and_deletes_are_reported_with_their_images(feed: tuple[Any, Changes]) -> None:
    client, changes = feed
    table = client.table_name
    client.put_item(TableName=table, Item={**key("a"), "v": {"N": "1"}})
    client.update_item(TableName=table, Key=key("a"), UpdateExpression="SET v = v + :one",
                       ExpressionAttributeValues={":one": {"N": "1"}})
    client.delete_item(TableName=table, Key=key("a"))
    client.batch_write_item(RequestItems={table: [{"PutRequest": {"Item": {**key("b"), "v": {"N": "7"}}}},
                                                  {"DeleteRequest": {"Key": key("c")}}]})
    reported = [(t, k, image) for t, k, image, _ in changes.until(5)]
    assert reported == [
        (table, key("a"), {**key("a"), "v": {"N": "1"}}),
        (table, key("a"), {**key("a"), "v": {"N": "2"}}),  # read back after the update
        (table, key("a"), None),
        (table, key("b"), {**key("b"), "v": {"N": "7"}}),
        (table, key("c"), None),
    ]
    times = [t for *_, t in changes]
    assert times == sorted(times)


def test_a_refused_write_reports_nothing_and_the_client_gets_the_refusal(feed: tuple[Any, Changes]) -> None:
    client, changes = feed
    client.put_item(TableName=client.table_name, Item={**key("a"), "v": {"N": "1"}})
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        client.put_item(TableName=client.table_name, Item={**key("a"), "v": {"N": "2"}},
                        ConditionExpression="attribute_not_exists(pk)")
    client.put_item(TableName=client.table_name, Item={**key("b"), "v": {"N": "3"}})
    assert [k for _, k, _, _ in changes.until(2)] == [key("a"), key("b")]  # nothing from the refusal between
    assert client.get_item(TableName=client.table_name, Key=key("a"))["Item"]["v"] == {"N": "1"}


def test_an_endpoint_that_is_down_answers_as_dynamodb_unavailable() -> None:
    proxy = ChangeFeedProxy("http://127.0.0.1:9", lambda *change: None).start()
    try:
        client = boto3.client("dynamodb", endpoint_url=proxy.url, region_name="us-east-1",
                              aws_access_key_id="test", aws_secret_access_key="test",
                              config=Config(retries={"max_attempts": 1}))
        with pytest.raises(ClientError, match="ServiceUnavailable"):
            client.list_tables()
    finally:
        proxy.stop()
