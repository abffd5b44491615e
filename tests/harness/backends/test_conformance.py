"""Backend conformance: what the fleet relies on, checked on every available DynamoDB engine.

Each engine gets its own embedded backend for this module.  Clients are the fleet's own (``AwsClients``
configured only through ``Backend.env()``), errors go through ``fleet.aws.aws_errors``.  Rates and
latencies are printed (``pytest -s``) for the record.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest
from botocore.exceptions import ClientError

from fleet.aws import AwsClients, aws_errors
from fleet.config import FleetConfig
from fleet.errors import ConditionFailed, StoreUnavailable
from fleet.schema import STATE_INDEX
from harness.backends import Backend, EmbeddedBackend, create_resources, start_embedded
from harness.backends.servers import dynalite_command, start_moto

_NO_DYNALITE = dynalite_command()[1]
ENGINES = [
    pytest.param("dynalite", marks=pytest.mark.skipif(
        _NO_DYNALITE is not None, reason=f"dynalite cannot run: {_NO_DYNALITE}")),
    "moto",
]
RACERS = 50
# moto serialises DynamoDB at ~100 requests/s: 30 rounds x 50 racers is ~15 s there, 100 rounds ~50 s.
ROUNDS = {"dynalite": 100, "moto": 30}
LEASE_MS = 20_000

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module", params=ENGINES)
def engine_backend(request: pytest.FixtureRequest) -> Iterator[EmbeddedBackend]:
    with start_embedded(dynamodb=request.param) as running:
        yield running


@pytest.fixture
async def aws(engine_backend: EmbeddedBackend, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[AwsClients]:
    async with _clients(engine_backend, monkeypatch) as clients:
        yield clients


def _clients(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> AwsClients:
    """The fleet's clients, pointed at ``backend`` by environment alone."""
    for name, value in backend.env().items():
        monkeypatch.setenv(name, value)
    return AwsClients(FleetConfig.from_env())


async def _acquire(aws: AwsClients, table: str, pk: str, owner: str, now_ms: int) -> bool:
    """The blog profile's acquire: take the lease if it never existed or has expired."""
    try:
        async with aws_errors("acquire"):
            await aws.ddb.update_item(
                TableName=table,
                Key={"pk": {"S": pk}},
                UpdateExpression="SET lease_owner = :w, lease_expires_at_ms = :exp",
                ConditionExpression="attribute_not_exists(lease_expires_at_ms) OR lease_expires_at_ms < :now",
                ExpressionAttributeValues={
                    ":w": {"S": owner},
                    ":exp": {"N": str(now_ms + LEASE_MS)},
                    ":now": {"N": str(now_ms)},
                },
            )
    except ConditionFailed:
        return False
    return True


async def _race(aws: AwsClients, rounds: int, label: str) -> tuple[list[int], float]:
    """``RACERS`` concurrent acquirers per round; even rounds race for a new item, odd rounds for the
    same item once the previous winner's lease has expired.  Returns winners per round and updates/s."""
    table = aws.config.connections_table
    run = uuid.uuid4().hex[:8]
    start_ms = int(time.time() * 1000)
    winners_per_round: list[int] = []
    racing_s = 0.0
    for round_no in range(rounds):
        pk = f"CONN#{label}-{run}-{round_no // 2}"
        now_ms = start_ms + (round_no % 2) * (LEASE_MS + 1)
        started = time.perf_counter()
        won = await asyncio.gather(
            *(_acquire(aws, table, pk, f"racer-{i}", now_ms) for i in range(RACERS))
        )
        racing_s += time.perf_counter() - started
        winners = [f"racer-{i}" for i, ok in enumerate(won) if ok]
        winners_per_round.append(len(winners))
        if len(winners) == 1:
            read = await aws.ddb.get_item(TableName=table, Key={"pk": {"S": pk}}, ConsistentRead=True)
            item = read["Item"]
            assert item["lease_owner"]["S"] == winners[0]
            assert int(item["lease_expires_at_ms"]["N"]) == now_ms + LEASE_MS
    return winners_per_round, rounds * RACERS / racing_s


async def test_exactly_one_of_fifty_concurrent_acquirers_wins(engine_backend: EmbeddedBackend,
                                                              aws: AwsClients) -> None:
    rounds = ROUNDS[engine_backend.dynamodb_engine]
    winners, rate = await _race(aws, rounds, "race")
    print(f"\n{engine_backend.dynamodb_engine}: {rounds} rounds x {RACERS} racers, "
          f"{rate:.0f} conditional updates/s from one client")
    assert winners == [1] * rounds


