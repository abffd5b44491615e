"""The store against real engines (dynalite and moto): the server-side fence on message writes, the resume
point, the skew read from ``Date`` headers, and the read consistency each profile's client settings ask for."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from types import SimpleNamespace
from typing import Any, cast

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from fleet.aws import AwsClients, ClientSettings, aws_errors
from fleet.batch_log import BATCH, MARK, LogItem, Message, Writer
from fleet.config import FleetConfig
from fleet.errors import ConditionFailed, StoreError, StoreUnavailable
from fleet.lease import STARTED, HardenedRules, Holder, Lease
from fleet.store import NOTIFY_REQUESTS_IN_FLIGHT, AwsAdapter, from_typed, to_typed
from tests.fleet.lean_wire import refusal, wire
from tests.fleet.memworker import until

ME = Holder("w1", "gen-a")
OTHER = Holder("w2", "gen-b")

pytestmark = pytest.mark.timeout(120)


def new_pk() -> str:
    return f"CONN#store-{uuid.uuid4().hex[:10]}"


async def held_connection(store: AwsAdapter, pk: str, holder: Holder = ME, epoch: int = 1) -> Lease:
    """A STARTED connection item owned by ``holder`` at ``epoch``; the lease it grants."""
    item = {"pk": pk, "desired_state": STARTED, "ws_url": "ws://u/s/c", "lease_owner": holder.worker_id,
            "owner_gen": holder.gen, "epoch": epoch, "last_seq": 0}
    await store.aws.ddb.put_item(TableName=store.config.connections_table, Item=to_typed(item))
    return Lease.granted(item)


async def take_over(store: AwsAdapter, rules: HardenedRules, pk: str, taker: Holder) -> Lease:
    """``taker`` acquires the connection the way a worker does, from a consistent read."""
    seen = await store.get_connection(pk)
    assert seen is not None
    item = await store.execute(store.config.connections_table, rules.acquire(pk, taker, int(time.time() * 1000), seen))
    return Lease.granted(item)


def message(rules: HardenedRules, lease: Lease, holder: Holder, seq: int) -> dict[str, Any]:
    return rules.message(lease, holder, seq, f"data-{seq}", int(time.time() * 1000)).apply(None)


async def log_seqs(store: AwsAdapter, pk: str) -> list[int]:
    """The sequences of ``pk``'s message log, in log order (a batch's msgs: JSON text of [seq, ts_ms, data])."""
    return [seq for item in (await stored(store, pk)).values() for seq, _, _ in json.loads(item.get("msgs", "[]"))]


async def stored(store: AwsAdapter, pk: str) -> dict[int, dict[str, Any]]:
    response = await store.aws.ddb.query(
        TableName=store.config.messages_table, KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues=to_typed({":pk": pk}), ConsistentRead=True)
    return {int(item["sk"]): item for item in map(from_typed, response.get("Items", []))}


async def test_a_log_item_is_put_only_onto_a_free_number_and_read_back(store: AwsAdapter) -> None:
    """One conditional PutItem per item, on both engines; the tail is the highest number, read consistently."""
    pk = new_pk()
    assert await store.log_tail(pk) is None
    before = store.aws.requests["messages"]
    mark = LogItem(pk, 1, MARK, Writer("w1", "g", 1, 1), 1, 0, 5)
    batch = LogItem(pk, 2, BATCH, Writer("w1", "g", 1, 1), 1, 2, 6, (Message(1, 10, "a"), Message(2, 11, "b")))
    await store.put_log_item(mark)
    await store.put_log_item(batch)
    with pytest.raises(ConditionFailed):
        await store.put_log_item(LogItem(pk, 2, MARK, Writer("w2", "g", 2, 1), 3, 2, 7))
    assert await store.log_tail(pk) == batch
    assert await store.log_item(pk, 1) == mark and await store.log_item(pk, 3) is None
    assert store.aws.requests["messages"] - before == 6
    assert await log_seqs(store, pk) == [1, 2]


@pytest.mark.parametrize("code", ["AccessDeniedException", "ExpiredTokenException", "ResourceNotFoundException"])
async def test_a_first_write_refused_for_another_reason_is_raised_and_leaves_the_fence_as_it_was(
        store: AwsAdapter, code: str) -> None:
    """Hole 9: at b917e92 a first transactions probe refused for a reason that says nothing about the backend
    (an expired token, access denied, a table not there yet) was remembered for the process's life as "no
    transactions", downgrading the fence for good.  There is no probe and nothing to remember now: every
    backend gets the same conditional put of a log item.  A first put refused that way is raised, and the
    next put of that writer is still refused on a taken number and stored on a free one."""
    pk = new_pk()
    mark = LogItem(pk, 1, MARK, Writer("w2", "g", 2, 1), 1, 0, 5)
    await store.put_log_item(mark)
    wire(store.aws).canned.append(refusal(code))
    stale = LogItem(pk, 1, BATCH, Writer("w1", "g", 1, 1), 1, 1, 6, (Message(1, 10, "a"),))
    with pytest.raises(StoreError, match=code):
        await store.put_log_item(stale)
    with pytest.raises(ConditionFailed):
        await store.put_log_item(stale)
    after = LogItem(pk, 2, BATCH, Writer("w2", "g", 2, 1), 1, 1, 7, (Message(1, 10, "a"),))
    await store.put_log_item(after)
    assert await store.log_item(pk, 1) == mark and await store.log_tail(pk) == after


async def test_a_malformed_request_unchecked_by_the_client_is_refused_by_the_service(store: AwsAdapter) -> None:
    """``hardened`` skips botocore's client-side parameter validation (``ClientSettings``): a request the API
    model forbids (a PutItem without its required item) is sent, and the backend refuses it: a definite
    ``StoreError`` from its answer, not the SDK's ``ParamValidationError``."""
    no_item: dict[str, Any] = {"TableName": store.config.messages_table}
    with pytest.raises(StoreError) as raised:
        async with aws_errors("put"):
            await store.aws.ddb.put_item(**no_item)
    assert isinstance(raised.value.__cause__, ClientError)


