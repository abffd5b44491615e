"""Worker processes as ECS tasks, locally: what makes a death notice (``fleet.deathnotice``) real here.

Each worker process runs as a task registered in the embedded backend's ECS (moto server): the task is
started with the process (``LocalTasks.launch``: its ARN goes to the worker as ``WSFLEET_TASK_ARN``) and a
supervisor thread watches every process.  When one exits, for whatever reason (a kill fault, a crash, a
graceful stop), the supervisor does what ECS and EventBridge do on AWS: the task is stopped (``StopTask``,
so ``DescribeTasks`` reports it STOPPED, and since when, to a worker that checks; the embedded moto moves
a task only then, ``harness.backends.moto_serial.ecs_as_aws``) and ``ECS Task State Change`` events go to
the workers' queue: the container STOPPED (the task deprovisioning) at once, the task STOPPED
``DEPROVISION_S`` later.  It writes ``task.stopped`` {worker, task, exit_code} to the harness history when
the first is sent.  A paused or partitioned worker's process is still running: no notice, unless a fault
makes ECS report its task stopped all the same (``LocalTasks.stop_while_running``: a zombie).

The other way round, a task someone stops through the ECS API (``StopTask``: the AWS backend's faults) has
its process sent SIGTERM, as ECS does, and SIGKILL if it is still running ``stop_timeout_s`` later; its
exit is then handled as any other.  And a FIS experiment someone starts (the AWS backend's ``kill``) is
carried out on the tasks its targets resolve to, as FIS would: the tasks named by ARN, or those carrying its
``resourceTags`` among the tasks of the cluster and service its parameters name, narrowed by its ``TaskArn``
filters (``adopt`` says which service the tasks belong to and which tags they carry, what ECS's
``propagateTags`` gives a service's tasks); ``aws:ecs:task-kill-process`` sends the process SIGKILL,
``aws:ecs:stop-task`` stops the task.  The supervisor asks ECS (``ListTasks`` of the STOPPED ones)
and FIS (``ListExperiments``) every ``LOOK_EVERY_S``.

The AWS calls go straight to the backend, not through any worker's proxies: EventBridge is not on a worker's
network path.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from fleet.deathnotice import DeathNotice
from fleet.history import HistoryWriter
from fleet.schema import DEATH_NOTICE_COPIES
from harness.backends.base import BackendError
from harness.backends.resources import client
from harness.processes import Child

CLUSTER = "wsfleet"
TASK_FAMILY = "wsfleet-worker"
POLL_S = 0.01  # how often the supervisor looks at the processes: a notice leaves this long after the exit
# From the container's STOPPED event to the task's (Fargate deprovisions the task in between, often for tens
# of seconds; here one second, so a first event taken by the dead worker's own last long poll is followed
# soon by another).
DEPROVISION_S = 1.0
LOOK_EVERY_S = 0.2
ECS_STOP_TIMEOUT_MS = 30_000  # ECS's default between a task's SIGTERM and SIGKILL, at scale 1
_AMI = "ami-12c6146b"  # any image id: moto's EC2 only records it


@dataclass
class _Watched:
    worker_id: str
    child: Child
    task_arn: str
    kill_at: float | None = None  # told to stop through the ECS API: SIGKILL then, if still running


class LocalTasks:
    """The ECS cluster of one topology and the supervisor of its worker processes."""

    def __init__(self, env: Mapping[str, str], queue_url: str, history: HistoryWriter,
                 stop_timeout_s: float = 30.0) -> None:
        self.queue_url = queue_url
        self.stop_timeout_s = stop_timeout_s
        self.history = history
        self._ecs = client(env, "ecs")
        self._sqs = client(env, "sqs")
        self._ec2 = client(env, "ec2")
        self._fis = client(env, "fis")
        self._experiments_done: set[str] = set()
        self.service = ""
        self.task_tags: dict[str, str] = {}
        self.cluster_arn = ""
        self._watched: list[_Watched] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Create the cluster (one container instance, the worker task definition) and the supervisor."""
        try:
            self.cluster_arn = self._ecs.create_cluster(clusterName=CLUSTER)["cluster"]["clusterArn"]
            instance = self._ec2.run_instances(ImageId=_AMI, MinCount=1, MaxCount=1)["Instances"][0]
            document = json.dumps({"instanceId": instance["InstanceId"], "region": self._ecs.meta.region_name,
                                   "availabilityZone": instance["Placement"]["AvailabilityZone"]})
            self._ecs.register_container_instance(cluster=CLUSTER, instanceIdentityDocument=document)
            self._ecs.register_task_definition(
                family=TASK_FAMILY, containerDefinitions=[{"name": "worker", "image": "wsfleet", "memory": 4}])
        except (BotoCoreError, ClientError) as exc:
            raise BackendError(f"preparing the local ECS cluster at {self._ecs.meta.endpoint_url}: {exc}") from exc
        self._thread = threading.Thread(target=self._supervise, name="task-supervisor", daemon=True)
        self._thread.start()

    def launch(self, worker_id: str) -> str:
        """A new task for a worker process about to start: its ARN."""
        try:
            answer = self._ecs.run_task(cluster=CLUSTER, taskDefinition=TASK_FAMILY, count=1, startedBy=worker_id)
        except (BotoCoreError, ClientError) as exc:
            raise BackendError(f"starting a task for {worker_id}: {exc}") from exc
        tasks = answer.get("tasks", [])
        if not tasks:
            raise BackendError(f"starting a task for {worker_id}: {answer.get('failures')}")
        return str(tasks[0]["taskArn"])

    def adopt(self, service: str, tags: dict[str, str]) -> None:
        """Every task, running or launched later, is one of ``service``'s and carries ``tags``."""
        self.service, self.task_tags = service, dict(tags)

    def watch(self, worker_id: str, child: Child, task_arn: str) -> None:
        """Supervise ``child``, running as ``task_arn``, until it exits."""
        with self._lock:
            self._watched.append(_Watched(worker_id, child, task_arn))

    def close(self) -> None:
        """Stop supervising: the processes still running are being stopped by their owner."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def send_notice(self, task_arn: str, reason: str, task_status: str = "STOPPED",
                    exit_code: int | None = None) -> None:
        """Send an ``ECS Task State Change`` event for ``task_arn`` (at ``task_status``, its container
        STOPPED) to the workers' queue, as EventBridge would (once per target of the rule:
        ``DEATH_NOTICE_COPIES``), whether or not the task did stop: a forged notice is this alone."""
        body = json.dumps(DeathNotice(task_arn, self.cluster_arn, reason).event(task_status, exit_code))
        self._sqs.send_message_batch(QueueUrl=self.queue_url, Entries=[
            {"Id": str(copy), "MessageBody": body} for copy in range(DEATH_NOTICE_COPIES)])

    def stop_while_running(self, task_arn: str, reason: str) -> None:
        """ECS reports ``task_arn`` STOPPED while its process still runs (a zombie: ECS lost track of the
        process, or reports the stop before the process has gone): the task is stopped in ECS (``StopTask``
        dates it, so ``DescribeTasks`` says it stopped, and since when) and its STOPPED event sent, but the
        process is not told (no SIGTERM); ECS kills it ``stop_timeout_s`` later (SIGKILL, unless it has exited
        by then), and its exit is then handled as any other.  ``task.stopped`` says so, with no exit code."""
        with self._lock:
            watched = next((w for w in self._watched if w.task_arn == task_arn), None)
            if watched is not None:  # set first: the supervisor SIGTERMs a running process ECS stopped
                watched.kill_at = time.monotonic() + self.stop_timeout_s
        try:
            self._ecs.stop_task(cluster=CLUSTER, task=task_arn, reason=reason)
            self.send_notice(task_arn, reason)
        except (BotoCoreError, ClientError) as exc:
            raise BackendError(f"reporting {task_arn} stopped: {exc}") from exc
        self.history.emit("task.stopped", worker=watched.worker_id if watched is not None else "", task=task_arn,
                          exit_code=None, outcome="ok", note="the process still runs")

    def _supervise(self) -> None:
        later: list[tuple[float, _Watched, str]] = []  # (when, task, reason): the task's STOPPED event
        looked = 0.0
        while not self._closed.wait(POLL_S):
            if time.monotonic() - looked >= LOOK_EVERY_S:
                looked = time.monotonic()
                self._stop_what_ecs_stopped()
                self._carry_out_experiments()
            with self._lock:
                exited = [w for w in self._watched if not w.child.running()]
                self._watched = [w for w in self._watched if w not in exited]
            for watched in exited:
                reason = self._exited(watched)
                if reason is not None:
                    later.append((time.monotonic() + DEPROVISION_S, watched, reason))
            due = [entry for entry in later if entry[0] <= time.monotonic()]
            later = [entry for entry in later if entry not in due]
            for _, watched, reason in due:
                with contextlib.suppress(BotoCoreError, ClientError):  # the first event was sent
                    self.send_notice(watched.task_arn, reason)

    def _stop_what_ecs_stopped(self) -> None:
        """SIGTERM the processes whose task someone stopped through the ECS API; SIGKILL them after the
        stop timeout."""
        with self._lock:
            running = [w for w in self._watched if w.child.running()]
        for watched in running:
            if watched.kill_at is not None and time.monotonic() >= watched.kill_at:
                watched.child.signal(signal.SIGKILL)
        asked = [w for w in running if w.kill_at is None]
        if not asked:
            return
        try:  # ListTasks: one listing of the stopped ones, however many are watched
            pages = self._ecs.get_paginator("list_tasks").paginate(cluster=CLUSTER, desiredStatus="STOPPED")
            stopped = {arn for page in pages for arn in page.get("taskArns", [])}
        except (BotoCoreError, ClientError):
            return  # asked again next time
        for watched in asked:
            if watched.task_arn in stopped:
                watched.kill_at = time.monotonic() + self.stop_timeout_s
                watched.child.signal(signal.SIGCONT)
                watched.child.signal(signal.SIGTERM)

    def _carry_out_experiments(self) -> None:
        """Do what each FIS experiment started since the last look asks of the tasks its targets resolve to."""
        try:
            started = [e["id"] for e in self._fis.list_experiments().get("experiments", [])
                       if e["id"] not in self._experiments_done]
            experiments = [self._fis.get_experiment(id=i)["experiment"] for i in started]
        except (BotoCoreError, ClientError):
            return  # asked again next time
        with self._lock:
            running = {w.task_arn: w for w in self._watched if w.child.running()}
        for experiment in experiments:
            self._experiments_done.add(experiment["id"])
            for action in experiment.get("actions", {}).values():
                target = experiment.get("targets", {}).get(action.get("targets", {}).get("Tasks", ""), {})
                for arn in self._resolved(target, list(running)):
                    if action.get("actionId") == "aws:ecs:task-kill-process":
                        running[arn].child.signal(signal.SIGKILL)
                    elif action.get("actionId") == "aws:ecs:stop-task":
                        with contextlib.suppress(BotoCoreError, ClientError):
                            self._ecs.stop_task(cluster=CLUSTER, task=arn, reason="FIS aws:ecs:stop-task")

    def _resolved(self, target: dict[str, Any], running: list[str]) -> list[str]:
        """The running tasks a FIS target resolves to (an unknown filter path resolves to none)."""
        if target.get("resourceArns"):
            return [arn for arn in target["resourceArns"] if arn in running]
        parameters = target.get("parameters", {})
        if parameters.get("cluster", CLUSTER) not in (CLUSTER, self.cluster_arn):
            return []
        if "service" in parameters and parameters["service"] != self.service:
            return []
        if any(self.task_tags.get(key) != value for key, value in target.get("resourceTags", {}).items()):
            return []
        for each in target.get("filters", []):
            running = [arn for arn in running if each.get("path") == "TaskArn" and arn in each.get("values", [])]
        mode = str(target.get("selectionMode", "ALL"))
        return running[:int(mode[6:-1])] if mode.startswith("COUNT(") else running

    def _exited(self, watched: _Watched) -> str | None:
        """The process exited: stop its task, send the event of its container STOPPED (the task now
        deprovisioning) and say so in the history; the reason, or None if the backend refused."""
        code = watched.child.process.returncode
        reason = f"Essential container in task exited (exit code {code})"
        try:
            self._ecs.stop_task(cluster=CLUSTER, task=watched.task_arn, reason=reason)
            self.send_notice(watched.task_arn, reason, task_status="DEPROVISIONING", exit_code=code)
        except (BotoCoreError, ClientError) as exc:  # the run goes on: its streams lapse as without notices
            self.history.emit("task.stopped", worker=watched.worker_id, task=watched.task_arn, exit_code=code,
                              outcome="fail", note=str(exc)[:200])
            return None
        self.history.emit("task.stopped", worker=watched.worker_id, task=watched.task_arn, exit_code=code,
                          outcome="ok")
        return reason
