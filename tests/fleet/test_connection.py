"""The consume loop's writes: fenced by the server even when the writer freezes mid-request, fenced again
right before each request leaves, a lost answer recognised, resumed after the log's tail.

Store-backed tests run on both engines (dynalite and moto: the same conditional puts of the message log).  A writer is
frozen between building its request and sending it by a ``tests.fleet.lean_wire.Wire`` that waits on an
event the test holds.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from fleet.allowlist import Allowlist
from fleet.aws import AwsClients
from fleet.batch_log import BATCH, MARK, MAX_MESSAGES, Batcher, LogItem, Message, Writer, log_key, segment_tag
from fleet.clock import LeaseClock, monotonic_s
from fleet.config import FleetConfig
from fleet.connection import (
    BACKLOG_MAX,
    MESSAGE_WRITES_IN_FLIGHT,
    ConnectionRunner,
    Fence,
    Fenced,
    HeldConnection,
    MessageSink,
)
from fleet.errors import ConditionFailed, StoreUnavailable, UpstreamError
from fleet.expr import Write
from fleet.history import HistoryWriter
from fleet.lease import HardenedRules, Holder, Lease, rules_for
from fleet.profiles import HardenedProfile, profile_for
from fleet.store import AwsAdapter
from fleet.upstream import MAX_QUEUED_FRAMES, UpstreamMessage, UpstreamSession
from tests.fleet.lean_wire import wire
from tests.fleet.memworker import until
from tests.fleet.test_store import ME, OTHER, held_connection, log_seqs, new_pk, stored, take_over

pytestmark = pytest.mark.timeout(120)


def runner_for(config: FleetConfig, store: AwsAdapter, history: HistoryWriter, me: Holder = ME) -> ConnectionRunner:
    async def give_up(held: HeldConnection, reason: str) -> None:
        raise AssertionError(f"gave up {held.pk}: {reason}")
    return ConnectionRunner(config, rules_for(config), me, store, history, LeaseClock(), give_up,
                            reconnect_policy=profile_for(config).reconnect_policy)


def admitting(runner: ConnectionRunner, url: str) -> ConnectionRunner:
    """``runner`` with an allowlist that admits ``url``'s host and port (a stub's port is only known once it
    listens), as a worker's ``WSFLEET_ALLOWED_WS_HOSTS`` would."""
    runner.allowlist = Allowlist.parse((urlsplit(url).netloc,))
    return runner


def messages(*seqs: int) -> list[UpstreamMessage]:
    return [UpstreamMessage(seq=seq, data=f"data-{seq}", ts=0.0) for seq in seqs]


def batch(*seqs: int) -> list[Message]:
    return [Message(seq, 0, f"data-{seq}") for seq in seqs]


def events(path: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in map(json.loads, path.read_text().splitlines()) if e["type"] == kind]


async def opened(runner: ConnectionRunner, held: HeldConnection, me: Holder = ME) -> HeldConnection:
    """``held`` once ``me`` has taken its log up (its mark stored)."""
    await runner.open_log(held, me)
    return held


async def test_a_writer_frozen_mid_request_is_refused_after_a_takeover(store: AwsAdapter, engine_config: FleetConfig,
                                                                       tmp_path: Path) -> None:
    """The old owner's batch is built and past every client-side check when it freezes; meanwhile another
    worker takes the lease over and marks the log.  The frozen put then finds its number taken by the mark
    and is refused: nothing of it is stored, on either engine."""
    rules = HardenedRules(engine_config)
    pk = new_pk()
    lease = await held_connection(store, pk)
    history = HistoryWriter(str(tmp_path / "w1.jsonl"), "w1")
    runner = runner_for(engine_config, store, history)
    held = await opened(runner, HeldConnection(lease=lease))
    gate = wire(store.aws, held=True)
    writing = asyncio.create_task(runner.persist_batch(held, batch(1, 2)))
    await asyncio.wait_for(gate.reached.wait(), 10)
    async with AwsClients(engine_config) as other_aws:  # the new owner is another process
        other = AwsAdapter(other_aws)
        theirs = await take_over(other, rules, pk, OTHER)
        await opened(runner_for(engine_config, other, HistoryWriter(None, "w2"), OTHER),
                     HeldConnection(lease=theirs), OTHER)
    gate.opened.set()
    with pytest.raises(Fenced):
        await asyncio.wait_for(writing, 10)
    assert [(i["kind"], i["worker"]) for i in (await stored(store, pk)).values()] == [("mark", "w1"), ("mark", "w2")]
    persisted = events(tmp_path / "w1.jsonl", "msg.persist")
    assert [e["outcome"] for e in persisted] == ["fail"] and "superseded" in persisted[0]["note"]


