"""Global Tables emulated between two real dynalite endpoints (``harness.region.global_tables``): a write made
through one region's feed reaches the other region only after the lag; concurrent writes of one item are
counted as a conflict and both regions settle on the later one; a deletion is replicated; a pause holds
writes back (they are the backlog) until resumed; a write a region does not take stays pending."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from harness.backends.servers import start_dynalite
from harness.region.global_tables import GlobalTables
from harness.region.replication import LagModel

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
    replicated = GlobalTables(endpoints, LagModel(LAG_MS), events.emit).start()
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


def test_a_write_the_other_region_does_not_take_stays_pending_until_it_does(
        tables: tuple[GlobalTables, dict[str, Any], Events]) -> None:
    replicated, clients, events = tables
    reachable = replicated.direct["west"]
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{unused.getsockname()[1]}"
    replicated.direct["west"] = boto3.client(
        "dynamodb", endpoint_url=dead, region_name="us-east-1", aws_access_key_id="test",
        aws_secret_access_key="test", config=Config(retries={"total_max_attempts": 1}, connect_timeout=0.5))
    clients["east"].put_item(TableName=TABLE, Item={"pk": {"S": "pending"}})
    _until(lambda: sum(kind == "replication.error" for kind, _ in events) >= 2)  # tried, and tried again
    assert replicated.stats()["backlog"] == 1
    replicated.direct["west"] = reachable
    _until(lambda: _item(clients["west"], "pending") is not None and replicated.stats()["backlog"] == 0)


def test_the_lag_model_is_in_the_history(tables: tuple[GlobalTables, dict[str, Any], Events]) -> None:
    _, _, events = tables
    [config] = [fields for kind, fields in events if kind == "replication.config"]
    assert config["lag"] == {"distribution": "fixed", "median_ms": LAG_MS, "p99_ms": LAG_MS, "seed": 0}


def test_fresh_state_for_the_next_run_drops_what_is_in_flight_empties_both_regions_and_writes_there(
        tables: tuple[GlobalTables, dict[str, Any], Events]) -> None:
    """A batch's next run on the same endpoints: nothing of the last run is left to replicate or to read,
    no fault is on, and the replication's events and lag are the new run's."""
    replicated, clients, _ = tables
    clients["east"].put_item(TableName=TABLE, Item={"pk": {"S": "landed"}})
    _until(lambda: _item(clients["west"], "landed") is not None)
    replicated.pause()
    clients["east"].put_item(TableName=TABLE, Item={"pk": {"S": "in-flight"}})
    replicated.dynamodb_outage("west")
    _until(lambda: replicated.stats()["backlog"] == 1)  # the pump has read the write from east's stream
    run = Events()
    replicated.fresh(LagModel(LAG_MS / 2), run.emit, {"west": 40.0})
    assert [region for region in ("east", "west") for pk in ("landed", "in-flight")
            if _item(clients[region], pk) is not None] == []
    assert replicated.stats()["backlog"] == 0 and not replicated.stats()["paused"]
    assert run[0] == ("replication.config",
                      {"lag": LagModel(LAG_MS / 2).describe(), "clock_offsets_ms": {"west": 40.0}})
    clients["west"].put_item(TableName=TABLE, Item={"pk": {"S": "next-run"}})  # west's DynamoDB back, replicating
    _until(lambda: _item(clients["east"], "next-run") is not None)
    assert _item(clients["west"], "in-flight") is None  # the dropped write never lands
    _until(lambda: any(kind == "replication.stats" for kind, _ in run))


def test_what_a_region_lacks_is_said_with_its_key_and_both_images_until_it_lands(
        tables: tuple[GlobalTables, dict[str, Any], Events]) -> None:
    replicated, clients, _ = tables
    clients["west"].put_item(TableName=TABLE, Item={"pk": {"S": "lease"}, "epoch": {"N": "4"}})
    _until(lambda: _item(clients["east"], "lease") is not None)
    replicated.pause()
    clients["west"].put_item(TableName=TABLE, Item={"pk": {"S": "lease"}, "epoch": {"N": "5"},
                                                    "data": {"L": []}})
    _until(lambda: replicated.missing("east") != [])  # the feed reports a write just after its answer
    [lacked] = replicated.missing("east")
    assert (lacked["table"], lacked["key"], lacked["held"], lacked["coming"]) == (
        TABLE, {"pk": "lease"}, {"pk": "lease", "epoch": 4}, {"pk": "lease", "epoch": 5})
    assert lacked["age_ms"] >= 0 and replicated.missing("west") == []
    replicated.resume()
    _until(lambda: replicated.missing("east") == [])
    assert _item(clients["east"], "lease") == {"pk": {"S": "lease"}, "epoch": {"N": "5"}, "data": {"L": []}}


def test_the_reports_given_to_the_automation_are_those_in_the_history_every_one_until_now(
        endpoints: dict[str, str]) -> None:
    """The failback decides on the replication's reports and the checker judges it on the history's: the
    same ones, each with the ``t`` and ``behind_ms`` written, and none made before ``now`` missing."""
    events = Events()
    replicated = GlobalTables(endpoints, LagModel(LAG_MS), events.emit, stats_every_s=0.02).start()
    try:
        replicated.pause()
        _client(replicated.feed_url("east")).put_item(TableName=TABLE, Item={"pk": {"S": "reported"}})
        _until(lambda: sum(kind == "replication.stats" for kind, _ in events) >= 5)
        now_ms, reports = replicated.reports(after_ms=-1.0)
        written = [(fields["t"], fields["behind_ms"]) for kind, fields in events if kind == "replication.stats"]
        assert reports[:len(written)] == written[:len(reports)] and len(reports) >= 5
        assert all(t <= now_ms for t, _ in reports) and reports[-1][1] > 0  # the paused write is behind
        assert replicated.reports(after_ms=reports[2][0])[1][:2] == reports[3:5]
    finally:
        replicated.stop()


def test_the_reports_keep_coming_while_the_pump_waits_for_a_write_in_flight(endpoints: dict[str, str]) -> None:
    """The pump holds an item exclusively to apply a replicated write of it, so it waits for the region's
    fleet's requests of that item in flight (their I/O); the replication's reports (what the failback
    decides on) must not wait with it: they go on, saying the write is behind."""
    events = Events()
    replicated = GlobalTables(endpoints, LagModel(0), events.emit, stats_every_s=0.02).start()
    try:
        stripe = replicated.stripes["west"][GlobalTables._stripe(TABLE, {"pk": {"S": "contended"}})]
        with stripe.hold_shared():  # west's fleet writing the item: its request in flight
            _client(replicated.feed_url("east")).put_item(TableName=TABLE, Item={"pk": {"S": "contended"}})
            _until(lambda: replicated.applying == 1)  # taken, waiting for the item
            before = sum(kind == "replication.stats" for kind, _ in events)
            _until(lambda: sum(kind == "replication.stats" for kind, _ in events) >= before + 5, timeout_s=5.0)
            assert replicated.applying == 1 and events[-1][1]["backlog"] == 1
        _until(lambda: replicated.stats()["backlog"] == 0)
    finally:
        replicated.stop()