async def test_informative_stock_moto_lets_two_conditional_writers_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Informative only: why moto's DynamoDB is serialised.  Passes when the race shows, skips when not.

    Measured here: 4 to 8 of 30 rounds of 50 racers had two or more winners on the stock (unserialised)
    server; it stops at the first such round.
    """
    server = start_moto(tmp_path, name="moto-unserialised", serialise_dynamodb=False)
    winners: list[int] = []
    try:
        backend = Backend("embedded", "us-east-1", {"dynamodb": server.url, "sqs": server.url}, "")
        create_resources(backend.env(), FleetConfig())
        async with _clients(backend, monkeypatch) as aws:
            while len(winners) < 40 and max(winners, default=1) == 1:
                winners += (await _race(aws, 4, "stock"))[0]
    finally:
        server.stop()
    print(f"\nstock moto: winners per round {winners}")
    if max(winners) == 1:
        pytest.skip(f"stock moto produced no double winner in {len(winners)} rounds (timing-dependent)")
    assert max(winners) > 1


async def test_state_index_pages_return_every_item_exactly_once(aws: AwsClients) -> None:
    table = aws.config.connections_table
    state = f"STARTED-{uuid.uuid4().hex[:8]}"  # an index partition of this test's own
    now_ms = 1_000_000
    claimable = {f"CONN#page-{state}-{i}" for i in range(23)}
    items = [(pk, now_ms - 1 - i % 4) for i, pk in enumerate(sorted(claimable))]  # repeated range keys
    items += [(f"CONN#page-{state}-held-{i}", now_ms + 5_000) for i in range(5)]  # still leased: excluded
    await asyncio.gather(*(
        aws.ddb.put_item(TableName=table, Item={
            "pk": {"S": pk}, "desired_state": {"S": state}, "lease_expires_at_ms": {"N": str(expiry)},
        })
        for pk, expiry in items
    ))
    request: dict[str, Any] = {
        "TableName": table,
        "IndexName": STATE_INDEX,
        "KeyConditionExpression": "desired_state = :s AND lease_expires_at_ms < :now",
        "ExpressionAttributeValues": {":s": {"S": state}, ":now": {"N": str(now_ms)}},
        "Limit": 4,
    }
    seen: list[str] = []
    pages = 0
    while True:
        page = await aws.ddb.query(**request)
        pages += 1
        seen += [item["pk"]["S"] for item in page["Items"]]
        if "LastEvaluatedKey" not in page:
            break
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    assert sorted(seen) == sorted(claimable)
    assert pages >= 6


async def test_refused_condition_is_condition_failed(aws: AwsClients) -> None:
    update: dict[str, Any] = {
        "TableName": aws.config.connections_table,
        "Key": {"pk": {"S": f"CONN#absent-{uuid.uuid4().hex}"}},
        "UpdateExpression": "SET lease_owner = :w",
        "ConditionExpression": "lease_owner = :w",
        "ExpressionAttributeValues": {":w": {"S": "worker-1"}},
    }
    with pytest.raises(ClientError) as raw:
        await aws.ddb.update_item(**update)
    assert raw.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    with pytest.raises(ConditionFailed):
        async with aws_errors("renew"):
            await aws.ddb.update_item(**update)


async def test_sqs_round_trip(aws: AwsClients) -> None:
    queue = aws.config.queue_url
    await aws.sqs.purge_queue(QueueUrl=queue)
    body = json.dumps({"pk": "CONN#round-trip"})
    await aws.sqs.send_message(QueueUrl=queue, MessageBody=body)
    received = (await aws.sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=1)).get("Messages", [])
    assert [message["Body"] for message in received] == [body]
    await aws.sqs.delete_message(QueueUrl=queue, ReceiptHandle=received[0]["ReceiptHandle"])
    again = await aws.sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=0, VisibilityTimeout=0)
    assert again.get("Messages", []) == []


async def test_long_poll_returns_promptly_when_a_message_arrives_mid_wait(aws: AwsClients) -> None:
    """The poll answers when the message arrives, not when its wait ends: a poll answered by its timeout would
    take ``wait_s``, one answered by the message about half a second.  (It asserted "within 0.5 s of the send"
    until a loaded CI machine took 0.57 s; the point was never the latency.)"""
    queue = aws.config.queue_url
    await aws.sqs.purge_queue(QueueUrl=queue)
    wait_s = 6
    started = time.perf_counter()
    poll = asyncio.create_task(aws.sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=wait_s))
    # No event says "the server is now holding the poll"; give the request time to get there.
    await asyncio.sleep(0.5)
    assert not poll.done()
    sending = time.perf_counter()
    await aws.sqs.send_message(QueueUrl=queue, MessageBody=json.dumps({"pk": "CONN#mid-wait"}))
    received = await poll
    delivered = time.perf_counter()
    assert [json.loads(m["Body"])["pk"] for m in received.get("Messages", [])] == ["CONN#mid-wait"]
    print(f"\nlong poll delivered {1000 * (delivered - sending):.1f} ms after the send began "
          f"({1000 * (delivered - started):.0f} ms into a {wait_s} s wait)")
    assert delivered - started < wait_s / 2


async def test_cloudwatch_accepts_metric_data(aws: AwsClients) -> None:
    namespace = f"wsfleet-test-{uuid.uuid4().hex[:8]}"
    await aws.cloudwatch.put_metric_data(
        Namespace=namespace,
        MetricData=[{"MetricName": "connections_owned", "Value": 3.0, "Unit": "Count"}],
    )
    metrics = (await aws.cloudwatch.list_metrics(Namespace=namespace))["Metrics"]
    assert [metric["MetricName"] for metric in metrics] == ["connections_owned"]


@pytest.mark.parametrize("engine", ENGINES)
async def test_stop_leaves_no_process_and_requests_become_unavailable(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = start_embedded(dynamodb=engine)
    try:
        processes = [psutil.Process(pid) for pid in backend.pids()]
        processes += [child for process in processes for child in process.children(recursive=True)]
        log_dir = backend.log_dir
        async with _clients(backend, monkeypatch) as aws:
            tables = (await aws.ddb.list_tables())["TableNames"]
            assert aws.config.connections_table in tables
            backend.stop()
            with pytest.raises(StoreUnavailable):
                async with aws_errors("get"):
                    await aws.ddb.get_item(TableName=aws.config.connections_table, Key={"pk": {"S": "CONN#"}})
            with pytest.raises(StoreUnavailable):
                async with aws_errors("receive"):
                    await aws.sqs.receive_message(QueueUrl=aws.config.queue_url, WaitTimeSeconds=0)
    finally:
        backend.stop()
    assert len(processes) >= 2
    assert [process.pid for process in processes if process.is_running()] == []
    assert log_dir is not None and not log_dir.exists()
