"""Tests of harness.ecs_tasks: the stand-in for ECS and EventBridge sends each worker-stopped event to the
workers' queue as many times as terraform's rule has targets (``fleet.schema.DEATH_NOTICE_COPIES``)."""

from __future__ import annotations

import json
import signal
from typing import Any

from fleet.deathnotice import stopped_at_in
from fleet.history import HistoryWriter
from fleet.schema import DEATH_NOTICE_COPIES
from harness.backends.resources import client
from harness.ecs_tasks import CLUSTER, LocalTasks
from harness.processes import spawn

TASK = "arn:aws:ecs:us-east-1:123456789012:task/wsfleet/0123456789abcdef"


def test_each_event_reaches_the_queue_once_per_target_of_the_rule(clean_backend: Any) -> None:
    env = clean_backend.env()
    LocalTasks(env, clean_backend.queue_url, HistoryWriter(None, "harness")).send_notice(TASK, "forged")
    sqs = client(env, "sqs")
    bodies: list[str] = []
    while answer := sqs.receive_message(QueueUrl=clean_backend.queue_url, MaxNumberOfMessages=10,
                                        WaitTimeSeconds=0).get("Messages", []):
        bodies += [message["Body"] for message in answer]
    assert len(bodies) == DEATH_NOTICE_COPIES == 2
    assert len(set(bodies)) == 1 and json.loads(bodies[0])["detail"]["taskArn"] == TASK


def test_a_task_stopped_through_the_ecs_api_has_its_process_terminated(clean_backend: Any, tmp_path: Any) -> None:
    """StopTask (the AWS backend's fault) reaches the process as ECS delivers it: SIGTERM, then SIGKILL after
    the stop timeout if it is still running; its exit is then handled as any other (``task.stopped``)."""
    env = clean_backend.env()
    history = HistoryWriter(tmp_path / "harness.jsonl", "harness")
    tasks = LocalTasks(env, clean_backend.queue_url, history, stop_timeout_s=0.5)
    tasks.start()
    children: dict[str, Any] = {}
    try:
        ready = "print('{}', flush=True); time.sleep(60)"
        stubborn = f"import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); {ready}"
        polite = f"import time; {ready}"
        children.update({name: spawn(name, ["python", "-c", code], tmp_path / f"{name}.log")
                         for name, code in (("polite", polite), ("stubborn", stubborn))})
        arns = {name: tasks.launch(name) for name in children}
        for name, child in children.items():
            tasks.watch(name, child, arns[name])
        ecs = client(env, "ecs")
        for arn in arns.values():
            ecs.stop_task(cluster="wsfleet", task=arn, reason="harness fault")
        assert children["polite"].wait(5.0) == -signal.SIGTERM
        assert children["stubborn"].wait(5.0) == -signal.SIGKILL  # SIGTERM ignored: killed after the timeout
    finally:
        tasks.close()
        for child in children.values():
            child.stop(grace_s=0.1)
    stopped = [json.loads(line) for line in (tmp_path / "harness.jsonl").read_text().splitlines()]
    assert sorted(e["worker"] for e in stopped if e["type"] == "task.stopped") == ["polite", "stubborn"]


def test_watching_for_stopped_tasks_leaves_a_running_task_running(clean_backend: Any, tmp_path: Any) -> None:
    """moto moves a task a step toward STOPPED on every DescribeTasks: a supervisor that described the tasks
    it watches would soon make a forged death notice look true (crash_notice once took over a live worker's
    streams that way).  Looking many times must leave a running task's next description short of STOPPED."""
    env = clean_backend.env()
    tasks = LocalTasks(env, clean_backend.queue_url, HistoryWriter(None, "harness"))
    tasks.start()
    tasks.close()  # the thread is not needed: the look is called directly
    child = spawn("alive", ["python", "-c", "import time; print('{}', flush=True); time.sleep(60)"],
                  tmp_path / "alive.log")
    try:
        arn = tasks.launch("alive")
        tasks.watch("alive", child, arn)
        for _ in range(8):
            tasks._stop_what_ecs_stopped()
        [task] = client(env, "ecs").describe_tasks(cluster="wsfleet", tasks=[arn])["tasks"]
        assert task["lastStatus"] != "STOPPED" and child.running()
    finally:
        child.stop(grace_s=0.1)


