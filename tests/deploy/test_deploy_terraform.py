"""terraform/ agrees with the code it deploys (fleet/schema.py, fleet/config.py, the AWS calls and log
lines in fleet/), and each check is shown to catch a deliberately broken copy."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.deploy.deploy_checks import (
    alarm_problems,
    death_notice_problems,
    environment_problems,
    failover_problems,
    iam_problems,
    parse_problems,
    queue_problems,
    scaling_problems,
    table_problems,
    task_definition_problems,
)
from tests.deploy.deploy_harness_iam import HARNESS_AWS_MODULES, SIGNER_MODULE, harness_iam_problems
from tests.deploy.deploy_route53 import route53_problems
from tests.deploy.deploy_tree import DOCKERFILE, FLEET, REPO, TERRAFORM, Edit, editor

Checker = Callable[[Path, Path], list[str]]

CHECKERS: dict[str, Checker] = {
    "parse": lambda terraform, fleet: parse_problems(terraform),
    "tables": lambda terraform, fleet: table_problems(terraform),
    "queue": lambda terraform, fleet: queue_problems(terraform),
    "environment": lambda terraform, fleet: environment_problems(terraform),
    "task definition": lambda terraform, fleet: task_definition_problems(terraform, DOCKERFILE),
    "iam": iam_problems,
    "scaling": scaling_problems,
    "alarms": alarm_problems,
    "failover": lambda terraform, fleet: failover_problems(terraform),
    "death notices": lambda terraform, fleet: death_notice_problems(terraform),
    "harness iam": lambda terraform, fleet: harness_iam_problems(terraform, REPO),
    "route53": lambda terraform, fleet: route53_problems(terraform),
}


# The two log lines the alarms' metric filters read, which fleet/worker.py does not write yet: a refused
# acquisition (`lease.acquire` with `outcome`) and each reconcile's count of claimable connections.
ALARM_EVENTS_PROBE = """

def _alarm_events_probe() -> None:
    log("lease.acquire", pk="CONN#x", outcome="fail", via="notify")
    log("reconcile", claimable=0)
