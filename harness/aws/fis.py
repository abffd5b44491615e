"""A scenario's fault steps as AWS Fault Injection Service (FIS) actions on a deployed fleet's ECS tasks: the
experiment template ``aws fis create-experiment-template`` takes, built from the same scenario files the
local harness runs, and for each step what runs it (FIS, the harness itself, or nothing, with why).

How each fault kind maps (to the closest FIS action; where its meaning differs from the local kind's, the
step's detail says how, and where no action comes close the step is refused):

- ``kill`` -> ``aws:ecs:task-kill-process`` with ``SIGKILL`` on the worker's process (the task needs the
  SSM agent sidecar FIS documents for it); ECS then stops the task, and the death notice follows.
- ``term`` and ``restart`` -> ``aws:ecs:stop-task``: ECS sends SIGTERM, then SIGKILL after the stop
  timeout, and the service starts a replacement (a new incarnation, as ``restart`` is locally).
- ``partition_aws`` -> ``aws:ecs:task-network-blackhole-port`` on egress TCP 443 (every AWS endpoint);
  ``partition_upstream`` -> the same on the upstream's port.  Connections hang, where the local proxies
  close them.
- ``aws_timeout`` (DynamoDB requests hang) -> ``aws:ecs:task-network-packet-loss`` of 100 % toward
  DynamoDB only; a ``latency`` toxic on the request direction, on every connection (toxicity 1) ->
  ``aws:ecs:task-network-latency`` toward that service only.
- ``reset_upstream`` and ``forged_death_notice`` are the harness's own acts (the simulator's control API,
  a message on the queue): no FIS action.
- Refused, with the reason: ``pause`` (FIS sends no SIGSTOP), ``clock_skew`` (no FIS action moves a
  task's clock), ``aws_reset`` (no action resets connections in flight), other toxics and answer-direction
  toxics (FIS shapes the task's egress only), and the AWS API error kinds (FIS injects API errors into EC2
  calls only).

Each step has its own target (its own draw: ``COUNT(1)`` of the service's tasks carrying the allowlisted tag,
or ``ALL`` for ``all``; a worker named locally cannot be named before the run) and starts after an
``aws:fis:wait`` of its ``at_s``.  FIS runs one network action on a task at a time, so overlapping network
steps are refused.  Nothing here calls AWS.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from harness.aws.deployment import CHAOS_TAG, Deployment
from harness.scenarios.scenario_file import Step

ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+")
ALARM_ARN = re.compile(r"arn:aws[a-z-]*:cloudwatch:[a-z0-9-]+:\d{12}:alarm:.+")
FIS = "fis"
HARNESS = "harness"
REFUSED = "refused"
NETWORK_ACTIONS = ("aws:ecs:task-network-blackhole-port", "aws:ecs:task-network-latency",
                   "aws:ecs:task-network-packet-loss")
HARNESS_KINDS = {"reset_upstream": "the harness asks the upstream simulator to drop its live sessions",
                 "forged_death_notice": "the harness puts a forged death notice on the fleet's queue"}
REFUSALS = {"pause": "FIS sends no SIGSTOP to a task's process",
            "clock_skew": "no FIS action moves a task's clock",
            "aws_reset": "FIS cannot reset connections in flight",
            "join": "scale-out is the ECS service's desired count, not a FIS action"}


class FisError(ValueError):
    """The experiment cannot be built as asked; the message says which input and why."""


@dataclass(frozen=True)
class PlannedFault:
    """One scenario step, and what runs it: a FIS action, the harness, or nothing (``refused``)."""

    step: Step
    how: str                                      # FIS, HARNESS or REFUSED
    detail: str
    action: dict[str, Any] | None = None          # the FIS action (FIS only)


@dataclass(frozen=True)
class FisOptions:
    role_arn: str                                 # the role FIS assumes to act on the tasks
    stop_alarms: tuple[str, ...]                  # CloudWatch alarm ARNs; any in ALARM stops the experiment
    tag: tuple[str, str] = CHAOS_TAG              # only tasks carrying it are targets
    upstream_host: str = ""                       # the upstream's host, for latency toward it
    upstream_port: int = 443
    process_name: str = "python"                  # the worker's process, for kill


@dataclass(frozen=True)
class FisPlan:
    faults: list[PlannedFault]
    template: dict[str, Any]                      # CreateExperimentTemplate's input

    @property
    def refused(self) -> list[PlannedFault]:
        return [fault for fault in self.faults if fault.how == REFUSED]

    @property
    def action_minutes(self) -> int:
        """What FIS bills: each action's duration in minutes, rounded up, at least one (waits included)."""
        seconds = [int(a["parameters"].get("duration", "PT1S")[2:-1]) for a in self.template["actions"].values()]
        return sum(max(1, math.ceil(s / 60)) for s in seconds)


