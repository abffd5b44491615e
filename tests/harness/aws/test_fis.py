"""Tests of harness.aws.fis and ``wsfleet aws-plan``: a scenario's steps as FIS actions on the
deployment's tagged ECS tasks, each step either run by FIS or the harness or refused with why, and a dry run
that writes nothing but the template it is asked for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.aws.deployment import Deployment
from harness.aws.fis import FIS, HARNESS, REFUSED, FisError, FisOptions, fis_plan, kill_template
from harness.cli import main
from harness.scenarios.scenario_file import Step

DEPLOYMENT = Deployment(region="eu-west-1", router_url="https://abc.execute-api.eu-west-1.amazonaws.com",
                        tables={"connections": "c", "messages": "m", "workers": "w"},
                        queue_url="https://sqs.eu-west-1.amazonaws.com/123456789012/q", cluster="fleet",
                        service="workers", worker_log_group="/ecs/fleet", router_log_group="/aws/lambda/router")
ROLE = "arn:aws:iam::123456789012:role/wsfleet-fis"
ALARM = "arn:aws:cloudwatch:eu-west-1:123456789012:alarm:wsfleet-errors"
OPTIONS = FisOptions(ROLE, (ALARM,), upstream_host="feed.example.com", upstream_port=9443)


def latency(stream: str = "upstream", service: str = "dynamodb", at_s: float = 1.0) -> Step:
    return Step(at_s, "toxic", "worker-1", 4.0, {"type": "latency", "stream": stream, "service": service,
                                                  "attributes": {"latency": 300, "jitter": 50}})


def test_each_kind_is_run_by_fis_or_the_harness_or_refused_with_why() -> None:
    steps = [Step(0.0, "kill", "busiest"), Step(2.0, "term", "all"), Step(3.0, "partition_upstream", "random", 5.0),
             Step(9.0, "aws_timeout", "worker-2", 2.0), latency(at_s=12.0), latency("downstream", at_s=20.0),
             Step(30.0, "toxic", "worker-1", 1.0, {"type": "latency", "toxicity": 0.5}),
             Step(1.0, "pause", "worker-1", 2.0), Step(1.0, "clock_skew", "worker-1", 2.0, {"offset_ms": 50}),
             Step(1.0, "aws_throttle", "worker-1", 2.0), Step(1.0, "reset_upstream", "all")]
    plan = fis_plan("mix", steps, DEPLOYMENT, OPTIONS)
    how = [(f.step.kind, f.how, f.action["actionId"] if f.action else None) for f in plan.faults]
    assert how == [("kill", FIS, "aws:ecs:task-kill-process"), ("term", FIS, "aws:ecs:stop-task"),
                   ("partition_upstream", FIS, "aws:ecs:task-network-blackhole-port"),
                   ("aws_timeout", FIS, "aws:ecs:task-network-packet-loss"),
                   ("toxic", FIS, "aws:ecs:task-network-latency"), ("toxic", REFUSED, None), ("toxic", REFUSED, None),
                   ("pause", REFUSED, None), ("clock_skew", REFUSED, None), ("aws_throttle", REFUSED, None),
                   ("reset_upstream", HARNESS, None)]
    assert "answer direction" in plan.faults[5].detail and "toxicity below 1" in plan.faults[6].detail
    assert "SIGSTOP" in plan.faults[7].detail and "connections hang" in plan.faults[2].detail
    actions = plan.template["actions"]
    assert actions["step-2-partition_upstream"]["parameters"] == {
        "duration": "PT5S", "useEcsFaultInjectionEndpoints": "true", "port": "9443", "protocol": "tcp",
        "trafficType": "egress"}
    assert actions["step-3-aws_timeout"]["parameters"]["sources"] == "DYNAMODB"
    assert actions["step-4-toxic"]["parameters"]["delayMilliseconds"] == "300"


def test_every_target_is_the_services_tagged_tasks_and_every_step_waits_for_its_time() -> None:
    plan = fis_plan("t", [Step(0.0, "kill", "busiest"), Step(7.2, "term", "all")], DEPLOYMENT, OPTIONS)
    template = plan.template
    assert template["stopConditions"] == [{"source": "aws:cloudwatch:alarm", "value": ALARM}]
    assert template["roleArn"] == ROLE
    for target in template["targets"].values():
        assert target["resourceTags"] == {"wsfleet:chaos": "allowed"}
        assert target["parameters"] == {"cluster": "fleet", "service": "workers"}
    assert [t["selectionMode"] for t in template["targets"].values()] == ["COUNT(1)", "ALL"]
    assert "startAfter" not in template["actions"]["step-0-kill"]  # at 0 s: right away
    assert template["actions"]["step-1-term"]["startAfter"] == ["wait-1"]
    assert template["actions"]["wait-1"]["parameters"] == {"duration": "PT8S"}
    assert plan.action_minutes == 3  # kill, wait, stop-task: a minute each at least


def test_a_kill_targets_its_task_only_among_the_services_tagged_tasks() -> None:
    """The task is a filter over the service's tagged tasks, never a bare ARN: FIS takes ARNs or tags, not
    both, and a bare ARN would let a task outside the deployment (or one that lost the tag) be killed."""
    task = "arn:aws:ecs:eu-west-1:123456789012:task/fleet/0123456789abcdef"
    template = kill_template(task, DEPLOYMENT, OPTIONS)
    assert template["targets"] == {"task": {
        "resourceType": "aws:ecs:task", "resourceTags": {"wsfleet:chaos": "allowed"},
        "parameters": {"cluster": "fleet", "service": "workers"},
        "filters": [{"path": "TaskArn", "values": [task]}], "selectionMode": "COUNT(1)"}}
    assert template["actions"]["kill"]["targets"] == {"Tasks": "task"}


def test_network_steps_that_overlap_are_refused_fis_runs_one_at_a_time() -> None:
    steps = [Step(0.0, "partition_aws", "worker-1", 10.0), latency(at_s=3.0), Step(5.0, "aws_timeout", "all", 1.0),
             Step(10.0, "partition_aws", "worker-2", 1.0)]
    plan = fis_plan("o", steps, DEPLOYMENT, OPTIONS)
    assert [f.how for f in plan.faults] == [FIS, REFUSED, REFUSED, FIS]
    assert "one network action" in plan.faults[1].detail


@pytest.mark.parametrize(("options", "says"), [
    (FisOptions(ROLE, ()), "stop condition"),
    (FisOptions("arn:aws:iam::123:role/x", (ALARM,)), "--role-arn"),
    (FisOptions(ROLE, ("arn:aws:sns:eu-west-1:123456789012:topic",)), "--stop-alarm"),
])
def test_an_experiment_without_a_stop_alarm_or_with_a_bad_arn_is_not_built(options: FisOptions, says: str) -> None:
    with pytest.raises(FisError, match=says):
        fis_plan("x", [Step(0.0, "kill", "busiest")], DEPLOYMENT, options)


def outputs(tmp_path: Path) -> Path:
    values = {"region": "eu-west-1", "router_url": DEPLOYMENT.router_url, "connections_table": "c",
              "messages_table": "m", "workers_table": "w", "queue_url": DEPLOYMENT.queue_url, "cluster": "fleet",
              "service": "workers", "worker_log_group": "/ecs/fleet", "router_log_group": "/aws/lambda/router",
              "fleet_environment": {"WSFLEET_PROFILE": "hardened", "WSFLEET_LEASE_MS": "10000"}}
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({k: {"value": v} for k, v in values.items()}))
    return path


def plan_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["aws-plan", "--outputs", str(outputs(tmp_path)), "--role-arn", ROLE, "--stop-alarm", ALARM, *extra]


def test_the_role_comes_from_the_outputs_unless_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = outputs(tmp_path)
    args = ["aws-plan", "--outputs", str(path), "--stop-alarm", ALARM, "crash", "--fis-template",
            str(tmp_path / "fis.json")]
    assert main(args) == 2
    assert "no --role-arn, and the outputs name no fis_role_arn" in capsys.readouterr().err
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "fis_role_arn": {"value": ROLE}}))
    assert main(args) == 0
    assert json.loads((tmp_path / "fis.json").read_text())["roleArn"] == ROLE


def test_the_dry_run_prints_each_action_and_target_and_the_cost_and_writes_only_the_template(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template = tmp_path / "fis.json"
    args = plan_args(tmp_path, "crash", "--fis-template", str(template))
    before = set(tmp_path.iterdir())
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "nothing is changed" in out and "START 30 streams" in out
    assert "kill -> busiest: FIS aws:ecs:task-kill-process on one task of the service tagged" in out
    assert "total" in out and "$" in out
    assert set(tmp_path.iterdir()) - before == {template}
    assert json.loads(template.read_text())["actions"]["step-0-kill"]["actionId"] == "aws:ecs:task-kill-process"


def test_a_scenario_with_a_step_aws_cannot_run_exits_1_and_writes_no_template(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template = tmp_path / "fis.json"
    assert main(plan_args(tmp_path, "pause", "--fis-template", str(template))) == 1
    captured = capsys.readouterr()
    assert "pause -> " in captured.out and "REFUSED: FIS sends no SIGSTOP" in captured.out
    assert "1 of 1 steps cannot run on AWS (pause): no template written" in captured.err
    assert not template.exists()


@pytest.mark.parametrize(("extra", "says"), [
    (("nosuch",), "unknown scenario 'nosuch'"),
    (("crash", "--tag", "novalue"), "--tag must be KEY=VALUE"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          extra: tuple[str, ...], says: str) -> None:
    assert main(plan_args(tmp_path, *extra)) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_no_stop_alarm_is_refused_before_anything_is_printed(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    args = ["aws-plan", "--outputs", str(outputs(tmp_path)), "--role-arn", ROLE, "crash"]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert "needs a stop condition" in captured.err and captured.out == ""
