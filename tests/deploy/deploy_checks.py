"""Checks of terraform/ against the code it deploys (the Dockerfile's are in ``deploy_docker``).  Each
returns a list of problems (empty: consistent), so one function runs on the real tree and on a
deliberately broken copy.

Truth comes from the code at test time: table definitions from ``fleet.schema``, variable names from
``fleet.config.ENV_VARS``, IAM actions, metric names and logged events from the fleet's source
(``deploy_fleet_code``).  Only the published scaling values are constants here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fleet import schema
from fleet.config import ENV_VARS, FleetConfig
from tests.deploy.deploy_docker import dockerfile_healthcheck
from tests.deploy.deploy_fleet_code import (
    AwsCall,
    ModuleFacts,
    aws_calls,
    fleet_modules,
    iam_action,
    import_closure,
    log_events,
    table_roles,
)
from tests.deploy.deploy_hcl import Instance, TerraformParseError, parse_file, references, tf_files

# The published autoscaling values (target tracking on ActiveConnections).
PUBLISHED_SCALING = {"target_value": 700, "scale_out_cooldown": 120, "scale_in_cooldown": 900}
FARGATE_MAX_STOP_TIMEOUT_S = 120
# Environment names a task definition may carry besides ENV_VARS.
EXTRA_TASK_ENV = {"AWS_REGION"}
# Where each role's process starts, and the module path from the root to the module owning the role.
WORKER_ENTRY = "fleet.worker"
ROUTER_ENTRY = "fleet.router"
REGION_PATH = ("primary",)


# -- parsing -----------------------------------------------------------------------------------------
def parse_problems(terraform_dir: Path) -> list[str]:
    """Every .tf file parses with python-hcl2."""
    files = tf_files(terraform_dir)
    if not files:
        return [f"no .tf files under {terraform_dir}"]
    problems = []
    for path in files:
        try:
            parse_file(path)
        except TerraformParseError as exc:
            problems.append(str(exc))
    return problems


# -- tables ------------------------------------------------------------------------------------------
def _table_view(definition: dict[str, Any]) -> dict[str, Any]:
    """The parts of a CreateTable request terraform must reproduce."""
    return {
        "keys": sorted((k["AttributeName"], k["KeyType"]) for k in definition["KeySchema"]),
        "attributes": sorted(
            (a["AttributeName"], a["AttributeType"]) for a in definition["AttributeDefinitions"]
        ),
        "indexes": sorted(
            (
                index["IndexName"],
                tuple(sorted((k["AttributeName"], k["KeyType"]) for k in index["KeySchema"])),
                index["Projection"]["ProjectionType"],
                tuple(sorted(index["Projection"].get("NonKeyAttributes", []))),
            )
            for index in definition.get("GlobalSecondaryIndexes", [])
        ),
        "billing": definition.get("BillingMode", "PROVISIONED"),
    }


def _terraform_table(tables: Instance, body: dict[str, Any]) -> dict[str, Any]:
    """A terraform aws_dynamodb_table as the CreateTable request it stands for."""
    body = tables.resolve(body)
    keys = [{"AttributeName": body["hash_key"], "KeyType": "HASH"}]
    if body.get("range_key"):
        keys.append({"AttributeName": body["range_key"], "KeyType": "RANGE"})
    indexes = []
    for index in body.get("global_secondary_index", []):
        index_keys = [{"AttributeName": index["hash_key"], "KeyType": "HASH"}]
        if index.get("range_key"):
            index_keys.append({"AttributeName": index["range_key"], "KeyType": "RANGE"})
        projection: dict[str, Any] = {"ProjectionType": index.get("projection_type")}
        if index.get("non_key_attributes"):
            projection["NonKeyAttributes"] = index["non_key_attributes"]
        indexes.append({"IndexName": index["name"], "KeySchema": index_keys, "Projection": projection})
    return {
        "TableName": body["name"],
        "KeySchema": keys,
        "AttributeDefinitions": [
            {"AttributeName": a["name"], "AttributeType": a["type"]} for a in body.get("attribute", [])
        ],
        "GlobalSecondaryIndexes": indexes,
        "BillingMode": body.get("billing_mode", "PROVISIONED"),
    }


def table_problems(terraform_dir: Path) -> list[str]:
    """The tables equal fleet/schema.py's (names with the root's defaults, keys, attribute types, indexes
    and projections, billing); the connections table has point-in-time recovery; every table has replicas,
    as the harness's emulation replicates every table, and the stream Global Tables require."""
    tables = Instance.root(terraform_dir).child("tables")
    expected = {d["TableName"]: d for d in schema.tables(FleetConfig())}
    problems = []
    found: dict[str, dict[str, Any]] = {}
    for resource, body in tables.module.resource("aws_dynamodb_table").items():
        table = _terraform_table(tables, body)
        found[str(table["TableName"])] = table
        resolved = tables.resolve(body)
        replicated = any("replica" in block for block in resolved.get("dynamic", []))
        streamed = resolved.get("stream_enabled") is True
        if not replicated:
            problems.append(f"table {resource}: no replica (the harness's Global Tables replicate every table, "
                            "harness/region/global_tables.py)")
        elif not (streamed and resolved.get("stream_view_type") == "NEW_AND_OLD_IMAGES"):
            problems.append(f"table {resource}: replicas need stream_enabled with NEW_AND_OLD_IMAGES")
        if table["TableName"] == FleetConfig().connections_table:
            recovery = resolved.get("point_in_time_recovery", [{}])[0].get("enabled")
            if recovery not in (True, "true"):
                problems.append(f"table {resource}: point-in-time recovery is not enabled ({recovery!r})")
    for name in sorted(set(expected) - set(found)):
        problems.append(f"table {name} of fleet/schema.py is missing from terraform")
    for name in sorted(set(found) - set(expected)):
        problems.append(f"terraform table {name} is not in fleet/schema.py")
    for name in sorted(set(expected) & set(found)):
        want, have = _table_view(expected[name]), _table_view(found[name])
        for part in want:
            if want[part] != have[part]:
                problems.append(f"table {name} {part}: schema.py has {want[part]}, "
                                f"terraform has {have[part]}")
    return problems