"""


@pytest.mark.parametrize(
    "check",
    sorted(CHECKERS),
)
def test_terraform_agrees_with_the_code(check: str) -> None:
    assert CHECKERS[check](TERRAFORM, FLEET) == []


@pytest.fixture
def fleet_with_alarm_events(fleet_copy: tuple[Path, Edit]) -> Path:
    """A copy of fleet/ whose worker also writes the log lines the alarms read."""
    root, _ = fleet_copy
    with (root / "worker.py").open("a", encoding="utf-8") as worker:
        worker.write(ALARM_EVENTS_PROBE)
    return root


# (check, file in terraform/, text, replacement, what the problem must mention)
BREAKAGES = [
    ("death notices", "modules/region/main.tf", "  count     = 2\n  rule      = aws_cloudwatch_event_rule",
     "  count     = 1\n  rule      = aws_cloudwatch_event_rule", "DEATH_NOTICE_COPIES is 2"),
    ("death notices", "modules/region/main.tf", 'target_id = "death-notice-${count.index}"',
     'target_id = "death-notice"', "not one per copy"),
    ("parse", "modules/queue/main.tf", 'resource "aws_sqs_queue" "notify" {', 'resource "aws_sqs_queue" {{',
     "modules/queue/main.tf"),
    ("tables", "modules/tables/main.tf",
     '''  global_secondary_index {
    name            = local.state_index_name
    hash_key        = "desired_state"
    range_key       = "lease_expires_at_ms"
    projection_type = "ALL"
  }
''', "", "desired_state-lease_expires_at_ms-index"),
    ("tables", "modules/tables/main.tf", 'projection_type = "ALL"', 'projection_type = "KEYS_ONLY"',
     "KEYS_ONLY"),
    ("tables", "modules/tables/main.tf",
     'name = "lease_expires_at_ms"\n    type = "N"', 'name = "lease_expires_at_ms"\n    type = "S"',
     "('lease_expires_at_ms', 'S')"),
    ("tables", "modules/tables/main.tf", 'range_key                   = "sk"',
     'range_key                   = "seq"', "('seq', 'RANGE')"),
    ("tables", "main.tf", 'workers_table_name     = "${var.name}-workers"',
     'workers_table_name     = "${var.name}-liveness"', "wsfleet-workers"),
    ("tables", "modules/tables/main.tf", 'stream_enabled              = true',
     'stream_enabled              = false', "replicas need stream_enabled"),
    ("tables", "modules/tables/main.tf", 'dynamic "replica" {', 'dynamic "replicas_off" {',
     "no replica (the harness's Global Tables replicate every table"),
    ("tables", "variables.tf",
     'replica."\n  type        = bool\n  default     = true',
     'replica."\n  type        = bool\n  default     = false', "point-in-time recovery"),
    ("queue", "modules/queue/main.tf", "maxReceiveCount = 5", "maxReceiveCount = 3", "maxReceiveCount is 3"),
    ("queue", "modules/queue/main.tf", "visibility_timeout_seconds = 30", "visibility_timeout_seconds = 60",
     "visibility_timeout_seconds"),
    ("queue", "main.tf", 'queue_name              = "${var.name}-notify"\n',
     'queue_name              = "${var.name}-events"\n', "no queue named wsfleet-notify"),
    ("environment", "modules/region/main.tf", "WSFLEET_LEASE_MS ", "WSFLEET_LEASE_MSEC ", "WSFLEET_LEASE_MS"),
    ("environment", "modules/region/main.tf", "    WSFLEET_CLOCK_OFFSET_MS    = \"\"\n", "",
     "WSFLEET_CLOCK_OFFSET_MS"),
    ("environment", "modules/router/main.tf", "in var.fleet_environment :", "in var.fleet_settings :",
     "not var.fleet_environment"),
    ("task definition", "variables.tf",
     "(Fargate maximum: 120).\"\n  type        = number\n  default     = 120",
     "(Fargate maximum: 120).\"\n  type        = number\n  default     = 300", "stopTimeout 300"),
    ("task definition", "modules/workers/main.tf", 'logDriver = "awslogs"', 'logDriver = "json-file"',
     "json-file"),
    ("task definition", "modules/workers/main.tf", '"CMD", "wsfleet-healthcheck"', '"CMD", "true"', "true"),
    ("task definition", "modules/workers/main.tf", "readonlyRootFilesystem = true", "readonlyRootFilesystem = false",
     "readonlyRootFilesystem is not true"),
    ("task definition", "modules/workers/main.tf", "  volume {\n    name = local.scratch_volume\n  }\n", "",
     "mount point '/tmp' uses volume 'tmp', which the task definition does not declare"),
    ("iam", "modules/workers/main.tf", '"dynamodb:PutItem", "dynamodb:Scan", ', '"dynamodb:PutItem", ',
     "dynamodb:Scan is not granted on the workers table (fleet.aws"),
    ("iam", "modules/workers/main.tf", '"dynamodb:PutItem", "dynamodb:Scan", ',
     '"dynamodb:PutItem", "dynamodb:Scan", "dynamodb:DeleteItem", ',
     "dynamodb:DeleteItem is granted on the workers table but the code never calls it there"),
    ("iam", "modules/workers/main.tf", "resources = [var.messages_table_arn]",
     "resources = [var.messages_table_arn, var.workers_table_arn]",
     "dynamodb:Query is granted on the workers table but the code never calls it there"),
    ("iam", "modules/router/main.tf", "resources = [var.workers_table_arn]", "resources = [var.connections_table_arn]",
     "router role: dynamodb:UpdateItem is not granted on the workers table (fleet.router"),
    ("iam", "modules/router/main.tf", "resources = [var.connections_table_arn]",
     'resources = [var.connections_table_arn, "arn:aws:dynamodb:us-east-1:1:table/other"]',
     "dynamodb:PutItem is granted on arn:aws:dynamodb:us-east-1:1:table/other, which is no table"),
    ("iam", "modules/router/main.tf", 'actions   = ["sqs:SendMessage"]', 'actions   = ["sqs:*"]', "sqs:*"),
    ("iam", "modules/workers/region_gate.tf", '"route53-recovery-cluster:GetRoutingControlState"',
     '"route53-recovery-cluster:ListRoutingControls"',
     "worker task role: route53-recovery-cluster:GetRoutingControlState is not granted (fleet.region_gate"),
    ("iam", "modules/router/region_gate.tf", "resources = [var.region_gate_control_arn]", 'resources = ["*"]',
     "router role: ['route53-recovery-cluster:GetRoutingControlState'] granted on every resource"),
    ("environment", "modules/region/main.tf", "    WSFLEET_REGION_GATE_CONTROL   = var.region_gate_control_arn\n", "",
     "WSFLEET_REGION_GATE_CONTROL"),
    ("iam", "modules/workers/main.tf", "resources = var.index_arns", "resources = [var.connections_table_arn]",
     "dynamodb:Query is not granted on the connections table's index"),
    ("iam", "modules/workers/main.tf", 'variable = "cloudwatch:namespace"',
     'variable = "aws:RequestedRegion"', "cloudwatch:namespace"),
    ("iam", "modules/router/main.tf", "resources = [var.queue_arn]", 'resources = ["*"]',
     "on every resource"),
    ("scaling", "variables.tf", "default     = 700", "default     = 600", "target_value is 600"),
    ("scaling", "variables.tf", "default     = 120\n}\n\nvariable \"scale_in_cooldown_s\"",
     "default     = 60\n}\n\nvariable \"scale_in_cooldown_s\"", "scale_out_cooldown is 60"),
    ("scaling", "variables.tf", "default     = 900", "default     = 300", "scale_in_cooldown is 300"),
    ("scaling", "modules/autoscaling/main.tf", 'statistic   = "Average"', 'statistic   = "Sum"', "Average"),
    ("scaling", "modules/autoscaling/main.tf", 'metric_name = "ActiveConnections"',
     'metric_name = "Connections"', "Connections"),
    ("scaling", "modules/region/main.tf", 'metric_namespace = "wsfleet"', 'metric_namespace = "fleet"',
     "fleet"),
    ("alarms", "modules/alarms/main.tf", '$.event = \\"lease.acquire\\"', '$.event = \\"lease.acquired\\"',
     "lease.acquired"),
    ("alarms", "modules/alarms/main.tf", 'metric_name         = "ActiveConnections"',
     'metric_name         = "ActiveWorkers"', "ActiveWorkers"),
    ("failover", "modules/failover/main.tf", 'type = "SECONDARY"', 'type = "PRIMARY"', "SECONDARY"),
    ("failover", "modules/failover/main.tf", "  health_check_id = aws_route53_health_check.standby.id\n", "",
     "has no health check"),
    ("failover", "main.tf", "replica_regions        = local.standby ? [var.standby_region] : []",
     "replica_regions        = []", "replica_regions"),
    ("route53", "modules/failover/main.tf", "failure_threshold = local.timings.failure_threshold\n  enable_sni",
     "failure_threshold = 3\n  enable_sni", "failure_threshold is 3, not local.timings.failure_threshold"),
    ("route53", "modules/failover/main.tf", "request_interval  = local.timings.request_interval_s",
     "request_interval  = 30", "request_interval is 30, not local.timings.request_interval_s"),
    ("route53", "modules/failover/main.tf", 'jsondecode(file("${path.module}/timings.json"))',
     '{ record_ttl_s = 60, request_interval_s = 10, failure_threshold = 3 }', "not local.timings.record_ttl_s"),
    ("route53", "modules/failover/main.tf", 'type            = "CNAME"', 'type            = "A"',
     "record standby: A with TTL"),
    ("route53", "modules/failover/main.tf", 'set_identifier  = "standby"', 'set_identifier  = "secondary"',
     "SECONDARY is set_identifier 'secondary', the harness names it 'standby'"),
    ("route53", "variables.tf", 'default     = "/health"', 'default     = "/healthz"', "resource_path is '/healthz'"),
    ("harness iam", "modules/chaos/main.tf", '"dynamodb:DescribeTable", "dynamodb:ListTagsOfResource"',
     '"dynamodb:DescribeTable"', "the harness calls dynamodb:ListTagsOfResource but modules/chaos does not grant"),
    ("harness iam", "modules/chaos/main.tf", '["logs:FilterLogEvents"]',
     '["logs:FilterLogEvents", "logs:GetLogEvents"]',
     "modules/chaos grants logs:GetLogEvents but the harness never calls it"),
]


@pytest.mark.parametrize(
    ("check", "relative", "old", "new", "expected"),
    BREAKAGES,
    ids=[f"{b[0]}:{b[4][:40]}" for b in BREAKAGES],
)
def test_check_catches_a_broken_copy(
    terraform_copy: tuple[Path, Edit],
    fleet_with_alarm_events: Path,
    check: str,
    relative: str,
    old: str,
    new: str,
    expected: str,
) -> None:
    root, edit = terraform_copy
    assert CHECKERS[check](root, fleet_with_alarm_events) == [], "the unbroken copy must pass"
    edit(relative, old, new)
    problems = CHECKERS[check](root, fleet_with_alarm_events)
    assert any(expected in problem for problem in problems), problems


def test_iam_check_follows_the_code(fleet_copy: tuple[Path, Edit]) -> None:
    """A new AWS call in the worker's code is a missing grant, without touching the test."""
    root, edit = fleet_copy
    edit(
        "store.py",
        "    async def get_connection(",
        "    async def forget(self, pk: str) -> None:\n"
        "        await self.aws.ddb.delete_item(TableName=self.config.connections_table, Key={'pk': {'S': pk}})\n\n"
        "    async def get_connection(",
    )
    problems = iam_problems(TERRAFORM, root)
    assert [p.split(" (")[0] for p in problems] == [
        "worker task role: dynamodb:DeleteItem is not granted on the connections table"
    ], problems
    assert "fleet.store:" in problems[0]