def test_reading_a_task_never_moves_it_and_a_stopped_task_says_when(clean_backend: Any) -> None:
    """Hole 1: the pinned moto moved a RUNNING task a step toward STOPPED on every DescribeTasks, so three
    forged notices (two copies each, every receiver asking ECS once) made a live worker's task read STOPPED
    and buried it.  The embedded moto moves a task only when told (StopTask), however often it is read; a
    stopped task says when it stopped, once (``stoppedAt``, ``executionStoppedAt``), as ECS does: the time
    the fleet holds an incarnation's renewals to before burying it."""
    env = clean_backend.env()
    tasks = LocalTasks(env, clean_backend.queue_url, HistoryWriter(None, "harness"))
    tasks.start()
    tasks.close()  # no supervisor: nothing but this test reads or stops the task
    arn = tasks.launch("alive")
    ecs = client(env, "ecs")
    for _ in range(8):
        [task] = ecs.describe_tasks(cluster=CLUSTER, tasks=[arn])["tasks"]
        assert task["lastStatus"] == "RUNNING" and "stoppedAt" not in task
    ecs.stop_task(cluster=CLUSTER, task=arn, reason="Essential container in task exited")
    [stopped] = ecs.describe_tasks(cluster=CLUSTER, tasks=[arn])["tasks"]
    assert stopped["lastStatus"] == "STOPPED" and stopped["stoppedAt"] == stopped["executionStoppedAt"]
    assert stopped_at_in({"tasks": [stopped]}, arn) == int(stopped["stoppedAt"].timestamp() * 1000)
    ecs.stop_task(cluster=CLUSTER, task=arn, reason="again")
    [again] = ecs.describe_tasks(cluster=CLUSTER, tasks=[arn])["tasks"]
    assert again["stoppedAt"] == stopped["stoppedAt"]  # stopped once: a second StopTask dates nothing


def test_a_task_reported_stopped_while_its_process_runs_is_left_running_until_the_stop_timeout(
        clean_backend: Any, tmp_path: Any) -> None:
    """A zombie (``stop_while_running``): ECS says the task STOPPED, since when, and its STOPPED event reaches
    the queue, while its process runs on, not told (a process that would die of SIGTERM dies of the SIGKILL
    ECS sends after the stop timeout); a task stopped through the ECS API gets SIGTERM (the test above)."""
    env = clean_backend.env()
    history = HistoryWriter(tmp_path / "harness.jsonl", "harness")
    tasks = LocalTasks(env, clean_backend.queue_url, history, stop_timeout_s=0.5)
    tasks.start()
    child = spawn("zombie", ["python", "-c", "import time; print('{}', flush=True); time.sleep(60)"],
                  tmp_path / "zombie.log")
    try:
        arn = tasks.launch("zombie")
        tasks.watch("zombie", child, arn)
        tasks.stop_while_running(arn, "ECS lost the task's agent")
        [task] = client(env, "ecs").describe_tasks(cluster=CLUSTER, tasks=[arn])["tasks"]
        assert stopped_at_in({"tasks": [task]}, arn) is not None
        assert child.wait(5.0) == -signal.SIGKILL
    finally:
        tasks.close()
        child.stop(grace_s=0.1)
    sqs = client(env, "sqs")
    first = sqs.receive_message(QueueUrl=clean_backend.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
    details = [json.loads(m["Body"])["detail"] for m in first.get("Messages", [])]
    assert details and all(d["taskArn"] == arn for d in details) and details[0]["lastStatus"] == "STOPPED"
    stopped = [json.loads(line) for line in (tmp_path / "harness.jsonl").read_text().splitlines()]
    assert next(e.get("exit_code") for e in stopped if e["type"] == "task.stopped") is None