# -- queue -------------------------------------------------------------------------------------------
def queue_problems(terraform_dir: Path) -> list[str]:
    """The notification queue has schema.queue_attributes()'s values and redrives to the dead-letter queue
    after schema.MAX_RECEIVES receives."""
    queue = Instance.root(terraform_dir).descendant(*REGION_PATH, "queue")
    queues = {name: queue.resolve(body) for name, body in queue.module.resource("aws_sqs_queue").items()}
    by_name = {body.get("name"): resource for resource, body in queues.items()}
    problems = []
    for wanted in (schema.QUEUE_NAME, schema.DLQ_NAME):
        if wanted not in by_name:
            problems.append(f"no queue named {wanted} (found {sorted(map(str, by_name))})")
    if problems:
        return problems
    main, dead_letter = queues[by_name[schema.QUEUE_NAME]], by_name[schema.DLQ_NAME]
    attributes = schema.queue_attributes()
    for attribute, argument in (
        ("VisibilityTimeout", "visibility_timeout_seconds"),
        ("MessageRetentionPeriod", "message_retention_seconds"),
    ):
        if str(main.get(argument)) != attributes[attribute]:
            problems.append(f"queue {argument} is {main.get(argument)!r}, "
                            f"schema.py says {attributes[attribute]}")
    policy_refs = references(main.get("redrive_policy"), "local")
    policy = queue.resolve(f"${{local.{policy_refs[0]}}}") if len(policy_refs) == 1 else None
    if not isinstance(policy, dict):
        redrive = main.get("redrive_policy")
        return [*problems, f"queue redrive_policy is not jsonencode(local.<map>): {redrive!r}"]
    if str(policy.get("maxReceiveCount")) != str(schema.MAX_RECEIVES):
        problems.append(f"maxReceiveCount is {policy.get('maxReceiveCount')!r}, schema.MAX_RECEIVES is "
                        f"{schema.MAX_RECEIVES}")
    if f"aws_sqs_queue.{dead_letter}.arn" not in str(policy.get("deadLetterTargetArn")):
        problems.append(f"deadLetterTargetArn {policy.get('deadLetterTargetArn')!r} is not {schema.DLQ_NAME}")
    return problems


