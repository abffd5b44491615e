"""A fenced message write held on the wire past a takeover (a writer frozen mid-request, seen from the
server): sent while its writer held the lease, delivered after another worker acquired it.  Where the
backend has transactions nothing of it is stored; on dynalite it never replaces the new owner's items.

The request goes through the embedded Toxiproxy server with a latency toxic on the request direction that is
far longer than the takeover takes, so it reaches the server after the acquire whatever the scheduling."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from fleet.aws import AwsClients
from fleet.config import FleetConfig
from fleet.errors import ConditionFailed
from fleet.lease import HardenedRules
from fleet.store import LeaseStore
from harness.faults.network import ToxiproxyClient, start_embedded_toxiproxy
from tests.fleet.test_store import ME, OTHER, held_connection, message, new_pk, stored, take_over

HELD_MS = 1500  # how long the proxy holds each request before delivering it

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def toxiproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToxiproxyClient]:
    url, stop = start_embedded_toxiproxy(Path(tmp_path_factory.mktemp("toxiproxy")))
    client = ToxiproxyClient(url)
    yield client
    client.close()
    stop()


@pytest.fixture
async def delayed_store(engine_config: FleetConfig, toxiproxy: ToxiproxyClient,
                        monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[LeaseStore]:
    """A store whose DynamoDB requests reach the server ``HELD_MS`` after they are sent; its timeout (3 s, at
    scale 1) outlasts the hold, so each answer says what the server did."""
    target = os.environ["AWS_ENDPOINT_URL_DYNAMODB"].removeprefix("http://")
    proxy = toxiproxy.create_proxy("held-dynamodb", target)
    toxiproxy.add_toxic("held-dynamodb", "latency", stream="upstream", attributes={"latency": HELD_MS})
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", f"http://{proxy.listen}")
    try:
        async with AwsClients(engine_config.with_changes(timescale=1.0, aws_timeout_ms=3_000)) as aws:
            yield LeaseStore(aws)
    finally:
        toxiproxy.delete_proxy("held-dynamodb")


async def test_a_fenced_write_delivered_after_a_takeover_is_refused(store: LeaseStore,
                                                                    delayed_store: LeaseStore) -> None:
    rules = HardenedRules(store.config)
    pk = new_pk()
    mine = await held_connection(store, pk)
    transactions = await store.transactions()
    assert await delayed_store.transactions() == transactions  # probed before the write goes out
    writes = [message(rules, mine, ME, seq) for seq in (1, 2)]
    late = (delayed_store.put_messages_fenced(pk, rules.held(mine, ME), writes) if transactions
            else delayed_store.put_message_unless_newer(writes[0]))
    sent = asyncio.ensure_future(late)  # on the wire: held by the proxy for HELD_MS
    theirs = await take_over(store, rules, pk, OTHER)  # a few ms: done long before the write arrives
    await store.put_message_unless_newer(message(rules, theirs, OTHER, 1))
    assert not sent.done()
    with pytest.raises(ConditionFailed):
        await sent
    items = await stored(store, pk)
    assert {seq: (item["epoch"], item["worker_id"]) for seq, item in items.items()} == {1: (2, OTHER.worker_id)}


async def test_a_late_write_of_a_sequence_the_new_owner_has_not_stored_meets_the_window(
        store: LeaseStore, delayed_store: LeaseStore) -> None:
    """The case the test above never reaches: the late write is of a sequence the new owner has not stored
    yet.  With transactions the fence is the lease itself, so it is refused and nothing is stored.  Without,
    this is the window the README names: the item lands (naming the superseded epoch and writer, which the
    zombie-writes checker flags), and the new owner's own write of that sequence then replaces it."""
    rules = HardenedRules(store.config)
    pk = new_pk()
    mine = await held_connection(store, pk)
    transactions = await store.transactions()
    assert await delayed_store.transactions() == transactions
    write = message(rules, mine, ME, 3)
    late = (delayed_store.put_messages_fenced(pk, rules.held(mine, ME), [write]) if transactions
            else delayed_store.put_message_unless_newer(write))
    sent = asyncio.ensure_future(late)
    theirs = await take_over(store, rules, pk, OTHER)
    assert not sent.done()
    if transactions:
        with pytest.raises(ConditionFailed):
            await sent
        assert await stored(store, pk) == {}
        return
    await sent
    assert {seq: (item["epoch"], item["worker_id"]) for seq, item in (await stored(store, pk)).items()} == {
        3: (1, ME.worker_id)}
    await store.put_message_unless_newer(message(rules, theirs, OTHER, 3))
    assert {seq: (item["epoch"], item["worker_id"]) for seq, item in (await stored(store, pk)).items()} == {
        3: (2, OTHER.worker_id)}