def test_iam_check_follows_a_table_passed_as_an_argument(fleet_copy: tuple[Path, Edit]) -> None:
    """The worker reads a message-log item through the store's generic read instead of its own GetItem: the
    grant on messages is still found used, by following ``_read``'s ``table`` parameter to the call site; and
    pointed at the workers table instead, the grant on messages is named unused."""
    root, edit = fleet_copy
    direct = ("            response = await self.aws.ddb.get_item(TableName=self.config.messages_table,\n"
              "                                                   Key=to_typed({\"pk\": pk, \"sk\": b}), "
              "ConsistentRead=True)\n        item = response.get(\"Item\")\n")
    edit("store.py", direct, "            item = await self._read(self.config.messages_table, pk)\n")
    assert iam_problems(TERRAFORM, root) == []
    edit("store.py", "self._read(self.config.messages_table, pk)", "self._read(self.config.workers_table, pk)")
    problems = iam_problems(TERRAFORM, root)
    assert [p.split(" (")[0] for p in problems] == [
        "worker task role: dynamodb:GetItem is granted on the messages table but the code never calls it there"
    ], problems


def test_iam_check_refuses_a_table_it_cannot_tell(fleet_copy: tuple[Path, Edit]) -> None:
    root, edit = fleet_copy
    edit(
        "store.py",
        "    async def get_connection(",
        "    async def forget(self, pk: str) -> None:\n"
        "        await self.aws.ddb.delete_item(TableName='t', Key={'pk': {'S': pk}})\n\n"
        "    async def get_connection(",
    )
    problems = iam_problems(TERRAFORM, root)
    assert any(p.startswith("worker task role: cannot tell which table fleet.store:") and "('t')" in p
               for p in problems), problems