# -- environment -------------------------------------------------------------------------------------
def _environment_names(region: Instance, expression: Any) -> set[str]:
    """Keys of every local map an (unevaluated) expression in the region module merges together."""
    names: set[str] = set()
    for local in references(expression, "local"):
        value = region.resolve(f"${{local.{local}}}")
        if isinstance(value, dict):
            names.update(value)
        elif isinstance(value, str):
            names.update(_environment_names(region, region.module.locals.get(local)))
    return names


def environment_problems(terraform_dir: Path) -> list[str]:
    """The worker task definition's and the router function's environment names equal
    set(fleet.config.ENV_VARS.values()) (plus AWS_REGION for the task)."""
    region = Instance.root(terraform_dir).descendant(*REGION_PATH)
    expected = set(ENV_VARS.values())
    problems = []
    for child, allowed_extra in (("workers", EXTRA_TASK_ENV), ("router", set())):
        passed = region.module.modules.get(child, {}).get("fleet_environment")
        names = _environment_names(region, passed)
        for name in sorted(expected - names):
            problems.append(f"{child}: {name} (fleet/config.py ENV_VARS) is not in the environment")
        for name in sorted(names - expected - allowed_extra):
            problems.append(f"{child}: {name} is in the environment but fleet/config.py does not read it")
    workers = region.child("workers")
    container = _container(workers)
    environment = container.get("environment")
    sources = [workers.module.locals.get(name) for name in references(environment, "local")]
    if not sources or not all("var.fleet_environment" in str(source) for source in sources):
        problems.append(f"workers: the container's environment {environment!r} is not built from "
                        "var.fleet_environment")
    router = region.child("router")
    for name, function in router.module.resource("aws_lambda_function").items():
        variables = function.get("environment", [{}])[0].get("variables")
        if "var.fleet_environment" not in str(variables):
            problems.append(f"router: function {name} environment is {variables!r}, "
                            "not var.fleet_environment")
    return problems


def _container(workers: Instance) -> dict[str, Any]:
    """The worker container definition (container_definitions = jsonencode([local.<container>]))."""
    definitions = [
        body.get("container_definitions")
        for body in workers.module.resource("aws_ecs_task_definition").values()
    ]
    locals_named = references(definitions[0], "local") if len(definitions) == 1 else []
    if len(locals_named) != 1:
        return {}
    container = workers.module.locals.get(locals_named[0])
    return container if isinstance(container, dict) else {}


# -- task definition ---------------------------------------------------------------------------------
def task_definition_problems(terraform_dir: Path, dockerfile: Path) -> list[str]:
    """One worker container: awslogs, a stop timeout Fargate accepts (at most 120 s) by default, the
    image's health check command, and a read-only root filesystem whose mount points are task volumes."""
    workers = Instance.root(terraform_dir).descendant(*REGION_PATH, "workers")
    container = workers.resolve(_container(workers))
    if not container:
        return ["workers: container_definitions is not jsonencode([local.<container map>])"]
    problems = []
    stop_timeout = container.get("stopTimeout")
    if not isinstance(stop_timeout, int) or not 0 < stop_timeout <= FARGATE_MAX_STOP_TIMEOUT_S:
        problems.append(f"workers: stopTimeout {stop_timeout!r} is not 1..{FARGATE_MAX_STOP_TIMEOUT_S} s")
    log_driver = container.get("logConfiguration", {}).get("logDriver")
    if log_driver != "awslogs":
        problems.append(f"workers: log driver is {log_driver!r}, not awslogs")
    command = container.get("healthCheck", {}).get("command", [])
    image_check = dockerfile_healthcheck(dockerfile)
    if command[1:] != image_check:
        problems.append(f"workers: health check {command!r} is not the image's HEALTHCHECK {image_check!r}")
    if container.get("readonlyRootFilesystem") is not True:
        problems.append("workers: readonlyRootFilesystem is not true")
    volumes = {
        str(workers.resolve(volume.get("name")))
        for body in workers.module.resource("aws_ecs_task_definition").values()
        for volume in body.get("volume", [])
    }
    for mount in container.get("mountPoints", []):
        if mount.get("sourceVolume") not in volumes:
            problems.append(f"workers: mount point {mount.get('containerPath')!r} uses volume "
                            f"{mount.get('sourceVolume')!r}, which the task definition does not declare")
    return problems