async def test_the_same_write_is_stored_when_nobody_took_over(store: AwsAdapter, engine_config: FleetConfig) -> None:
    """The control for the test above: the fence refuses only superseded writers."""
    pk = new_pk()
    lease = await held_connection(store, pk)
    runner = runner_for(engine_config, store, HistoryWriter(None, "w1"))
    held = await opened(runner, HeldConnection(lease=lease))
    await runner.persist_batch(held, batch(1, 2))
    assert await log_seqs(store, pk) == [1, 2]
    assert held.persisted == 2 and held.last_seq == 2


async def test_a_write_answered_after_a_new_incarnation_began_is_named_after_its_writer(
        store: AwsAdapter, engine_config: FleetConfig, tmp_path: Path) -> None:
    """A self-fence replaces the runner's incarnation while a write is in flight; its event must still name
    the incarnation that sent it, or the checkers would see the new one writing inside the old one's lease."""
    pk = new_pk()
    lease = await held_connection(store, pk)
    history = HistoryWriter(str(tmp_path / "w1.jsonl"), "w1")
    runner = runner_for(engine_config, store, history)
    held = await opened(runner, HeldConnection(lease=lease))
    gate = wire(store.aws, held=True)
    writing = asyncio.create_task(runner.persist_batch(held, batch(1)))
    await asyncio.wait_for(gate.reached.wait(), 10)
    runner.me = Holder(ME.worker_id, "next-incarnation")
    gate.opened.set()
    await asyncio.wait_for(writing, 10)
    assert [(e["gen"], e["outcome"]) for e in events(tmp_path / "w1.jsonl", "msg.persist")] == [(ME.gen, "ok")]


class LogStore:
    """Stands in for ``AwsAdapter``'s message log: an in-memory log that records each put as (kind, seq_from,
    seq_to) and, for a batch ending at a sequence of ``lost``, stores it but answers ``StoreUnavailable``
    (once each: the answer was lost)."""

    def __init__(self, lost: set[int] | None = None) -> None:
        self.lost = set(lost or ())
        self.items: dict[int, LogItem] = {}
        self.puts: list[tuple[str, int, int]] = []

    async def log_tail(self, pk: str) -> LogItem | None:
        return self.items[max(self.items)] if self.items else None

    async def log_item(self, pk: str, b: int) -> LogItem | None:
        return self.items.get(b)

    async def put_log_item(self, item: LogItem) -> None:
        self.puts.append((item.kind, item.seq_from, item.seq_to))
        if item.b in self.items:
            raise ConditionFailed("taken")
        self.items[item.b] = item
        if item.kind == "batch" and item.seq_to in self.lost:
            self.lost.discard(item.seq_to)
            raise StoreUnavailable("put: timed out")


HARDENED = FleetConfig(profile="hardened", timescale=0.1)
LEASE = Lease(pk="CONN#c", ws_url="ws://u/s/c", epoch=1, resume_seq=0)


def recording_runner(store: LogStore, history: HistoryWriter) -> ConnectionRunner:
    return runner_for(HARDENED, cast(AwsAdapter, store), history)


async def test_the_fence_is_checked_again_right_before_the_request_leaves() -> None:
    """A write that waited for its slot while the fence closed is never sent."""
    store, fence = LogStore(), Fence()
    runner = recording_runner(store, HistoryWriter(None, "w1"))
    held = await opened(runner, HeldConnection(lease=LEASE, fence=fence))
    for _ in range(MESSAGE_WRITES_IN_FLIGHT):
        await runner.message_slots.acquire()
    writing = asyncio.create_task(runner.persist_batch(held, batch(1, 2)))
    await asyncio.sleep(0)  # one turn of the loop: it queues for a slot (and is checked to wait)
    assert not writing.done()
    fence.deadline = monotonic_s()  # the fence closes while it waits
    for _ in range(MESSAGE_WRITES_IN_FLIGHT):
        runner.message_slots.release()
    with pytest.raises(Fenced):
        await asyncio.wait_for(writing, 5)
    assert store.puts == [("mark", 1, 0)]