@pytest.mark.parametrize("offset_ms", [0, 5_000, -2_500])
async def test_the_skew_bounds_contain_the_lease_clocks_offset(engine_config: FleetConfig, offset_ms: int) -> None:
    async with AwsClients(engine_config.with_changes(clock_offset_ms=offset_ms)) as aws:
        store = AwsAdapter(aws)
        assert store.clock_skew_bounds() is None
        for _ in range(8):
            await store.get_connection(new_pk())
        bounds = store.clock_skew_bounds()
    assert bounds is not None
    lower, upper = bounds
    assert lower < offset_ms <= upper
    assert upper - lower <= 1_000 + 500  # at worst the header's resolution plus a slow round trip


@pytest.mark.parametrize(("settings", "consistent"), [
    (ClientSettings.sdk_defaults(), False),
    (None, True),
])
async def test_the_desired_state_read_follows_the_client_settings(engine_config: FleetConfig,
                                                                  settings: ClientSettings | None,
                                                                  consistent: bool) -> None:
    asked: list[bool] = []
    async with AwsClients(engine_config, settings=settings) as aws:
        aws.ddb.meta.events.register("provide-client-params.dynamodb.GetItem",
                                     lambda params, **_: asked.append(params["ConsistentRead"]))
        await AwsAdapter(aws).get_connection(new_pk())
    assert asked == [consistent]



class HeldSqs:
    """A stand-in SQS client whose SendMessageBatch requests wait until ``opened`` is set; it counts how
    many wait at once and refuses the batch that carries ``refused_pk``."""

    def __init__(self, refused_pk: str) -> None:
        self.opened = asyncio.Event()
        self.waiting = self.most_waiting = 0
        self.sent: list[str] = []
        self.refused_pk = refused_pk

    async def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.waiting += 1
        self.most_waiting = max(self.most_waiting, self.waiting)
        await self.opened.wait()
        self.waiting -= 1
        pks = [json.loads(entry["MessageBody"])["pk"] for entry in Entries]
        if self.refused_pk in pks:
            raise EndpointConnectionError(endpoint_url=QueueUrl)
        self.sent += pks
        return {"Successful": [], "Failed": []}


async def test_an_announcement_sends_its_batches_together_and_tries_every_one() -> None:
    sqs = HeldSqs(refused_pk="CONN#p005")
    aws = SimpleNamespace(config=FleetConfig(queue_url="http://q"), sqs=sqs, errors=Counter(), requests=Counter())
    handoffs = [(f"CONN#p{i:03d}", 1) for i in range(200)]
    announcing = asyncio.create_task(AwsAdapter(cast(AwsClients, aws)).notify(handoffs))
    await until(lambda: sqs.waiting == NOTIFY_REQUESTS_IN_FLIGHT)
    sqs.opened.set()
    with pytest.raises(StoreUnavailable):
        await announcing
    assert sqs.most_waiting == NOTIFY_REQUESTS_IN_FLIGHT
    assert sorted(sqs.sent) == [pk for pk, _ in handoffs if not pk.startswith("CONN#p00")]


async def test_an_announcement_reaches_the_queue_whole(store: AwsAdapter) -> None:
    prefix = f"CONN#{uuid.uuid4().hex[:8]}-"
    handoffs = [(f"{prefix}{i}", i) for i in range(25)]
    await store.notify(handoffs)
    seen: dict[str, int | None] = {}
    async with asyncio.timeout(20):
        while len(seen) < len(handoffs):
            notes = await store.receive_notifications(wait=False)
            seen |= {note.pk: note.released_epoch for note in notes if note.pk.startswith(prefix)}
    assert seen == dict(handoffs)
