"""Death notices (``fleet.deathnotice``): parsing, and the real ``Worker`` on the in-memory store burying a
dead incarnation only when ECS confirms its task stopped."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from fleet.deathnotice import DeathNotice, parse_death_notice, stopped_at_in
from fleet.expr import Write
from fleet.lease import HardenedRules, WorkerRecord
from fleet.memstore import MemoryStore
from fleet.profiles import profile_for
from fleet.store import _notification
from fleet.worker import Worker
from tests.fleet.memworker import add_stream, config, consumer, history, running, until

PK = "CONN#c1"
WORKERS = "wsfleet-workers"
CLUSTER = "arn:aws:ecs:us-east-1:123456789012:cluster/wsfleet"
DEAD_TASK = "arn:aws:ecs:us-east-1:123456789012:task/wsfleet/dead"
LIVE_TASK = "arn:aws:ecs:us-east-1:123456789012:task/wsfleet/live"
FAR_FUTURE_MS = 10**13  # a worker item that would not lapse during the test


@pytest.mark.parametrize("task_status", ["STOPPED", "DEPROVISIONING", "STOPPING"])
def test_a_task_whose_container_stopped_is_a_notice_and_round_trips(task_status: str) -> None:
    """Fargate reports the container STOPPED at once and the task STOPPED often tens of seconds later:
    each event says the process exited."""
    notice = DeathNotice(DEAD_TASK, CLUSTER, "Essential container in task exited")
    event = notice.event(task_status, exit_code=137)
    assert parse_death_notice(event) == notice
    assert parse_death_notice(json.loads(json.dumps(event))) == notice
    assert stopped_at_in({"tasks": [{**event["detail"], "stoppedAt": 1}]}, DEAD_TASK) == 1_000


@pytest.mark.parametrize("change", [
    {"lastStatus": "RUNNING", "containers": [{"name": "worker", "lastStatus": "RUNNING"}]},
    {"lastStatus": "DEPROVISIONING", "containers": []},
    {"lastStatus": "STOPPING", "containers": [{"lastStatus": "STOPPED"}, {"lastStatus": "RUNNING"}]},
    {"taskArn": ""},
    {"taskArn": 7},
    {"clusterArn": None},
])
def test_anything_but_a_named_task_whose_process_exited_is_no_notice(change: dict[str, Any]) -> None:
    event = DeathNotice(DEAD_TASK, CLUSTER).event()
    event["detail"].update(change)
    assert parse_death_notice(event) is None


def test_describe_tasks_dates_only_the_task_asked_about_once_it_exited() -> None:
    """The stop time of the task's process: its containers' (``executionStoppedAt``), else the task's; none
    while it runs, for another task, or for a STOPPED task whose answer carries no time (the pinned moto's
    after its reads had moved it)."""
    running = {"taskArn": DEAD_TASK, "lastStatus": "RUNNING", "containers": [{"lastStatus": "RUNNING"}]}
    stopped_at, exited_at = datetime(2026, 1, 2, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)
    assert stopped_at_in({"tasks": [{**running, "stoppedAt": stopped_at}]}, DEAD_TASK) is None
    assert stopped_at_in({"tasks": [], "failures": [{"arn": DEAD_TASK, "reason": "MISSING"}]}, DEAD_TASK) is None
    assert stopped_at_in({"tasks": [{"taskArn": "other", "lastStatus": "STOPPED", "stoppedAt": 5}]}, DEAD_TASK) is None
    assert stopped_at_in({"tasks": [{"taskArn": DEAD_TASK, "lastStatus": "STOPPED"}]}, DEAD_TASK) is None
    stopped = {"taskArn": DEAD_TASK, "lastStatus": "STOPPED", "stoppedAt": stopped_at}
    assert stopped_at_in({"tasks": [stopped]}, DEAD_TASK) == stopped_at.timestamp() * 1000
    assert stopped_at_in({"tasks": [{**stopped, "executionStoppedAt": exited_at}]}, DEAD_TASK) == (
        exited_at.timestamp() * 1000)
    assert stopped_at_in({"tasks": [{**stopped, "stoppedAt": 1.5}]}, DEAD_TASK) == 1_500  # as JSON carries it


def test_queue_bodies_become_hints_notices_or_nothing() -> None:
    assert _notification('{"pk": "CONN#a", "released_epoch": 3}', "r").released_epoch == 3
    assert _notification('{"pk": "CONN#a", "released_epoch": true}', "r").released_epoch is None
    death = _notification(json.dumps(DeathNotice(DEAD_TASK, CLUSTER).event()), "r")
    assert (death.pk, death.death) == ("", DeathNotice(DEAD_TASK, CLUSTER))
    for malformed in ("not json", "[1, 2]", '{"detail-type": "Something Else"}'):
        note = _notification(malformed, "r")
        assert (note.pk, note.death) == ("", None)


# A lease long enough that the crashed owner's worker item, renewed as the test starts, outlives the test.
LONG_LEASE = config(lease_ms=400_000)


def now_ms() -> int:
    return int(time.time() * 1000)


def crashed_owner(store: MemoryStore, task_arn: str = DEAD_TASK, gen: str = "gen-b",
                  expires_at_ms: int | None = None) -> None:
    """``PK`` STARTED and held by w2 (epoch 3), whose worker item, registered with ``task_arn``, was renewed
    as the test starts (so it expires a lease later; or at ``expires_at_ms``): without the notice nobody may
    take it."""
    add_stream(store, PK, lease_owner="w2", owner_gen="gen-b", epoch=3, lease_expires_at_ms=5, last_seq=7)
    expires = now_ms() + LEASE_MS if expires_at_ms is None else expires_at_ms
    store.tables[WORKERS]["w2"] = {"pk": "w2", "gen": gen, "expires_at_ms": expires, "task_arn": task_arn}


LEASE_MS = int(HardenedRules(LONG_LEASE).lease_ms)


async def test_a_confirmed_notice_buries_the_incarnation_and_its_streams_are_taken_at_once() -> None:
    store = MemoryStore(LONG_LEASE)
    crashed_owner(store)
    store.stopped_tasks[DEAD_TASK] = now_ms()  # its process exited after its last renewal
    async with running(store) as worker:
        store.send("", death=DeathNotice(DEAD_TASK, CLUSTER))
        await until(lambda: (PK, worker.me.gen) in consumer(worker).consumed)
        store.send("", death=DeathNotice(DEAD_TASK, CLUSTER))  # the same exit's next event: nothing left to do
        await until(lambda: len(history(worker).of("death.notice")) == 2)
        notice, again = history(worker).of("death.notice")
    assert (notice["outcome"], notice["buried"]) == ("confirmed", ["w2@gen-b"])
    assert (again["outcome"], again["buried"]) == ("confirmed", [])
    assert consumer(worker).consumed == [(PK, worker.me.gen)]
    assert history(worker).of("lease.acquire", pk=PK, outcome="ok")[0]["epoch"] == 4
    assert WorkerRecord.from_item(store.tables[WORKERS]["w2"]).expires_at_ms == 0


async def test_notices_for_a_live_worker_that_ecs_calls_stopped_never_bury_it() -> None:
    """Hole 1: ECS reported the live w2's task STOPPED (the pinned moto did after four DescribeTasks, and
    three notices a heartbeat apart each asked it again), and the burial rested on that answer alone: w2
    was buried while it consumed, and w1 took its stream at epoch + 1.  w2 has renewed since the stop time
    ECS reports, so it is alive: no notice buries it, and its stream stays its own."""
    store = MemoryStore(config())
    add_stream(store, PK)
    rules = HardenedRules(store.config)

    def renewed_after(at_ms: int) -> bool:
        return WorkerRecord.from_item(store.tables[WORKERS]["w2"]).expires_at_ms - rules.lease_ms > at_ms

    async with running(store, config(worker_id="w2", task_arn=LIVE_TASK)) as w2:
        await until(lambda: (PK, w2.me.gen) in consumer(w2).consumed)
        store.stopped_tasks[LIVE_TASK] = now_ms()
        async with running(store) as w1:
            for sent in range(1, 4):
                stamp = now_ms()
                await until(lambda stamp=stamp: renewed_after(stamp))  # a heartbeat apart: w2 renewed since
                store.send("", death=DeathNotice(LIVE_TASK, CLUSTER))
                await until(lambda sent=sent: len(notices(w1, w2)) == sent)
            assert store.connection(PK).lease_owner == "w2" and store.connection(PK).epoch == 1
            assert renewed_after(stamp)  # never buried (its clean exit, below, retires it)
    assert [(n["outcome"], n["buried"]) for n in notices(w1, w2)] == [("confirmed", [])] * 3
    assert consumer(w1).consumed == [] and consumer(w2).consumed == [(PK, w2.me.gen)]


def notices(*workers: Worker) -> list[dict[str, Any]]:
    return sorted((n for w in workers for n in history(w).of("death.notice")), key=lambda n: float(n["t"]))


async def test_a_renewal_that_lands_before_the_burial_write_keeps_the_incarnation_alive() -> None:
    """Read as not renewed since the stop, w2 renews before the burial lands: the burial is conditioned on
    the renewal it read, so it is refused and w2 lives on (before, it was conditioned on its generation and
    task alone, and buried the incarnation that had just renewed)."""
    store = MemoryStore(LONG_LEASE)
    crashed_owner(store)
    store.stopped_tasks[DEAD_TASK] = now_ms()

    async def renew_first(table: str, write: Write) -> None:
        if table == WORKERS and write.key == {"pk": "w2"}:
            store.tables[WORKERS]["w2"]["expires_at_ms"] = now_ms() + 1 + LEASE_MS

    store.before_write = renew_first
    async with running(store) as worker:
        store.send("", death=DeathNotice(DEAD_TASK, CLUSTER))
        await until(lambda: bool(history(worker).of("death.notice")))
    [notice] = history(worker).of("death.notice")
    assert notice["buried"] == []
    assert store.tables[WORKERS]["w2"]["expires_at_ms"] > 0 and consumer(worker).consumed == []


async def test_a_forged_notice_for_a_live_task_changes_nothing() -> None:
    """ECS says the task is running (here: not in ``stopped_tasks``): the notice is refuted, its worker
    item untouched, and a sweep still finds nothing claimable."""
    store = MemoryStore(config())
    crashed_owner(store, expires_at_ms=FAR_FUTURE_MS)
    async with running(store) as worker:
        store.send("", death=DeathNotice(DEAD_TASK, CLUSTER))
        await until(lambda: bool(history(worker).of("death.notice")))
        looks = len(history(worker).of("reconcile"))
        worker.reconciler.request_sweep()
        await until(lambda: len(history(worker).of("reconcile")) > looks)
        assert PK not in worker.held and PK not in worker.acquiring
    [notice] = history(worker).of("death.notice")
    assert (notice["outcome"], notice["buried"]) == ("refuted", [])
    assert store.tables[WORKERS]["w2"]["expires_at_ms"] == FAR_FUTURE_MS
    assert consumer(worker).consumed == []


async def test_a_late_notice_never_buries_the_incarnation_registered_since() -> None:
    """w2 restarted on a new task after the old one stopped: the old task's notice names no live item."""
    store = MemoryStore(LONG_LEASE)
    crashed_owner(store, task_arn=DEAD_TASK + "-new", gen="gen-c", expires_at_ms=FAR_FUTURE_MS)
    store.stopped_tasks[DEAD_TASK] = now_ms()
    async with running(store) as worker:
        store.send("", death=DeathNotice(DEAD_TASK, CLUSTER))
        await until(lambda: bool(history(worker).of("death.notice")))
    assert history(worker).of("death.notice")[0]["buried"] == []
    assert store.tables[WORKERS]["w2"]["expires_at_ms"] == FAR_FUTURE_MS


async def test_blog_has_no_worker_items_and_drops_the_notice() -> None:
    store = MemoryStore(config("blog"))
    store.stopped_tasks[DEAD_TASK] = now_ms()
    async with running(store) as worker:
        store.send("", death=DeathNotice(DEAD_TASK, CLUSTER))
        await until(lambda: not store.queue)
    assert history(worker).of("death.notice") == [] and store.aws.requests["ecs"] == 0
    assert not profile_for(store.config).strategy.buries