async def test_a_write_of_a_stream_let_go_is_never_sent() -> None:
    """A write that waited for its slot while its stream was let go (released, or left to lapse because its
    task would not end) is never sent, whatever the fence says."""
    store = LogStore()
    runner = recording_runner(store, HistoryWriter(None, "w1"))
    held = await opened(runner, HeldConnection(lease=LEASE, fence=Fence()))
    for _ in range(MESSAGE_WRITES_IN_FLIGHT):
        await runner.message_slots.acquire()
    writing = asyncio.create_task(runner.persist_batch(held, batch(1, 2)))
    await asyncio.sleep(0)  # one turn of the loop: it queues for a slot (and is checked to wait)
    held.let_go = True
    for _ in range(MESSAGE_WRITES_IN_FLIGHT):
        runner.message_slots.release()
    with pytest.raises(Fenced):
        await asyncio.wait_for(writing, 5)
    assert store.puts == [("mark", 1, 0)] and held.fence.allows()


class DownLogStore(LogStore):
    """A log whose every batch put times out unanswered (a store out of reach): the writer retries it."""

    async def put_log_item(self, item: LogItem) -> None:
        if item.kind == BATCH:
            self.puts.append((item.kind, item.seq_from, item.seq_to))
            raise StoreUnavailable("put: timed out")
        await super().put_log_item(item)


class Frames:
    """A session that hands ``sent`` to its consumer and then ends, as a real one does: ``finished`` returns
    True when the consumer ended the reading, and raises what it raised or the session's end."""

    def __init__(self, sent: list[UpstreamMessage]) -> None:
        self.sent = sent
        self.ended: asyncio.Future[bool] | None = None

    def deliver_to(self, consumer: Callable[[UpstreamMessage], bool]) -> None:
        self.ended = asyncio.get_running_loop().create_future()
        try:
            for each in self.sent:
                if consumer(each):
                    self.ended.set_result(True)
                    return
        except Exception as exc:
            self.ended.set_exception(exc)
            return
        self.over()

    def over(self) -> None:
        self.interrupt(UpstreamError("upstream closed the session"))

    async def finished(self, idle_s: float | None = None) -> bool:
        assert self.ended is not None
        return await self.ended

    def interrupt(self, error: BaseException) -> None:
        if self.ended is not None and not self.ended.done():
            self.ended.set_exception(error)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Hanging(Frames):
    """A session that delivers ``sent`` and then nothing, staying open."""

    def over(self) -> None:
        pass


def unread() -> UpstreamSession:
    """A sink's session in tests that submit to the sink themselves."""
    return cast(UpstreamSession, Frames([]))


@pytest.mark.looptime
async def test_a_task_cancelled_with_its_backlog_unstored_ends_at_once_and_stores_nothing_more() -> None:
    """Explore seed 391: the worker stopped a stream whose backlog the store was slow to take and cancelled
    its task; the task, in the session's ``finally``, went on storing the backlog (each put retried), so it
    did not end, and stored for seconds after the stream was taken up again.  Cancelled, it ends at once."""
    store = DownLogStore()
    runner = recording_runner(store, HistoryWriter(None, "w1"))
    held = await opened(runner, HeldConnection(lease=LEASE, fence=Fence()))
    reading = asyncio.create_task(runner._read_session(cast(UpstreamSession, Hanging(messages(1, 2, 3))), held))
    try:
        await until(lambda: len(store.puts) >= 3)  # the batch was tried, and tried again
        reading.cancel()
        done, _ = await asyncio.wait({reading}, timeout=1.0)
        assert reading in done and reading.cancelled()
        tried = len(store.puts)
        await asyncio.sleep(1.0)  # a second on virtual time: the writer would have retried several times
        assert len(store.puts) == tried
    finally:
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)


async def test_a_batch_whose_answer_was_lost_is_sent_again_and_recognised_as_stored(tmp_path: Path) -> None:
    store = LogStore(lost={3})
    history = HistoryWriter(str(tmp_path / "w1.jsonl"), "w1")
    runner = recording_runner(store, history)
    held = await opened(runner, HeldConnection(lease=LEASE))
    await runner.persist_batch(held, batch(1, 2, 3))
    assert store.puts == [("mark", 1, 0), ("batch", 1, 3), ("batch", 1, 3)]  # its twin is refused, then judged
    assert [item.kind for item in store.items.values()] == ["mark", "batch"]
    persisted = events(tmp_path / "w1.jsonl", "msg.persist")
    assert [(e["outcome"], e["seq_from"], e["seq_to"]) for e in persisted] == [("info", 1, 3), ("ok", 1, 3)]
    assert held.persisted == 3 and held.last_seq == 3


async def test_a_take_ups_mark_event_names_its_take(tmp_path: Path) -> None:
    """The harness dates a same-epoch take's supersession at the later take's mark: the event says which."""
    store = LogStore()
    runner = recording_runner(store, HistoryWriter(str(tmp_path / "w1.jsonl"), "w1"))
    await opened(runner, HeldConnection(lease=LEASE))
    [mark] = events(tmp_path / "w1.jsonl", "log.mark")
    assert (mark["outcome"], mark["epoch"], mark["take"]) == ("ok", 1, store.items[1].writer.take)