# -- IAM ---------------------------------------------------------------------------------------------
def _role_statements(instance: Instance, role_reference: str) -> list[dict[str, Any]]:
    """Statements of every inline policy document attached to ``aws_iam_role.<name>``."""
    match = re.search(r"aws_iam_role\.([\w-]+)\.", role_reference)
    if not match:
        return []
    role = match.group(1)
    documents = instance.module.data_source("aws_iam_policy_document")
    statements: list[dict[str, Any]] = []
    for policy in instance.module.resource("aws_iam_role_policy").values():
        if f"aws_iam_role.{role}." not in str(policy.get("role")):
            continue
        for document in references(policy.get("policy"), "data.aws_iam_policy_document"):
            statements.extend(instance.resolve(documents.get(document, {})).get("statement", []))
    for attachment in instance.module.resource("aws_iam_role_policy_attachment").values():
        if f"aws_iam_role.{role}." in str(attachment.get("role")):
            statements.append({"actions": ["<managed policy: unverifiable>"], "resources": ["*"]})
    return statements


def _role_of(instance: Instance, resource_type: str, argument: str) -> str:
    bodies = list(instance.module.resource(resource_type).values())
    return str(bodies[0].get(argument)) if len(bodies) == 1 else ""


def _statement_actions(statements: Iterable[dict[str, Any]]) -> set[str]:
    actions: set[str] = set()
    for statement in statements:
        listed = statement.get("actions", [])
        actions.update(listed if isinstance(listed, list) else [listed])
    return actions


def _resources(statement: dict[str, Any]) -> list[Any]:
    listed = statement.get("resources", [])
    return listed if isinstance(listed, list) else [listed]


def _namespace_condition(statement: dict[str, Any]) -> set[str]:
    values: set[str] = set()
    for condition in statement.get("condition", []):
        if condition.get("variable") == "cloudwatch:namespace" and condition.get("test") == "StringEquals":
            values.update(condition.get("values", []))
    return values


def _dynamodb_resource(resource: Any, table_names: dict[str, str]) -> str:
    """``connections``, ``connections/index`` (any index of it), ... for a resolved table or index ARN;
    the ARN itself when it names no table of the deployment."""
    match = re.search(r":table/([^/]+)(/index/[^/]+)?$", str(resource))
    role = table_names.get(match.group(1)) if match else None
    if match is None or role is None:
        return str(resource)
    return role + ("/index" if match.group(2) else "")


def _granted_on_tables(instance: Instance, statements: list[dict[str, Any]],
                       table_names: dict[str, str]) -> set[tuple[str, str]]:
    """(DynamoDB action, table role or ``role/index`` or unrecognised ARN) pairs the statements grant."""
    granted: set[tuple[str, str]] = set()
    for statement in statements:
        resources: list[Any] = []
        for resource in _resources(statement):
            resolved = instance.resolve(resource)
            resources.extend(resolved if isinstance(resolved, list) else [resolved])
        for action in statement.get("actions", []):
            if str(action).startswith("dynamodb:"):
                granted.update((action, _dynamodb_resource(r, table_names)) for r in resources)
    return granted


