"""A deployed fleet as the scenario runner's topology (``harness.scenarios.topology.Topology``), reached only
through AWS APIs and the deployment's own endpoints, all named by terraform's outputs (``Deployment``):

- START / STOP: POST to the router's URL, SigV4-signed for ``execute-api`` (``harness.router_client``);
- the streams: the upstream simulator's control API (``upstream_control_url``);
- the workers running now: the workers table's items (``hardened`` registers each incarnation with its ECS
  task's ARN) whose task ECS lists as RUNNING among the deployment's service's tasks (a task ARN the system
  under test wrote for another task of the cluster, or of another service, is never a target);
- how far each stream is stored: its newest item in the messages table (a Query, newest first);
- which streams a drain holds: the STOPPED items of the connections table that a worker holds (the workers'
  drain events reach the harness only after the run), so an owner still storing up to the STOP counts too;
- faults (``AwsNemesis``): ``term`` is ECS ``StopTask`` of the worker's task (ECS sends SIGTERM, then SIGKILL
  after the container's stop timeout); ``kill`` is a FIS experiment made for that one task when the step runs,
  provided it still carries the tag and is one of the service's (``aws:ecs:task-kill-process``, SIGKILL; it
  needs the FIS role and a stop alarm, and on Fargate FIS's SSM agent sidecar); ``reset_upstream`` is the
  simulator's own control call.  Which kinds a deployment runs, and why not the others, is the fault
  registry's (``harness.faults.plane.refusals`` for ``AWS``): a scenario with any other kind is refused
  before the run starts;
- the history: the harness's own events in the run folder; the workers', the router's and the simulator's are
  read back from their CloudWatch Logs groups after the run (``collect_history``).

The answers that each poll of the runner needs (live workers, stored seqs, drains) are asked of AWS at most every
``ASK_EVERY_S`` and reused in between, so a 50 ms polling loop does not become an AWS request rate.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from botocore.exceptions import BotoCoreError, ClientError

from fleet.history import HistoryWriter
from harness.aws.deployment import Deployment
from harness.aws.fis import FisOptions, kill_template
from harness.aws.logs import ROUTER, UPSTREAM, WORKERS, Fetched, fetch_history
from harness.cluster import (
    ClusterError,
    http_json,
    send_event,
    simulator_streams,
    start_connection,
    stop_connection,
)
from harness.faults.fault import AWS, FaultError
from harness.faults.plane import refusals
from harness.message_log import newest
from harness.router_client import Signer
from harness.scenarios.runner import Phases, ScenarioError

ASK_EVERY_S = 1.0
FIS_ENDED = ("completed", "stopped", "failed", "cancelled")



@dataclass
class AwsFault:
    kind: str
    target: str
    params: dict[str, Any] = field(default_factory=dict)


class AwsNemesis:
    """Faults as AWS API calls (and the simulator's control calls), recorded as ``fault.start`` /
    ``fault.stop`` with the call that made them (``via``)."""

    def __init__(self, topology: AwsTopology) -> None:
        self.topology = topology
        self.history = HistoryWriter(str(topology.run_dir / "history" / "nemesis.jsonl"), "nemesis")

    def start(self, kind: str, target: str, **params: Any) -> AwsFault:
        refused = refusals([kind], AWS, self.topology.provides)
        if refused:
            raise FaultError(refused[0])
        fault = AwsFault(kind, target, dict(params))
        self.RUNS[kind](self, fault)
        return fault

    def _kill(self, fault: AwsFault) -> None:
        task = self.topology.task_of(fault.target)
        fault.params.update(via="fis:StartExperiment", task=task)
        self.history.emit("fault.start", kind=fault.kind, target=fault.target, params=fault.params)
        fault.params["experiment"] = self.topology.kill(fault.target, task)

    def _term(self, fault: AwsFault) -> None:
        task = self.topology.task_of(fault.target)
        fault.params.update(via="ecs:StopTask", task=task)
        self.history.emit("fault.start", kind=fault.kind, target=fault.target, params=fault.params)
        self.topology.stop_task(task, f"wsfleet harness: term {fault.target}")
        self.topology.await_gone(fault.target)

    def _reset_upstream(self, fault: AwsFault) -> None:
        fault.params.setdefault("via", "upstream control API")
        self.history.emit("fault.start", kind=fault.kind, target=fault.target, params=fault.params)
        self.topology.reset_upstream(float(fault.params.get("fraction", 1.0)))

    # what runs each kind the registry says a deployment runs
    RUNS: ClassVar[dict[str, Callable[[AwsNemesis, AwsFault], None]]] = {
        "kill": _kill, "term": _term, "reset_upstream": _reset_upstream}

    def stop(self, fault: AwsFault) -> None:
        self.history.emit("fault.stop", kind=fault.kind, target=fault.target, params=fault.params)

    def heal_all(self) -> None:
        """Nothing to heal: every kind is over when its ``start`` returns."""
        self.history.close()


def running_workers(dynamodb: Any, ecs: Any, deployment: Deployment) -> dict[str, str]:
    """Worker id -> task ARN, for the incarnations in the workers table whose task ECS lists as RUNNING in the
    deployment's service."""
    items = [item for page in dynamodb.get_paginator("scan").paginate(
        TableName=deployment.tables["workers"], ConsistentRead=True, ProjectionExpression="pk, task_arn")
        for item in page.get("Items", [])]
    pages = ecs.get_paginator("list_tasks").paginate(cluster=deployment.cluster, serviceName=deployment.service,
                                                     desiredStatus="RUNNING")
    running = {arn for page in pages for arn in page.get("taskArns", [])}
    return {item["pk"]["S"]: item["task_arn"]["S"] for item in items if item.get("task_arn", {}).get("S") in running}


class AwsTopology:
    """One deployed fleet; ``session`` is a boto3 Session (credentials from the standard chain)."""

    def __init__(self, deployment: Deployment, session: Any, run_dir: Path, signer: Signer,
                 lease_s: float, fis: FisOptions | None = None) -> None:
        if not deployment.upstream_control_url or not deployment.upstream_url:
            raise ClusterError("the deployment names no upstream simulator (outputs upstream_url and "
                               "upstream_control_url, or --upstream-url and --upstream-control-url)")
        self.deployment = deployment
        self.run_dir = run_dir
        self.signer = signer
        self.lease_s = lease_s
        self.fis = fis
        self.provides = {"fis"} if fis is not None else set()  # the capabilities the registry's kinds may need
        self.logs = f"the CloudWatch Logs groups {deployment.worker_log_group} and {deployment.router_log_group}"
        (run_dir / "history").mkdir(parents=True, exist_ok=True)
        self.history = HistoryWriter(str(run_dir / "history" / "harness.jsonl"), "harness")
        region = deployment.region
        self._dynamodb = session.client("dynamodb", region_name=region)
        self._ecs = session.client("ecs", region_name=region)
        self._logs = session.client("logs", region_name=region)
        self._fis = session.client("fis", region_name=region)
        self.nemesis = AwsNemesis(self)
        self._live: tuple[float, dict[str, str]] = (0.0, {})
        self._stored: tuple[float, dict[str, float]] = (0.0, {})
        self._draining: tuple[float, list[str]] = (0.0, [])

    # -- the runner's questions -------------------------------------------------------------------------
    def start_connection(self, connection_id: str) -> None:
        d = self.deployment
        start_connection(self.history, d.router_url, d.upstream_url, d.upstream_control_url, connection_id,
                         self.signer)

    def stop_connection(self, connection_id: str) -> None:
        stop_connection(self.history, self.deployment.router_url, connection_id, self.signer)

    def streams(self) -> dict[str, Any]:
        return simulator_streams(self.deployment.upstream_control_url)

    def live_workers(self) -> set[str]:
        return set(self._running_tasks())

    def dynamodb(self) -> tuple[Any, dict[str, str]]:
        return self._dynamodb, dict(self.deployment.tables)

    def stored_through(self, ids: list[str]) -> dict[str, float]:
        asked, stored = self._stored
        if time.monotonic() - asked < ASK_EVERY_S:
            return stored
        stored = {}
        for connection_id in ids:
            tail = newest(self._dynamodb, self.deployment.tables["messages"], f"CONN#{connection_id}")
            if tail is not None and tail.seq_to is not None:
                stored[connection_id] = float(tail.seq_to)
        self._stored = (time.monotonic(), stored)
        return stored

    def draining(self, ids: list[str]) -> list[str]:
        asked, held = self._draining
        if time.monotonic() - asked < ASK_EVERY_S:
            return held
        wanted = {f"CONN#{i}" for i in ids}
        pages = self._dynamodb.get_paginator("scan").paginate(TableName=self.deployment.tables["connections"],
                                                               ConsistentRead=True)
        held = sorted(item["pk"]["S"].removeprefix("CONN#") for page in pages for item in page.get("Items", [])
                      if item["pk"]["S"] in wanted and item.get("desired_state", {}).get("S") == "STOPPED"
                      and item.get("lease_owner", {}).get("S"))
        self._draining = (time.monotonic(), held)
        return held

    # -- what the faults do -----------------------------------------------------------------------------
    def task_of(self, worker_id: str) -> str:
        """The ECS task running ``worker_id`` now; FaultError if none."""
        task = self._running_tasks(fresh=True).get(worker_id)
        if task is None:
            raise FaultError(f"no running task for worker {worker_id!r} (running: "
                             f"{', '.join(sorted(self._running_tasks())) or 'none'})")
        return task

    def stop_task(self, task: str, reason: str) -> None:
        self._ecs.stop_task(cluster=self.deployment.cluster, task=task, reason=reason)

    def await_gone(self, worker_id: str) -> None:
        """Wait until ``worker_id`` has no open session at the simulator (it handed its streams off, or its
        process ended); FaultError after five leases (at least 10 s)."""
        deadline = time.monotonic() + max(10.0, 5 * self.lease_s)
        while any(s["closed"] is None and s["worker"] == worker_id
                  for stream in self.streams().values() for s in stream.get("sessions", [])):
            if time.monotonic() > deadline:
                raise FaultError(f"term: {worker_id} still holds upstream sessions after its task was stopped")
            time.sleep(0.1)

    def kill(self, worker_id: str, task: str) -> str:
        """SIGKILL ``worker_id``'s process through a FIS experiment on ``task``; returns when ECS no longer lists
        the task as running (FaultError if the experiment ends without that, or after five leases).  The
        experiment's id."""
        assert self.fis is not None
        made = self._fis.create_experiment_template(clientToken=str(uuid.uuid4()),
                                                    **kill_template(task, self.deployment, self.fis))
        template = made["experimentTemplate"]["id"]
        experiment = self._fis.start_experiment(clientToken=str(uuid.uuid4()), experimentTemplateId=template)
        experiment_id = str(experiment["experiment"]["id"])
        deadline = time.monotonic() + max(10.0, 5 * self.lease_s)
        try:
            while worker_id in self._running_tasks(fresh=True):
                state = self._fis.get_experiment(id=experiment_id)["experiment"]["state"]
                if state["status"] in FIS_ENDED[1:] or time.monotonic() > deadline:
                    raise FaultError(f"kill: {worker_id}'s task still runs; FIS experiment {experiment_id} is "
                                     f"{state['status']} ({state.get('reason', 'no reason given')})")
                time.sleep(0.2)
        finally:
            with contextlib.suppress(ClientError, BotoCoreError):  # a template left behind costs nothing
                self._fis.delete_experiment_template(id=template)
        return experiment_id

    def reset_upstream(self, fraction: float) -> None:
        status, payload = http_json("POST", f"{self.deployment.upstream_control_url}/disconnect?fraction={fraction}")
        if status != 200:
            raise FaultError(f"reset_upstream: the simulator answered {status}: {payload}")

    def _running_tasks(self, fresh: bool = False) -> dict[str, str]:
        asked, live = self._live
        if fresh or time.monotonic() - asked >= ASK_EVERY_S:
            live = running_workers(self._dynamodb, self._ecs, self.deployment)
            self._live = (time.monotonic(), live)
        return live

    # -- after the run ----------------------------------------------------------------------------------
    def collect_history(self, start_ms: int, end_ms: int, prefix: str) -> Fetched:
        """The deployment's history events between the two times, from its log groups into the run folder:
        those of the run's streams (ids starting with ``prefix``) and those of no stream (a worker's own)."""
        self.history.close()
        groups = [(self.deployment.worker_log_group, WORKERS), (self.deployment.router_log_group, ROUTER),
                  (self.deployment.upstream_log_group, UPSTREAM)]

        def ours(event: dict[str, Any]) -> bool:
            return not isinstance(event.get("pk"), str) or event["pk"].startswith(f"CONN#{prefix}")

        return fetch_history(self._logs, [(g, role) for g, role in groups if g], start_ms, end_ms, self.run_dir,
                             keep=ours)


def run_on_aws(topology: AwsTopology, phases: Phases, logs_wait_s: float) -> dict[str, Any]:
    """Run ``phases`` against the deployment, STOP the run's streams, read the history back from the log
    groups and check it; the verdict (also in ``RUN_DIR/verdict.json``)."""
    start_ms = int(time.time() * 1000) - 1000
    deployment = topology.deployment
    try:
        phases.run(topology, backend="aws",
                   deployment=f"{deployment.cluster}/{deployment.service} in {deployment.region}")
    finally:
        end_ms = int(time.time() * 1000)
        phases.say(f"stopping the run's {len(phases.connection_ids)} streams (after the observed window)")
        for connection_id in phases.connection_ids:
            try:
                send_event(deployment.router_url, "STOP", connection_id, signer=topology.signer)
            except ClusterError as exc:
                phases.say(f"could not STOP {connection_id}: {exc}")
    phases.say(f"reading the history back from CloudWatch Logs in {logs_wait_s:g} s (delivery takes a while)")
    time.sleep(logs_wait_s)
    fetched = topology.collect_history(start_ms, end_ms, phases.prefix)
    phases.say(f"{sum(fetched.events.values())} events from {len(fetched.events)} processes "
               f"({fetched.left_out} of other streams and {fetched.other_lines} other log lines left out)")
    for problem, count in fetched.refused.items():
        phases.say(f"error: {count} history lines refused: {problem}")
    if not fetched.events:
        raise ScenarioError("no history events in the deployment's log groups (is WSFLEET_HISTORY_PATH="
                            "/dev/stdout set in terraform's fleet_settings?)")
    return phases.verdict(topology.run_dir)