async def test_behind_a_region_gate_a_take_up_marks_in_its_regions_segment(tmp_path: Path) -> None:
    """With a gate (a standby region may take over), the runner numbers the log in its region's segment
    (``fleet.region_gate.log_region_tag``), so the other region's unreplicated batches never share a key."""
    store = LogStore()
    gated = replace(HARDENED, region="us-west-2", region_gate_endpoints=("us-west-2=http://127.0.0.1:1",),
                    region_gate_control="arn:control-west")
    runner = runner_for(gated, cast(AwsAdapter, store), HistoryWriter(None, "w1"))
    await opened(runner, HeldConnection(lease=LEASE))
    assert list(store.items) == [log_key(0, segment_tag("us-west-2"), 1)]


async def test_messages_that_arrive_within_flush_ms_go_out_as_one_batch_and_a_session_end_flushes() -> None:
    """The sink waits up to ``flush_ms`` (200 ms at scale 0.1) for its oldest message: three messages read
    together are one put; the one read next waits for its own age, or goes at once when the session ends.  A
    backlog (messages emitted longer than that ago) goes at once."""
    store = LogStore()
    runner = recording_runner(store, HistoryWriter(None, "w1"))
    held = await opened(runner, HeldConnection(lease=LEASE))
    sink = MessageSink(runner, held, unread())
    for seq in (1, 2, 3):
        sink.submit(UpstreamMessage(seq=seq, data=f"data-{seq}", ts=time.time() * 1000))
        await asyncio.sleep(0)  # the writer runs between them: it waits for the oldest's age
    await until(lambda: len(store.puts) == 2)
    sink.submit(UpstreamMessage(seq=4, data="data-4", ts=time.time() * 1000))
    await sink.drain()
    assert store.puts == [("mark", 1, 0), ("batch", 1, 3), ("batch", 4, 4)]
    assert held.last_seq == 4
    backlog = MessageSink(runner, held, unread())
    backlog.submit(UpstreamMessage(seq=5, data="data-5", ts=0.0))  # emitted long ago
    await until(lambda: len(store.puts) == 4)  # written without a drain
    await backlog.drain()
    assert store.puts[-1] == ("batch", 5, 5)


async def test_a_message_queued_behind_a_batchs_first_does_not_wake_the_writer() -> None:
    """CPU per message (issue 26): the writer is woken by a batch's first message, which starts the batch's
    time, and when the queue fills a batch, which then goes at once; a message in between wakes nothing (each
    wake asks the batcher once how long to wait)."""
    waits: list[float | None] = []

    class Counted(Batcher):
        def wait_ms(self, *args: Any, **kwargs: Any) -> float | None:
            waits.append(super().wait_ms(*args, **kwargs))
            return waits[-1]

    store = LogStore()
    runner = runner_for(HARDENED.with_changes(flush_ms=600_000), cast(AwsAdapter, store), HistoryWriter(None, "w1"))
    held = await opened(runner, HeldConnection(lease=LEASE))
    sink = MessageSink(runner, held, unread())
    sink.batcher = Counted(sink.batcher.flush_ms)
    for seq in range(1, MAX_MESSAGES + 1):
        sink.submit(UpstreamMessage(seq=seq, data=f"data-{seq}", ts=time.time() * 1000))
        await asyncio.sleep(0)  # the writer may run between any two
    await until(lambda: len(store.puts) == 2)
    await sink.drain()

    assert store.puts == [("mark", 1, 0), ("batch", 1, MAX_MESSAGES)]  # full: it did not wait 600 s
    assert len(waits) == 2 and (waits[0] or 0) > 0 and waits[1] == 0  # the first message's wake; the full one's