def _needed_on_tables(
    who: str, calls: list[AwsCall], modules: dict[str, ModuleFacts], closure: set[str]
) -> tuple[dict[tuple[str, str], AwsCall], list[str]]:
    """(DynamoDB action, table role or ``role/index``) pairs the calls need, each with a call needing it;
    and a problem for each call whose table cannot be told."""
    needed: dict[tuple[str, str], AwsCall] = {}
    problems: list[str] = []
    for call in calls:
        for use in call.tables:
            action = use.action or iam_action(call.service, call.operation)
            for role in sorted(table_roles(use.table, modules, closure)):
                if role.startswith("?"):
                    problems.append(f"{who}: cannot tell which table {call.module}:{call.line} {call.operation} "
                                    f"uses ({role[1:]}): name it by a *_table setting")
                    continue
                needed.setdefault((action, role + ("/index" if call.uses_index else "")), call)
    return needed, problems


def _where(resource: str) -> str:
    role, _, index = resource.partition("/")
    return f"the {role} table's index" if index else f"the {role} table"


def _policy_problems(
    who: str,
    instance: Instance,
    statements: list[dict[str, Any]],
    calls: list[AwsCall],
    code: tuple[dict[str, ModuleFacts], set[str], dict[str, str]],
    ignored_prefixes: tuple[str, ...],
) -> list[str]:
    """``code``: the fleet's modules, the role's import closure, and table name -> table role."""
    modules, closure, table_names = code
    problems = []
    needed: dict[str, AwsCall] = {}
    for call in calls:
        if call.service == "dynamodb":
            continue
        try:
            needed.setdefault(iam_action(call.service, call.operation), call)
        except KeyError as exc:
            problems.append(f"{who}: {call.module}:{call.line}: {exc}")
    granted = {
        a for a in _statement_actions(statements)
        if not a.startswith(ignored_prefixes) and not a.startswith("dynamodb:")
    }
    for action in sorted(set(needed) - granted):
        call = needed[action]
        problems.append(f"{who}: {action} is not granted ({call.module}:{call.line} calls {call.operation})")
    for action in sorted(granted - set(needed)):
        problems.append(f"{who}: {action} is granted but the code never calls it")
    table_needs, unknown_tables = _needed_on_tables(who, [c for c in calls if c.service == "dynamodb"],
                                                    modules, closure)
    problems.extend(unknown_tables)
    table_grants = _granted_on_tables(instance, statements, table_names)
    for action, resource in sorted(set(table_needs) - table_grants):
        call = table_needs[(action, resource)]
        problems.append(f"{who}: {action} is not granted on {_where(resource)} "
                        f"({call.module}:{call.line} calls {call.operation})")
    for action, resource in sorted(table_grants - set(table_needs)):
        known = resource.partition("/")[0] in table_names.values()
        where = _where(resource) if known else f"{resource}, which is no table of the deployment"
        problems.append(f"{who}: {action} is granted on {where} but the code never calls it there")
    namespaces = {call.namespace for call in calls if call.namespace}
    for statement in statements:
        actions = set(statement.get("actions", []))
        if "*" in _resources(statement):
            if actions != {"cloudwatch:PutMetricData"}:
                problems.append(f"{who}: {sorted(actions)} granted on every resource (\"*\")")
            elif actions == {"cloudwatch:PutMetricData"} and _namespace_condition(statement) != namespaces:
                problems.append(f"{who}: cloudwatch:PutMetricData is not limited to the namespace(s) "
                                f"the code publishes to {sorted(namespaces)} (cloudwatch:namespace)")
    return problems


