"""Global Tables emulated between two real dynalite endpoints (``harness.region.global_tables``): a write made
through one region's feed reaches the other region only after the lag; concurrent writes of one item are
counted as a conflict and both regions settle on the later one; a deletion is replicated; a pause holds
writes back (they are the backlog) until resumed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest

from harness.backends.servers import start_dynalite
from harness.region.global_tables import GlobalTables

LAG_MS = 300.0
TABLE = "replicated"


@pytest.fixture(scope="module")
def endpoints(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    servers = {region: start_dynalite(tmp_path_factory.mktemp(region)) for region in ("east", "west")}
    for server in servers.values():
        client = _client(server.url)
        client.create_table(TableName=TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                            BillingMode="PAY_PER_REQUEST")
        client.get_waiter("table_exists").wait(TableName=TABLE, WaiterConfig={"Delay": 0.1})
    yield {region: server.url for region, server in servers.items()}
    for server in servers.values():
        server.stop()


class Events(list[tuple[str, dict[str, Any]]]):
    def emit(self, type: str, **fields: Any) -> None:
        self.append((type, fields))


@pytest.fixture
def tables(endpoints: dict[str, str]) -> Iterator[tuple[GlobalTables, dict[str, Any], Events]]:
    events = Events()
    replicated = GlobalTables(endpoints, LAG_MS, events.emit).start()
    yield replicated, {region: _client(replicated.feed_url(region)) for region in endpoints}, events
    replicated.stop()


def _client(url: str) -> Any:
    return boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1", aws_access_key_id="test",
                        aws_secret_access_key="test")


def _item(client: Any, pk: str) -> dict[str, Any] | None:
    item: dict[str, Any] | None = client.get_item(TableName=TABLE, Key={"pk": {"S": pk}},
                                                   ConsistentRead=True).get("Item")
    return item


def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> float:
    """Poll ``condition`` (another region's table has no signal to wait on); when it held, monotonic."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
    return time.monotonic()


def test_a_write_reaches_the_other_region_after_the_lag(tables: tuple[GlobalTables, dict[str, Any], Events]) -> None:
    replicated, clients, _ = tables
    item = {"pk": {"S": "lagged"}, "v": {"N": "1"}}
    written = time.monotonic()
    clients["east"].put_item(TableName=TABLE, Item=item)
    arrived = _until(lambda: _item(clients["west"], "lagged") == item)
    assert arrived - written >= LAG_MS / 1000.0 * 0.9  # the write's time is stamped after its answer
    _until(lambda: replicated.stats()["backlog"] == 0)
    assert replicated.stats()["conflicts"] == 0


def test_concurrent_writes_conflict_and_the_later_wins_in_both_regions(
        tables: tuple[GlobalTables, dict[str, Any], Events]) -> None:
    replicated, clients, _ = tables
    clients["east"].put_item(TableName=TABLE, Item={"pk": {"S": "both"}, "v": {"S": "east"}})
    clients["west"].put_item(TableName=TABLE, Item={"pk": {"S": "both"}, "v": {"S": "west"}})  # within the lag
    later = {"pk": {"S": "both"}, "v": {"S": "west"}}
    # the feeds report a write just after answering it: wait until the later one has reached east, and
    # nothing is left to deliver; west's copy must not have been replaced by the earlier one meanwhile
    _until(lambda: _item(clients["east"], "both") == later and replicated.stats()["backlog"] == 0)
    assert _item(clients["west"], "both") == later
    assert replicated.stats()["conflicts"] == 1


def test_a_deletion_is_replicated(tables: tuple[GlobalTables, dict[str, Any], Events]) -> None:
    replicated, clients, _ = tables
    clients["west"].put_item(TableName=TABLE, Item={"pk": {"S": "gone"}})
    _until(lambda: _item(clients["east"], "gone") is not None)
    clients["east"].delete_item(TableName=TABLE, Key={"pk": {"S": "gone"}})
    _until(lambda: _item(clients["west"], "gone") is None)
    assert replicated.stats()["conflicts"] == 0


def test_a_pause_holds_writes_back_until_resumed(tables: tuple[GlobalTables, dict[str, Any], Events]) -> None:
    replicated, clients, events = tables
    replicated.pause()
    clients["east"].put_item(TableName=TABLE, Item={"pk": {"S": "held"}})
    time.sleep(2 * LAG_MS / 1000.0)  # twice the lag passes (a duration under test, not a synchronisation)
    assert _item(clients["west"], "held") is None and replicated.stats()["backlog"] == 1
    _until(lambda: any(t == "replication.stats" and f["paused"] and f["backlog"] == 1 for t, f in events))
    replicated.resume()
    _until(lambda: _item(clients["west"], "held") is not None and replicated.stats()["backlog"] == 0)
