"""Death notices (``fleet.deathnotice``): parsing, and the real ``Worker`` on the in-memory store burying a
dead incarnation only when ECS confirms its task stopped."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fleet.deathnotice import DeathNotice, exited_in, parse_death_notice
from fleet.lease import WorkerRecord
from fleet.memstore import MemoryStore
from fleet.profiles import profile_for
from fleet.store import _notification
from tests.fleet.memworker import add_stream, config, consumer, history, running, until

PK = "CONN#c1"
WORKERS = "wsfleet-workers"
CLUSTER = "arn:aws:ecs:us-east-1:123456789012:cluster/wsfleet"
DEAD_TASK = "arn:aws:ecs:us-east-1:123456789012:task/wsfleet/dead"
FAR_FUTURE_MS = 10**13  # a worker item that would not lapse during the test


@pytest.mark.parametrize("task_status", ["STOPPED", "DEPROVISIONING", "STOPPING"])
def test_a_task_whose_container_stopped_is_a_notice_and_round_trips(task_status: str) -> None:
    """Fargate reports the container STOPPED at once and the task STOPPED often tens of seconds later:
    each event says the process exited."""
    notice = DeathNotice(DEAD_TASK, CLUSTER, "Essential container in task exited")
    event = notice.event(task_status, exit_code=137)
    assert parse_death_notice(event) == notice
    assert parse_death_notice(json.loads(json.dumps(event))) == notice
    assert exited_in({"tasks": [{**event["detail"]}]}, DEAD_TASK)


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


def test_describe_tasks_confirms_only_the_task_asked_about_once_it_exited() -> None:
    running = {"taskArn": DEAD_TASK, "lastStatus": "RUNNING", "containers": [{"lastStatus": "RUNNING"}]}
    assert not exited_in({"tasks": [running]}, DEAD_TASK)
    assert not exited_in({"tasks": [], "failures": [{"arn": DEAD_TASK, "reason": "MISSING"}]}, DEAD_TASK)
    assert not exited_in({"tasks": [{"taskArn": "other", "lastStatus": "STOPPED"}]}, DEAD_TASK)
    assert exited_in({"tasks": [{"taskArn": DEAD_TASK, "lastStatus": "STOPPED"}]}, DEAD_TASK)


def test_queue_bodies_become_hints_notices_or_nothing() -> None:
    assert _notification('{"pk": "CONN#a", "released_epoch": 3}', "r").released_epoch == 3
    assert _notification('{"pk": "CONN#a", "released_epoch": true}', "r").released_epoch is None
    death = _notification(json.dumps(DeathNotice(DEAD_TASK, CLUSTER).event()), "r")
    assert (death.pk, death.death) == ("", DeathNotice(DEAD_TASK, CLUSTER))
    for malformed in ("not json", "[1, 2]", '{"detail-type": "Something Else"}'):
        note = _notification(malformed, "r")
        assert (note.pk, note.death) == ("", None)


def crashed_owner(store: MemoryStore, task_arn: str = DEAD_TASK, gen: str = "gen-b") -> None:
    """``PK`` STARTED and held by w2 (epoch 3), whose worker item, registered with ``task_arn``, would stay
    live long after the test: without the notice nobody may take it."""
    add_stream(store, PK, lease_owner="w2", owner_gen="gen-b", epoch=3, lease_expires_at_ms=5, last_seq=7)
    store.tables[WORKERS]["w2"] = {"pk": "w2", "gen": gen, "expires_at_ms": FAR_FUTURE_MS, "task_arn": task_arn}


async def test_a_confirmed_notice_buries_the_incarnation_and_its_streams_are_taken_at_once() -> None:
    store = MemoryStore(config())
    crashed_owner(store)
    store.stopped_tasks.add(DEAD_TASK)
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


async def test_a_forged_notice_for_a_live_task_changes_nothing() -> None:
    """ECS says the task is running (here: not in ``stopped_tasks``): the notice is refuted, its worker
    item untouched, and a sweep still finds nothing claimable."""
    store = MemoryStore(config())
    crashed_owner(store)
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
    store = MemoryStore(config())
    crashed_owner(store, task_arn=DEAD_TASK + "-new", gen="gen-c")
    store.stopped_tasks.add(DEAD_TASK)
    async with running(store) as worker:
        store.send("", death=DeathNotice(DEAD_TASK, CLUSTER))
        await until(lambda: bool(history(worker).of("death.notice")))
    assert history(worker).of("death.notice")[0]["buried"] == []
    assert store.tables[WORKERS]["w2"]["expires_at_ms"] == FAR_FUTURE_MS


async def test_blog_has_no_worker_items_and_drops_the_notice() -> None:
    store = MemoryStore(config("blog"))
    store.stopped_tasks.add(DEAD_TASK)
    async with running(store) as worker:
        store.send("", death=DeathNotice(DEAD_TASK, CLUSTER))
        await until(lambda: not store.queue)
    assert history(worker).of("death.notice") == [] and store.aws.requests["ecs"] == 0
    assert not profile_for(store.config).buries