def iam_problems(terraform_dir: Path, fleet_dir: Path) -> list[str]:
    """The worker task role and the router function's role grant exactly the AWS operations the code run
    by each calls (worker: fleet.worker and what it imports; router: fleet.router and what it imports),
    DynamoDB actions per table (and index) exactly where the code uses them, on named resources only;
    PutMetricData, which takes no resource, only for the code's namespace."""
    modules = fleet_modules(fleet_dir)
    calls = aws_calls(modules)
    region = Instance.root(terraform_dir).descendant(*REGION_PATH)
    table_names = {
        str(region.resolve(f"${{var.{variable}}}")): variable.removesuffix("_table_name")
        for variable in region.module.variables
        if variable.endswith("_table_name")
    }
    problems = []
    for who, entry, child, resource_type, argument in (
        ("worker task role", WORKER_ENTRY, "workers", "aws_ecs_task_definition", "task_role_arn"),
        ("router role", ROUTER_ENTRY, "router", "aws_lambda_function", "role"),
    ):
        if f"{entry}" not in modules:
            problems.append(f"{who}: {entry.replace('.', '/')}.py does not exist")
            continue
        closure = import_closure(modules, entry)
        instance = region.child(child)
        statements = _role_statements(instance, _role_of(instance, resource_type, argument))
        if not statements:
            problems.append(f"{who}: no inline policy found for {resource_type}.{argument}")
        own_calls = [call for call in calls if call.module in closure]
        # The router's function writes its own log group; that is the runtime's, not the fleet's code; and the
        # queue's customer-managed key (kms_key_arn) is used by SQS on the caller's behalf.
        code = (modules, closure, table_names)
        problems.extend(_policy_problems(who, instance, statements, own_calls, code, ("logs:", "kms:")))
    return problems


# -- scaling -----------------------------------------------------------------------------------------
MetricKey = tuple[str | None, str | None, frozenset[str]]


def _published_metric(calls: list[AwsCall], metric_name: str) -> set[MetricKey]:
    """(namespace, unit, dimension names) under which the code publishes ``metric_name``."""
    return {
        (call.namespace, unit, dimensions)
        for call in calls
        if call.operation == "put_metric_data"
        for name, unit, dimensions in call.metrics
        if name == metric_name
    }


def scaling_problems(terraform_dir: Path, fleet_dir: Path) -> list[str]:
    """Target tracking with the published values (700 per task, 120 s out, 900 s in) on the Average of
    a metric the worker publishes, under the same namespace, unit and dimensions."""
    autoscaling = Instance.root(terraform_dir).descendant(*REGION_PATH, "autoscaling")
    policies = [
        autoscaling.resolve(body)
        for body in autoscaling.module.resource("aws_appautoscaling_policy").values()
        if autoscaling.resolve(body.get("policy_type")) == "TargetTrackingScaling"
    ]
    if len(policies) != 1:
        return [f"expected one target-tracking policy, found {len(policies)}"]
    configuration = policies[0].get("target_tracking_scaling_policy_configuration", [{}])[0]
    problems = []
    for argument, value in PUBLISHED_SCALING.items():
        if configuration.get(argument) != value:
            problems.append(f"{argument} is {configuration.get(argument)!r}, the published value is {value}")
    metric = configuration.get("customized_metric_specification", [{}])[0]
    if metric.get("statistic") != "Average":
        problems.append(f"the tracked statistic is {metric.get('statistic')!r}, not Average (per task)")
    calls = aws_calls(fleet_modules(fleet_dir))
    published = _published_metric(calls, str(metric.get("metric_name")))
    dimensions = frozenset(d.get("name") for d in metric.get("dimensions", []))
    tracked = (metric.get("namespace"), metric.get("unit"), dimensions)
    if tracked not in published:
        problems.append(
            f"tracked metric {metric.get('metric_name')!r} (namespace, unit, dimensions) {tracked} is not "
            f"what the fleet publishes: {sorted(published, key=str) or 'nothing under that name'}"
        )
    return problems


# -- alarms ------------------------------------------------------------------------------------------
FILTER_FIELD = re.compile(r"\$\.([A-Za-z_][A-Za-z0-9_]*)")
FILTER_EVENT = re.compile(r"\$\.event\s*=\s*\"([^\"]+)\"")