def test_iam_check_splits_worker_and_router_calls(fleet_copy: tuple[Path, Edit]) -> None:
    """A call only the router makes must be granted to the router's role, not the worker's."""
    root, edit = fleet_copy
    edit(
        "router.py",
        "def _store_failure(",
        "async def _forget(pk: str, clients: AwsClients, config: FleetConfig) -> None:\n"
        "    await clients.ddb.delete_item(TableName=config.connections_table, Key={'pk': {'S': pk}})\n\n\n"
        "def _store_failure(",
    )
    problems = [p for p in iam_problems(TERRAFORM, root) if "DeleteItem" in p]
    assert problems, "the router's new call was not noticed"
    assert all(p.startswith("router role: dynamodb:DeleteItem is not granted on the connections table")
               for p in problems), problems


def test_alarm_check_reports_a_field_the_worker_does_not_log(fleet_copy: tuple[Path, Edit]) -> None:
    root, edit = fleet_copy
    # the worker stops logging the outcome of its acquires
    edit("stream_driver.py", 'log("lease.acquire", pk=stream.pk, outcome=',
         'log("lease.acquire", pk=stream.pk, result=')
    problems = alarm_problems(TERRAFORM, root)
    assert any("'lease.acquire'" in p and "'outcome'" in p for p in problems), problems
    assert not any("reconcile" in p for p in problems), problems


def test_harness_iam_check_follows_the_harness_code(tmp_path: Path) -> None:
    """A new AWS call in the harness (here: the preflight reading the task definition) must be granted."""
    for name in (*HARNESS_AWS_MODULES, SIGNER_MODULE):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((REPO / name).read_text(encoding="utf-8"), encoding="utf-8")
    assert harness_iam_problems(TERRAFORM, tmp_path) == []
    editor(tmp_path)("harness/aws/deployment.py",
                     'found = session.client("ecs", region_name=region).describe_services(',
                     'session.client("ecs").describe_task_definition(taskDefinition="x")\n'
                     '        found = session.client("ecs", region_name=region).describe_services(')
    assert harness_iam_problems(TERRAFORM, tmp_path) == [
        "the harness calls ecs:DescribeTaskDefinition but modules/chaos does not grant it"]
