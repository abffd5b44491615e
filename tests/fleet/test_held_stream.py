"""A held stream's life on the real ``Worker`` (issue 25's holes): taking a stream up again, letting it go,
the fence of each incarnation and of each renewal.

Each docstring says how the test fails on commit b917e92's logic."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from fleet.clock import LoopClock
from fleet.errors import ConditionFailed, StoreUnavailable
from fleet.expr import Write
from fleet.lease import WorkerRecord
from fleet.memstore import MemoryStore
from fleet.profiles import Sweep
from tests.fleet.memworker import consumer, history, until
from tests.fleet.test_worker_core import CONNS, PK, WORKERS, consuming, hold_writes, holding, releases, stop

pytestmark = [pytest.mark.timeout(60), pytest.mark.looptime]

MESSAGES = "wsfleet-messages"
EVERYTHING = Sweep(expired_before_ms=None, max_pages=None)


def is_release(table: str, write: Write) -> bool:
    return table == CONNS and write.update.set.get("lease_owner") == ""


def lose_the_answer_to_the_next(store: MemoryStore, which: Callable[[str, Write], bool]) -> asyncio.Event:
    """The next write ``which`` picks is answered as unknown at once while the request stays in the network:
    it lands (or is refused) when the returned event is set."""
    real = store.execute
    in_network = asyncio.Event()
    landing: list[asyncio.Task[None]] = []

    async def land(table: str, write: Write, purpose: str) -> None:
        await in_network.wait()
        with contextlib.suppress(ConditionFailed):
            await real(table, write, purpose)

    async def execute(table: str, write: Write, purpose: str = "coordination") -> dict[str, Any]:
        if landing or not which(table, write):
            return await real(table, write, purpose)
        landing.append(asyncio.create_task(land(table, write, purpose)))
        raise StoreUnavailable(f"{table}: answer lost, the request still on its way")

    store.execute = execute  # type: ignore[method-assign]
    return in_network


async def test_hole_3_a_release_whose_answer_was_lost_never_lets_a_sweep_take_the_same_epoch_up_again() -> None:
    """Hole 3.  At b917e92 a sweep that found the item still ours after a release of unknown outcome
    (``adopt``) took the stream up again at the same epoch, with no write: the release, still in the
    network, then landed and freed that epoch while the worker consumed it (another worker acquires at
    epoch + 1: a duplicate claim).  Now it is taken up again only through an acquire at epoch + 1, which the
    late release cannot undo."""
    async with holding() as (store, worker):
        in_network = lose_the_answer_to_the_next(store, is_release)
        await worker.give_up(worker.held[PK], "upstream unreachable past budget")
        assert releases(worker) == [(1, "info")] and PK not in worker.held
        await worker.reconciler.sweep(EVERYTHING)
        assert PK in worker.held
        in_network.set()
        await until(lambda: store.connection(PK).epoch != 1 or store.connection(PK).lease_owner == "")
        item = store.connection(PK)
        assert (item.lease_owner, item.owner_gen, item.epoch) == ("w1", worker.me.gen, worker.held[PK].lease.epoch)
        assert item.epoch == 2


async def test_hole_10_a_release_answered_late_leaves_no_consumer_of_the_released_lease() -> None:
    """Hole 10.  At b917e92 a sweep during a slow release (the stream no longer in ``held``, the item still
    ours) took the stream up again at the same epoch; the release then landed and the new consumer went on
    reading a stream whose lease was free (a Locust run: 2 s of duplicate claim).  Now the taking up again
    is an acquire conditioned on the epoch read: whichever of the two lands second is refused, and no
    consumer is left without the lease."""
    async with holding() as (store, worker):
        release_sent = hold_writes(store, CONNS)
        me = worker.me
        giving_up = asyncio.create_task(worker.give_up(worker.held[PK], "upstream unreachable past budget"))
        await until(lambda: PK not in worker.held)  # its release waits in the network
        sweeping = asyncio.create_task(worker.reconciler.sweep(EVERYTHING))
        await until(lambda: sweeping.done() or PK in worker.acquiring)
        release_sent.set()
        await asyncio.gather(giving_up, sweeping)
        await until(lambda: PK not in worker.acquiring)
        item = store.connection(PK)
        held = worker.held.get(PK)
        assert held is None or (item.lease_owner, item.owner_gen, item.epoch) == ("w1", me.gen, held.lease.epoch)


async def test_hole_5_a_drop_waits_for_the_writes_of_the_task_it_cancelled_before_releasing() -> None:
    """Hole 5.  At b917e92 a drop whose consume task outlived the stop by a heartbeat cancelled it and sent
    the release at once: the task's last write, already on its way, reached the store after the release
    (after another owner could have taken the stream).  Now the release waits for the cancelled task."""
    async with holding() as (store, worker):
        consumer(worker).stuck.add(PK)
        order: list[str] = []

        async def record(table: str, write: Write) -> None:
            order.append("release" if is_release(table, write) else table)

        store.before_write = record
        stop(store, PK, at_ms=10)
        await until(lambda: bool(releases(worker)))
    assert MESSAGES in order and order.index(MESSAGES) < order.index("release")


async def test_hole_6_a_shutdown_that_left_streams_unreleased_leaves_its_incarnation_to_lapse() -> None:
    """Hole 6.  At b917e92 a shutdown whose budget ran out retired its incarnation anyway: the streams it
    had not released, whose writes may still be in flight, were claimable at once, where the README says
    they are left to lapse at lease expiry.  Now the worker item is retired only when every stream was
    let go."""
    async with holding() as (store, worker):
        never = asyncio.Event()

        async def unanswered(table: str, write: Write) -> None:
            if table == CONNS:
                await never.wait()

        store.before_write = unanswered
        renewed = WorkerRecord.from_item(store.tables[WORKERS]["w1"]).expires_at_ms
    assert history(worker).of("lease.lost", pk=PK, reason="shutdown budget spent: left to lapse")
    assert WorkerRecord.from_item(store.tables[WORKERS]["w1"]).expires_at_ms >= renewed > 0


async def test_hole_6_a_shutdown_that_let_every_stream_go_retires_at_once() -> None:
    """The control for the test above: released streams leave nothing to wait for."""
    async with holding() as (store, worker):
        pass
    assert history(worker).of("lease.release", pk=PK, outcome="ok")
    assert WorkerRecord.from_item(store.tables[WORKERS]["w1"]).expires_at_ms == 0


async def test_hole_7_the_fence_of_a_renewal_never_outlives_the_expiry_it_wrote() -> None:
    """Hole 7.  At b917e92 the heartbeat computed the renewal's expiry, and each renewal read the fence clock
    for its anchor only when its task first ran: a stall in between (a GC pause, a starved CPU) moved the
    fence past the expiry written by the stall's length.  Now the anchor is read before the expiry is
    computed.  (The stall, 0.1 s, is shorter than the request timeout: the renewal still counts.  At b917e92,
    whose fence read ``monotonic_s`` itself, the stall was a blocking ``time.sleep``.)  The worker runs the
    ``fleet.incarnation.Incarnation`` machine: with its two readings swapped this fails (0.85 s > 0.75 s)."""
    async with holding() as (_store, worker):
        assert isinstance(worker.clock, LoopClock)
        clock = worker.clock
        computed: list[float] = []  # the fence clock when the stalled renewal's expiry was computed
        fence_after: list[float] = []  # its fence, when that renewal counted
        profile, emit = worker.profile, worker.history.emit
        renewals = profile.renewals

        def stall_before_sending(*args: Any, **kwargs: Any) -> Any:
            if not computed:
                computed.append(clock.fence_s())
                clock.stall(0.1)  # the process stalls as the expiry is computed, before it sends
            return renewals(*args, **kwargs)

        def watch(type: str, **fields: Any) -> dict[str, Any]:
            if type == "lease.renew" and fields.get("outcome") == "ok" and computed and not fence_after:
                fence_after.append(worker.fence.deadline)
            return emit(type, **fields)

        profile.renewals = stall_before_sending  # type: ignore[method-assign]
        worker.history.emit = watch  # type: ignore[method-assign]
        await until(lambda: bool(fence_after))
        assert fence_after[0] - computed[0] <= profile.rules.fence_ms / 1000.0


async def test_hole_8_a_new_incarnation_never_reopens_the_fence_of_the_one_it_replaced() -> None:
    """Hole 8.  At b917e92 one ``Fence`` served every incarnation and ``register`` mended it: a consume task
    of an abandoned incarnation, still finishing, passed ``allows()`` again once the next incarnation
    registered, and wrote as the stream's holder.  Now each incarnation has its own fence, and a broken one
    stays broken."""
    async with holding() as (_store, worker):
        first, fence = worker.me, worker.fence
        await worker.liveness.abandon("self-fenced: test", retire=False)
        await until(lambda: worker.liveness.registered and consuming(worker))
        assert worker.me != first and worker.fence.allows()
        assert not fence.allows()