def alarm_problems(terraform_dir: Path, fleet_dir: Path) -> list[str]:
    """Every metric filter reads events and fields the fleet logs (``log(event, **fields)``), and every
    alarm on the fleet's namespace reads a metric the code publishes or a filter in the module makes."""
    alarms = Instance.root(terraform_dir).descendant(*REGION_PATH, "alarms")
    modules = fleet_modules(fleet_dir)
    logged = log_events(modules)
    problems = []
    filters = {name: alarms.resolve(body) for name, body in alarms.module.resource(
        "aws_cloudwatch_log_metric_filter").items()}
    for name, body in filters.items():
        pattern = str(body.get("pattern"))
        events = FILTER_EVENT.findall(pattern)
        if not events:
            problems.append(f"metric filter {name}: pattern {pattern!r} selects no `$.event`")
        fields = set(FILTER_FIELD.findall(pattern)) | set(
            FILTER_FIELD.findall(str(body.get("metric_transformation", [{}])[0].get("value")))
        )
        fields -= {"event", "t"}
        for event in events:
            logged_fields = [entry.fields for entry in logged if entry.event == event]
            if not logged_fields:
                problems.append(f"metric filter {name}: the fleet never logs event {event!r}")
            elif not any(fields <= found for found in logged_fields):
                problems.append(f"metric filter {name}: no log({event!r}, ...) call has the fields "
                                f"{sorted(fields)} (logged: {[sorted(f) for f in logged_fields]})")
    namespace_values = {call.namespace for call in aws_calls(modules) if call.namespace}
    for name, body in alarms.module.resource("aws_cloudwatch_metric_alarm").items():
        resolved = alarms.resolve(body)
        if resolved.get("namespace") not in namespace_values:
            continue
        metric = str(resolved.get("metric_name"))
        from_filter = re.search(r"aws_cloudwatch_log_metric_filter\.([\w-]+)\.", metric)
        if from_filter:
            if from_filter.group(1) not in filters:
                problems.append(f"alarm {name}: reads filter {from_filter.group(1)} that does not exist")
        elif not _published_metric(aws_calls(modules), metric):
            problems.append(f"alarm {name}: the fleet never publishes metric {metric!r}")
    return problems


# -- standby region ----------------------------------------------------------------------------------
def death_notice_problems(terraform_dir: Path) -> list[str]:
    """The worker-stopped rule puts each event on the queue schema.DEATH_NOTICE_COPIES times: as many targets,
    each the queue, each with its own target id (two targets with one id are one target)."""
    region = Instance.root(terraform_dir).descendant(*REGION_PATH)
    targets = region.module.resource("aws_cloudwatch_event_target").get("worker_stopped")
    if targets is None:
        return ["no aws_cloudwatch_event_target.worker_stopped"]
    problems = []
    if str(targets.get("count")) != str(schema.DEATH_NOTICE_COPIES):
        problems.append(f"worker_stopped has count {targets.get('count')!r}, schema.DEATH_NOTICE_COPIES is "
                        f"{schema.DEATH_NOTICE_COPIES}")
    if "count.index" not in str(targets.get("target_id")):
        problems.append(f"worker_stopped target_id {targets.get('target_id')!r} is not one per copy (count.index)")
    if "module.queue.queue_arn" not in str(targets.get("arn")):
        problems.append(f"worker_stopped arn {targets.get('arn')!r} is not the queue")
    return problems


def failover_problems(terraform_dir: Path) -> list[str]:
    """With a standby region: the tables replicate to it, and Route 53 has one PRIMARY and one SECONDARY
    record for the router, each gated by an HTTPS health check."""
    root = Instance.root(terraform_dir)
    problems = []
    replicas = str(root.module.modules.get("tables", {}).get("replica_regions"))
    if "standby_region" not in replicas:
        problems.append(f"tables: replica_regions {replicas!r} does not follow var.standby_region")
    failover = root.child("failover")
    checks = failover.module.resource("aws_route53_health_check")
    types = []
    for name, record in failover.module.resource("aws_route53_record").items():
        policy = record.get("failover_routing_policy", [{}])[0].get("type")
        types.append(policy)
        check = re.search(r"aws_route53_health_check\.([\w-]+)\.id", str(record.get("health_check_id")))
        if not check or check.group(1) not in checks:
            problems.append(f"record {name} ({policy}) has no health check")
        elif checks[check.group(1)].get("type") not in ("HTTPS", "HTTPS_STR_MATCH"):
            problems.append(f"health check {check.group(1)} is not HTTPS")
    if sorted(map(str, types)) != ["PRIMARY", "SECONDARY"]:
        problems.append(f"failover records are {types}, not one PRIMARY and one SECONDARY")
    return problems