def _duration(seconds: float) -> str:
    return f"PT{max(1, math.ceil(seconds))}S"


def _network(step: Step, options: FisOptions, region: str) -> tuple[str, dict[str, str]] | str:
    """The FIS network action and its parameters for ``step``, or why there is none."""
    common = {"duration": _duration(step.duration_s), "useEcsFaultInjectionEndpoints": "true"}
    blackhole = "aws:ecs:task-network-blackhole-port"
    if step.kind in ("partition_aws", "partition_upstream"):
        port = 443 if step.kind == "partition_aws" else options.upstream_port
        return blackhole, {**common, "port": str(port), "protocol": "tcp", "trafficType": "egress"}
    if step.kind == "aws_timeout":
        return "aws:ecs:task-network-packet-loss", {**common, "lossPercent": "100", "sources": "DYNAMODB"}
    params = step.params
    if params.get("type") != "latency":
        return f"FIS shapes latency, loss and black holes only, not a {params.get('type')!r} toxic"
    if params.get("stream", "upstream") != "upstream":
        return "FIS delays the task's outgoing packets only, not the answer direction (stream=downstream)"
    if float(params.get("toxicity", 1.0)) < 1.0:
        return "FIS delays every packet: a toxicity below 1 cannot be kept"
    sources = {"dynamodb": "DYNAMODB", "services": f"sqs.{region}.amazonaws.com,monitoring.{region}.amazonaws.com",
               "upstream": options.upstream_host}[str(params.get("service", "dynamodb"))]
    if not sources:
        return "a latency toward the upstream needs the upstream's host (--upstream-host)"
    attributes = params.get("attributes") or {}
    return "aws:ecs:task-network-latency", {**common, "delayMilliseconds": str(int(attributes.get("latency", 0))),
                                            "jitterMilliseconds": str(int(attributes.get("jitter", 0))),
                                            "sources": sources}


def _planned(step: Step, options: FisOptions, region: str) -> PlannedFault:
    if step.kind in HARNESS_KINDS:
        return PlannedFault(step, HARNESS, HARNESS_KINDS[step.kind])
    if step.kind in REFUSALS:
        return PlannedFault(step, REFUSED, REFUSALS[step.kind])
    if step.kind == "kill":
        return PlannedFault(step, FIS, f"SIGKILL to {options.process_name} (needs FIS's SSM agent sidecar)",
                            {"actionId": "aws:ecs:task-kill-process",
                             "parameters": {"processName": options.process_name, "signal": "SIGKILL"}})
    if step.kind in ("term", "restart"):
        return PlannedFault(step, FIS, "ECS StopTask: SIGTERM, SIGKILL after the stop timeout; the service "
                                       "starts a new task", {"actionId": "aws:ecs:stop-task", "parameters": {}})
    if step.kind in ("partition_aws", "partition_upstream", "aws_timeout", "toxic"):
        network = _network(step, options, region)
        if isinstance(network, str):
            return PlannedFault(step, REFUSED, network)
        action_id, parameters = network
        differs = "; connections hang, where locally they are closed" if "blackhole" in action_id else ""
        return PlannedFault(step, FIS, f"{action_id.rsplit(':', 1)[1]} for {parameters['duration']}{differs}",
                            {"actionId": action_id, "parameters": parameters})
    return PlannedFault(step, REFUSED, "an AWS API fault (errors, slow or repeated answers) is the local proxy's; "
                                       "FIS injects API faults into EC2 calls only"
                        if step.kind.startswith(("aws_", "sqs_")) else f"no FIS action for {step.kind!r}")


def _overlapping_network(faults: list[PlannedFault]) -> list[PlannedFault]:
    """The network steps that start while an earlier one still runs."""
    network = sorted((f for f in faults if f.action and f.action["actionId"] in NETWORK_ACTIONS),
                     key=lambda f: f.step.at_s)
    clashes, busy_until = [], -1.0
    for fault in network:
        if fault.step.at_s < busy_until:
            clashes.append(fault)
        else:
            busy_until = fault.step.at_s + fault.step.duration_s
    return clashes


