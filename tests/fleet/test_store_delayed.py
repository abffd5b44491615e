"""A message write held on the wire past a handover (a writer frozen mid-request, seen from the server):
sent while its writer held the stream, delivered after the stream changed hands and the new take-up marked
the log.  On the log nothing of it is stored; on b917e92's per-message put it landed.

The request goes through the embedded Toxiproxy server with a latency toxic on the request direction that is
far longer than the takeover takes, so it reaches the server after the acquire whatever the scheduling."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet.aws import AwsClients
from fleet.batch_log import Message
from fleet.clock import LeaseClock
from fleet.config import FleetConfig
from fleet.connection import ConnectionRunner, Fenced, HeldConnection
from fleet.expr import Lt, NotExists, Update, Write, any_of
from fleet.history import HistoryWriter
from fleet.lease import HardenedRules, Holder, Lease, rules_for
from fleet.store import AwsAdapter
from harness.faults.network import ToxiproxyClient, start_embedded_toxiproxy
from tests.fleet.lean_wire import wire
from tests.fleet.test_store import ME, OTHER, held_connection, new_pk, stored, take_over

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
def dynalite(engine_backend: Any) -> None:
    """Only on dynalite, skipped before any store is opened: the windows are dynalite's (no transactions);
    moto runs the same conditional puts."""
    if engine_backend.dynamodb_engine != "dynalite":
        pytest.skip("the windows are dynalite's; moto runs the same conditional puts")


@pytest.fixture
async def delayed_store(engine_config: FleetConfig, toxiproxy: ToxiproxyClient,
                        monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[AwsAdapter]:
    """A store whose DynamoDB requests reach the server ``HELD_MS`` after they are sent; its timeout (3 s, at
    scale 1) outlasts the hold, so each answer says what the server did."""
    target = os.environ["AWS_ENDPOINT_URL_DYNAMODB"].removeprefix("http://")
    proxy = toxiproxy.create_proxy("held-dynamodb", target)
    toxiproxy.add_toxic("held-dynamodb", "latency", stream="upstream", attributes={"latency": HELD_MS})
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", f"http://{proxy.listen}")
    try:
        async with AwsClients(engine_config.with_changes(timescale=1.0, aws_timeout_ms=3_000)) as aws:
            yield AwsAdapter(aws)
    finally:
        toxiproxy.delete_proxy("held-dynamodb")


async def old_rule_put(store: AwsAdapter, lease: Lease, holder: Holder, seq: int) -> None:
    """b917e92's message write without transactions, kept here as the oracle of the window: one item per
    sequence, put if ``attribute_not_exists(sk) OR epoch <= mine``."""
    write = Write(key={"pk": lease.pk, "sk": seq},
                  update=Update(set={"message_data": f"{lease.pk}:{seq}", "worker": holder.worker_id,
                                     "gen": holder.gen, "epoch": lease.epoch}),
                  condition=any_of(NotExists("sk"), Lt("epoch", lease.epoch + 1)), replace=True)
    await store.execute(store.config.messages_table, write, purpose="messages")


async def hand_over(store: AwsAdapter, window: str, pk: str, mine: Lease) -> tuple[Lease, Holder]:
    """The handover of ``window``: who holds the stream next, at which lease."""
    rules = HardenedRules(store.config)
    now = int(time.time() * 1000)
    if window == "re-adoption":  # the release's answer was lost and it never applied: ME takes it up again
        return mine, ME
    if window in ("drop", "transfer"):  # a release (a drop's, or a handoff's) that does not wait for the writer
        await store.execute(store.config.connections_table, rules.release(mine, ME, now, 0))
    return await take_over(store, rules, pk, OTHER), OTHER


@pytest.mark.parametrize("logic", ["b917e92", "log"])
@pytest.mark.parametrize("window", ["frozen mid-request", "drop", "transfer", "re-adoption"])
async def test_a_superseded_writers_late_write_is_stored_on_the_old_logic_and_refused_by_the_log(
        dynalite: None, store: AwsAdapter, delayed_store: AwsAdapter, window: str, logic: str) -> None:
    """Each window of issue 26, on dynalite: the old owner's write leaves while it holds the stream (its
    request held on the wire), the stream changes hands (a takeover, a drop or a transfer that does not wait
    for the writer, or the same incarnation taking it up again at the same epoch after a release whose answer
    was lost), and the new take-up begins before the write arrives.  On b917e92's per-message put the
    superseded writer's item lands (for a sequence the new owner has not stored yet); on the log the new
    take-up's mark takes the number the late put needs, so it is refused and nothing of it is stored."""
    pk = new_pk()
    mine = await held_connection(store, pk)
    config = store.config.with_changes(timescale=1.0)
    sent = wire(delayed_store.aws).sent  # the late write's log put has left for the proxy (sent lean)
    delayed_store.aws.ddb.meta.events.register("before-send.dynamodb.PutItem", lambda **_: sent.set())  # b917e92's
    if logic == "b917e92":
        late = asyncio.ensure_future(old_rule_put(delayed_store, mine, ME, 1))
    else:
        held = HeldConnection(lease=mine)
        await runner(config, store, ME).open_log(held, ME)  # its take-up, not delayed
        late = asyncio.ensure_future(runner(config, delayed_store, ME).persist_batch(held, [Message(1, 0, f"{pk}:1")]))
    await asyncio.wait_for(sent.wait(), 10)  # on the wire: held by the proxy for HELD_MS
    theirs, holder = await hand_over(store, window, pk, mine)
    if logic == "log":
        await runner(config, store, holder).open_log(HeldConnection(lease=theirs), holder)
    assert not late.done()
    if logic == "b917e92":
        await late
        assert [(i["worker"], i["epoch"]) for i in (await stored(store, pk)).values()] == [(ME.worker_id, 1)]
        return
    with pytest.raises(Fenced):
        await late
    log = list((await stored(store, pk)).values())
    assert [i["kind"] for i in log] == ["mark", "mark"]
    assert (log[-1]["worker"], log[-1]["epoch"]) == (holder.worker_id, theirs.epoch)
    assert log[-1]["take"] != log[0]["take"]  # a re-adoption is another take-up of the same incarnation


def runner(config: FleetConfig, store: AwsAdapter, me: Holder) -> ConnectionRunner:
    async def give_up(held: HeldConnection, reason: str) -> None:
        raise AssertionError(f"gave up {held.pk}: {reason}")
    return ConnectionRunner(config, rules_for(config), me, store, HistoryWriter(None, me.worker_id), LeaseClock(),
                            give_up, reconnect_policy="full")