class UpstreamStub:
    """A one-stream upstream: the first session gets sequences 6 and 7 and is closed; the second one is
    closed once the test ``release``s it.  Records what each session asked for."""

    def __init__(self) -> None:
        self.sessions: list[dict[str, Any]] = []
        self.reconnected = asyncio.Event()
        self.release = asyncio.Event()

    async def handler(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        query = parse_qs(urlsplit(ws.request.path).query)
        self.sessions.append({"from_seq": int(query["from_seq"][0]), "worker": ws.request.headers.get("X-Worker-Id"),
                              "gen": ws.request.headers.get("X-Worker-Gen")})
        if len(self.sessions) == 1:
            for seq in (6, 7):
                await ws.send(json.dumps({"seq": seq, "data": f"data-{seq}", "ts": time.time()}))
        else:
            self.reconnected.set()
            await self.release.wait()
        await ws.close()


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[str, UpstreamStub]]:
    stub = UpstreamStub()
    async with serve(stub.handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        yield f"ws://127.0.0.1:{port}/streams/c", stub


async def test_a_new_owner_marks_the_log_and_resumes_after_its_tail_and_says_which_incarnation_it_is(
        store: AwsAdapter, engine_config: FleetConfig, upstream: tuple[str, UpstreamStub]) -> None:
    """The previous owner stored 1..9 in its log above a checkpoint of 0: the new owner marks its take-up
    right after them, stores nothing of the replayed 6 and 7, and next asks the upstream for 10."""
    url, stub = upstream
    pk = new_pk()
    await held_connection(store, pk, OTHER, epoch=1)
    await put_log(store, pk, OTHER, 1, range(1, 6), range(6, 10))
    lease = await take_over(store, HardenedRules(engine_config), pk, ME)
    held = HeldConnection(lease=Lease(pk, url, lease.epoch, lease.resume_seq), last_seq=lease.resume_seq)
    consuming = asyncio.create_task(admitting(runner_for(engine_config, store, HistoryWriter(None, "w1")), url)
                                    .consume(held))
    await asyncio.wait_for(stub.reconnected.wait(), 20)
    held.stopping.set()
    stub.release.set()
    await asyncio.wait_for(consuming, 10)
    assert [s["from_seq"] for s in stub.sessions] == [1, 10]  # the first asks from the checkpoint
    assert {(s["worker"], s["gen"]) for s in stub.sessions} == {(ME.worker_id, ME.gen)}
    log = list((await stored(store, pk)).values())
    assert [(i["kind"], i["worker"], i["seq_to"]) for i in log[-2:]] == [("batch", "w2", 9), ("mark", "w1", 9)]


async def put_log(store: AwsAdapter, pk: str, holder: Holder, epoch: int, *batches: range) -> None:
    """``holder``'s take-up of an empty log at ``epoch``: its mark, then ``batches``."""
    writer = Writer(holder.worker_id, holder.gen, epoch, 1)
    await store.put_log_item(LogItem(pk, 1, MARK, writer, 1, 0, 0))
    for b, seqs in enumerate(batches, 2):
        await store.put_log_item(LogItem(pk, b, BATCH, writer, seqs[0], seqs[-1], 0,
                                         tuple(Message(s, 0, f"data-{s}") for s in seqs)))


class BacklogStub:
    """A stream whose frames ``seq`` carry ``ts`` = ``ts_of(seq)``; each session gets ``seqs`` from its
    ``from_seq`` on, then stays open (sending nothing) until the client leaves."""

    def __init__(self, seqs: range, ts_of: Callable[[int], float]) -> None:
        self.seqs = seqs
        self.ts_of = ts_of

    async def handler(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        first = int(parse_qs(urlsplit(ws.request.path).query)["from_seq"][0])
        for seq in self.seqs:
            if seq >= first:
                await ws.send(json.dumps({"seq": seq, "data": f"data-{seq}", "ts": self.ts_of(seq)}))
        await ws.wait_closed()


async def drain(store: AwsAdapter, config: FleetConfig, stub: BacklogStub, until_ms: Callable[[int], int],
                tmp_path: Path) -> tuple[HeldConnection, list[str], Path]:
    """Drain a stream ME took over from OTHER (which stored 1..2) with the stub as its upstream."""
    rules = HardenedRules(config)
    pk = new_pk()
    await held_connection(store, pk, OTHER, epoch=1)
    await put_log(store, pk, OTHER, 1, range(1, 3))
    lease = await take_over(store, rules, pk, ME)
    given_up: list[str] = []

    async def give_up(held: HeldConnection, reason: str) -> None:
        given_up.append(reason)

    path = tmp_path / "w1.jsonl"
    runner = ConnectionRunner(config, rules, ME, store, HistoryWriter(str(path), "w1"), LeaseClock(), give_up,
                              reconnect_policy=HardenedProfile(config).reconnect_policy)
    async with serve(stub.handler, "127.0.0.1", 0) as server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/streams/c"
        held = HeldConnection(lease=Lease(pk, url, lease.epoch, 0), drain_until_ms=until_ms(int(time.time() * 1000)))
        await asyncio.wait_for(admitting(runner, url).consume(held), 20)
    return held, given_up, path


async def test_a_drain_stores_what_was_emitted_before_the_cutoff_and_ends_at_the_first_message_past_it(
        store: AwsAdapter, engine_config: FleetConfig, tmp_path: Path) -> None:
    """Resumed at 3 (the first missing), stores 3..5 (emitted before 5 500 ms), not 6 (the first past it),
    then is released as drained; without the end rule it would keep consuming what came after the STOP."""
    held, given_up, path = await drain(store, engine_config, BacklogStub(range(1, 9), lambda seq: 1000.0 * seq),
                                       lambda now: 5_500, tmp_path)
    assert held.drained and given_up == ["drained"]
    assert await log_seqs(store, held.pk) == [1, 2, 3, 4, 5]
    assert [(e["seq"], e["epoch"], e["gen"]) for e in events(path, "drain.done")] == [(5, 2, ME.gen)]
    assert [e["reason"] for e in events(path, "ws.close")] == ["drained"]


async def test_a_drain_with_nothing_arriving_ends_once_the_clock_is_past_the_cutoff(
        store: AwsAdapter, engine_config: FleetConfig, tmp_path: Path) -> None:
    """The stream went quiet before the STOP: the drain stores what there was and ends (idle)."""
    tolerance = int(HardenedRules(engine_config).tolerance_ms)
    held, given_up, _ = await drain(store, engine_config, BacklogStub(range(1, 5), lambda seq: 0.0),
                                    lambda now: now - 2 * tolerance, tmp_path)
    assert held.drained and given_up == ["drained"]
    assert await log_seqs(store, held.pk) == [1, 2, 3, 4]


class SilencedStub(BacklogStub):
    """Its first session sends the backlog's first frame, then dies silently: it reads nothing more (pings
    unanswered) and sends nothing, like a proxy that stopped forwarding.  Later sessions are ``BacklogStub``'s."""

    def __init__(self, seqs: range, ts_of: Callable[[int], float]) -> None:
        super().__init__(seqs, ts_of)
        self.sessions: list[ServerConnection] = []

    async def handler(self, ws: ServerConnection) -> None:
        self.sessions.append(ws)
        if len(self.sessions) > 1:
            self.sessions[0].transport.abort()  # its client has gone: let the server see it
            await super().handler(ws)
            return
        first = self.seqs[0]
        await ws.send(json.dumps({"seq": first, "data": f"data-{first}", "ts": self.ts_of(first)}))
        ws.transport.pause_reading()
        await ws.wait_closed()


async def test_a_drain_whose_session_died_silently_does_not_end_on_that_silence(
        store: AwsAdapter, engine_config: FleetConfig, tmp_path: Path) -> None:
    """Silence past the cutoff ends a drain only on a session that answers a ping: the first session died
    after one frame, so the drain reopens from the next sequence and stores the rest before it ends."""
    tolerance = int(HardenedRules(engine_config).tolerance_ms)
    stub = SilencedStub(range(3, 6), lambda seq: 0.0)
    held, given_up, path = await drain(store, engine_config, stub, lambda now: now - 2 * tolerance, tmp_path)
    assert held.drained and given_up == ["drained"]
    assert await log_seqs(store, held.pk) == [1, 2, 3, 4, 5]
    assert [e["from_seq"] for e in events(path, "ws.open")] == [1, 4]  # the first from the checkpoint


async def test_a_session_that_skips_a_sequence_is_closed_to_ask_again_from_the_missing_one() -> None:
    """A frame lost on the way (a proxy dropping data mid-stream, as a timeout toxic does): at seed 1060 of
    the explore benchmark the worker stored 42, 44, 45 and advanced past 43 for good.  Now the gap ends the
    session (the caller reconnects from the last stored sequence + 1); the same gap a second time, which
    the upstream can no longer fill, is let through."""
    runner = recording_runner(LogStore(), HistoryWriter(None, "w1"))
    held = await opened(runner, HeldConnection(lease=LEASE, last_seq=40))
    sink = MessageSink(runner, held, unread())
    for each in messages(40, 41, 42):  # a replay of 40, then in order
        sink.submit(each)
    with pytest.raises(UpstreamError, match="43 missing, 44 arrived"):
        sink.submit(messages(44)[0])
    await sink.drain()
    assert held.last_seq == 42  # the next session asks from 43
    again = MessageSink(runner, held, unread())
    for each in messages(44, 45):  # 43 is gone for good: taken as it comes
        again.submit(each)
    await again.drain()
    assert held.last_seq == 45


async def test_a_gap_is_not_counted_as_read_so_a_stop_is_not_read_through_past_it() -> None:
    """Hole 4: the message that revealed the gap (44, emitted at 4 400 ms) was recorded as delivered before
    the sink refused it, so ``read_through`` took a STOP reaching 4 000 ms as read while 43 was never stored
    and no session would ask for it again.  Only a message the sink took counts as delivered."""
    runner = recording_runner(LogStore(), HistoryWriter(None, "w1"))
    held = await opened(runner, HeldConnection(lease=LEASE, fence=Fence(), last_seq=40))
    sink = MessageSink(runner, held, unread())
    session = [UpstreamMessage(seq=seq, data=f"data-{seq}", ts=100.0 * seq) for seq in (41, 42, 44)]
    with pytest.raises(UpstreamError, match="43 missing"):
        await runner._receive(cast(UpstreamSession, Frames(session)), held, sink)
    await sink.drain()
    assert held.last_ts_ms == 4_200.0  # 42's: the reach of a STOP past it is not read yet
    assert held.last_seq == 42


class Refusing:
    """An upstream that refuses every handshake with HTTP ``status`` and ``headers``."""

    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.headers = headers or {}

    def process_request(self, connection: ServerConnection, request: Request) -> Response:
        return Response(self.status, "Refused", Headers({**self.headers, "Content-Length": "0"}))

    async def handler(self, ws: ServerConnection) -> None:
        raise AssertionError("no handshake is accepted")


class Closes(HistoryWriter):
    """Keeps every ``ws.close`` event; ``enough`` is set once ``wanted`` were emitted."""

    def __init__(self, wanted: int) -> None:
        super().__init__(None, "w1")
        self.wanted = wanted
        self.events: list[dict[str, Any]] = []
        self.enough = asyncio.Event()

    def emit(self, type: str, **fields: Any) -> dict[str, Any]:
        event = super().emit(type, **fields)
        if type == "ws.close":
            self.events.append(event)
            if len(self.events) >= self.wanted:
                self.enough.set()
        return event


async def reconnects(upstream: Refusing, config: FleetConfig, wanted: int) -> list[dict[str, Any]]:
    """The first ``wanted`` ``ws.close`` events of a stream whose upstream is ``upstream``; stopped then."""
    history = Closes(wanted)
    runner = runner_for(config, cast(AwsAdapter, LogStore()), history)
    async with serve(upstream.handler, "127.0.0.1", 0, process_request=upstream.process_request) as server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/streams/c"
        held = HeldConnection(lease=Lease("CONN#c", url, 1, 0))
        consuming = asyncio.create_task(admitting(runner, url).consume(held))
        await asyncio.wait_for(history.enough.wait(), 10)
        held.stopping.set()  # ends the wait before the next attempt
        await asyncio.wait_for(consuming, 10)
    return history.events[:wanted]


@pytest.mark.parametrize(("config", "policy", "delays_ms"), [
    # the default: the profile's own policy, blog's fixed delay of the base (1 000 ms at scale 1)
    (FleetConfig(profile="blog", timescale=0.1), "none", [100.0]),
    # a configured policy: exponential from 1 ms, capped at 1.5 ms
    (HARDENED.with_changes(reconnect_policy="exponential", reconnect_base_ms=10, reconnect_max_ms=15), "exponential",
     [1.0, 1.5, 1.5]),
])
async def test_each_failed_attempt_records_its_policy_its_number_and_the_delay_chosen(
        config: FleetConfig, policy: str, delays_ms: list[float]) -> None:
    closes = await reconnects(Refusing(500), config, len(delays_ms))
    assert [(e["policy"], e["attempt"], e["retry_in_ms"]) for e in closes] == [
        (policy, n, delay) for n, delay in enumerate(delays_ms, 1)]
    assert all("HTTP 500" in e["reason"] and "retry_after_ms" not in e for e in closes)


@pytest.mark.parametrize(("config", "seconds", "retry_after_ms", "retry_in_ms"), [
    # full jitter's first draw is at most the base, 1 000 ms: the upstream's 2 s stand
    (FleetConfig(profile="hardened"), "2", 2000.0, 2000.0),
    # at scale 0.1 the upstream's seconds are tenths, as the base (100 ms) and the cap (1 000 ms) are
    (HARDENED, "2", 200.0, 200.0),
    (HARDENED, "20", 2000.0, 1000.0),
])
async def test_a_refusal_with_retry_after_delays_the_next_attempt_up_to_the_cap(
        config: FleetConfig, seconds: str, retry_after_ms: float, retry_in_ms: float) -> None:
    [close] = await reconnects(Refusing(429, {"Retry-After": seconds}), config, 1)
    assert (close["policy"], close["attempt"], close["retry_after_ms"], close["retry_in_ms"]) == (
        "full", 1, retry_after_ms, retry_in_ms)


async def test_a_worker_with_an_empty_allowlist_dials_no_url(upstream: tuple[str, UpstreamStub]) -> None:
    """As the router does, a worker that dials upstreams itself and was given no allowlist admits no host."""
    url, stub = upstream
    history = Closes(1)
    runner = runner_for(HARDENED, cast(AwsAdapter, LogStore()), history)
    held = HeldConnection(lease=Lease("CONN#c", url, 1, 0))
    consuming = asyncio.create_task(runner.consume(held))
    await asyncio.wait_for(history.enough.wait(), 10)
    held.stopping.set()
    await asyncio.wait_for(consuming, 10)
    assert "the allowlist (WSFLEET_ALLOWED_WS_HOSTS) is empty" in history.events[0]["reason"]
    assert stub.sessions == []


class Flow(Hanging):
    """An open session that records when its reading is paused and resumed."""

    def __init__(self) -> None:
        super().__init__([])
        self.flow: list[str] = []
        self.deliver_to(lambda message: False)

    def pause_reading(self) -> None:
        self.flow.append("pause")

    def resume_reading(self) -> None:
        self.flow.append("resume")


class GatedLogStore(LogStore):
    """A log whose batch puts wait until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def put_log_item(self, item: LogItem) -> None:
        if item.kind == BATCH:
            await self.gate.wait()
        await super().put_log_item(item)


async def test_a_full_backlog_pauses_the_sessions_reading_until_the_writer_has_stored_it() -> None:
    """Backpressure: messages are taken as they arrive, so the sink itself pauses the session's reading once
    ``BACKLOG_MAX`` wait to be stored, and resumes it when they are."""
    store = GatedLogStore()
    runner = recording_runner(store, HistoryWriter(None, "w1"))
    held = await opened(runner, HeldConnection(lease=LEASE))
    session = Flow()
    sink = MessageSink(runner, held, cast(UpstreamSession, session))
    for each in messages(*range(1, BACKLOG_MAX)):
        sink.submit(each)
    assert session.flow == []
    sink.submit(messages(BACKLOG_MAX)[0])
    assert session.flow == ["pause"]
    store.gate.set()
    await until(lambda: session.flow == ["pause", "resume"])
    assert held.last_seq == BACKLOG_MAX
    await sink.drain()


async def test_a_writer_that_fails_ends_the_sessions_reading_with_its_error() -> None:
    """A write refused by the fence ends the reading at once, not at the next message (which a session
    paused for its backlog would never read)."""
    runner = recording_runner(LogStore(), HistoryWriter(None, "w1"))
    held = await opened(runner, HeldConnection(lease=LEASE))
    session = Flow()
    sink = MessageSink(runner, held, cast(UpstreamSession, session))
    held.let_go = True
    sink.submit(messages(1)[0])  # emitted long ago: written at once, and refused
    with pytest.raises(Fenced):
        await asyncio.wait_for(session.finished(), 5)
    with pytest.raises(Fenced):
        await sink.drain()  # what is queued is not stored either


class BlogStore:
    """Stands in for ``AwsAdapter`` under ``blog``: records each message write, and how many were in flight
    at once; each waits until the test opens the gate."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.written: list[Write] = []
        self.in_flight = self.most_in_flight = 0

    async def execute(self, table: str, write: Write, purpose: str = "") -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.gate.wait()
            self.written.append(write)
        finally:
            self.in_flight -= 1


async def test_blog_stores_one_message_at_a_time_in_order_and_pauses_reading_behind_a_slow_write() -> None:
    store = BlogStore()
    runner = runner_for(FleetConfig(profile="blog", timescale=0.1), cast(AwsAdapter, store), HistoryWriter(None, "w1"))
    held = HeldConnection(lease=LEASE)
    session = Flow()
    sink = MessageSink(runner, held, cast(UpstreamSession, session))
    for each in messages(*range(1, MAX_QUEUED_FRAMES + 1)):
        sink.submit(each)
    assert session.flow == ["pause"]
    store.gate.set()
    await until(lambda: session.flow == ["pause", "resume"])
    assert [w.update.set["message_data"] for w in store.written] == [f"data-{seq}" for seq in
                                                                     range(1, MAX_QUEUED_FRAMES + 1)]
    assert store.most_in_flight == 1
    assert held.last_seq == MAX_QUEUED_FRAMES and held.persisted == MAX_QUEUED_FRAMES
    await sink.drain()