def check_options(options: FisOptions) -> None:
    """FisError unless the role is a role ARN and at least one stop alarm, each an alarm ARN, is named."""
    if not ROLE_ARN.fullmatch(options.role_arn):
        raise FisError(f"--role-arn: not an IAM role ARN: {options.role_arn!r}")
    if not options.stop_alarms:
        raise FisError("a FIS experiment needs a stop condition: name at least one CloudWatch alarm (--stop-alarm "
                       "ARN), so that the fleet's own alarms end the experiment")
    bad = [arn for arn in options.stop_alarms if not ALARM_ARN.fullmatch(arn)]
    if bad:
        raise FisError(f"--stop-alarm: not a CloudWatch alarm ARN: {bad[0]!r}")


def _template(description: str, options: FisOptions, targets: dict[str, Any], actions: dict[str, Any],
              tags: dict[str, str]) -> dict[str, Any]:
    return {
        "description": description[:512], "roleArn": options.role_arn,
        "stopConditions": [{"source": "aws:cloudwatch:alarm", "value": arn} for arn in options.stop_alarms],
        "targets": targets, "actions": actions, "tags": {**tags, options.tag[0]: options.tag[1]},
    }


def _task_target(deployment: Deployment, options: FisOptions, selection: str, task_arn: str = "") -> dict[str, Any]:
    """A FIS target among the deployment's own tasks: those of its service, in its cluster, carrying the
    allowlisted tag; ``task_arn``: only that one of them (FIS takes tags or ARNs, never both, so the ARN is
    a filter over the tagged tasks: a task that lost the tag or left the service is no target)."""
    key, value = options.tag
    target: dict[str, Any] = {"resourceType": "aws:ecs:task", "resourceTags": {key: value},
                              "parameters": {"cluster": deployment.cluster, "service": deployment.service},
                              "selectionMode": selection}
    if task_arn:
        target["filters"] = [{"path": "TaskArn", "values": [task_arn]}]
    return target


def kill_template(task_arn: str, deployment: Deployment, options: FisOptions) -> dict[str, Any]:
    """The experiment the AWS backend starts for a ``kill`` step when it runs: SIGKILL to the worker's process
    in the one task the step resolved to, at once, provided it is still a tagged task of the service."""
    check_options(options)
    action = _planned(Step(0.0, "kill", task_arn), options, deployment.region).action
    assert action is not None
    return _template(f"wsfleet kill of {task_arn.rsplit('/', 1)[-1]} on {deployment.cluster}", options,
                     {"task": _task_target(deployment, options, "COUNT(1)", task_arn)},
                     {"kill": {**action, "targets": {"Tasks": "task"}}}, {"wsfleet:fault": "kill"})


def fis_plan(name: str, steps: list[Step], deployment: Deployment, options: FisOptions) -> FisPlan:
    """The experiment for one expanded schedule (``ScenarioSpec.expand``'s steps at the run's time scale)."""
    check_options(options)
    faults = [_planned(step, options, deployment.region) for step in steps]
    clashes = {id(f) for f in _overlapping_network(faults)}
    faults = [PlannedFault(f.step, REFUSED, "overlaps an earlier network step: FIS runs one network action on a "
                                            "task at a time") if id(f) in clashes else f for f in faults]
    targets: dict[str, Any] = {}
    actions: dict[str, Any] = {}
    for i, fault in enumerate(faults):
        if fault.how != FIS or fault.action is None:
            continue
        targets[f"tasks-{i}"] = _task_target(deployment, options, "ALL" if fault.step.target == "all" else "COUNT(1)")
        action: dict[str, Any] = {**fault.action, "description": f"{fault.step.kind} -> {fault.step.target}",
                                  "targets": {"Tasks": f"tasks-{i}"}}
        if fault.step.at_s > 0:
            actions[f"wait-{i}"] = {"actionId": "aws:fis:wait", "parameters": {"duration": _duration(fault.step.at_s)}}
            action["startAfter"] = [f"wait-{i}"]
        actions[f"step-{i}-{fault.step.kind}"] = action
    template = _template(f"wsfleet scenario {name} on {deployment.cluster}/{deployment.service}", options,
                         targets, actions, {"wsfleet:scenario": name})
    return FisPlan(faults, template)
