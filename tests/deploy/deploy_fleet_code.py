"""What the fleet's code asks of AWS, read from its source with ``ast`` (nothing is imported or run).

* ``aws_calls``: every call ``<anything>.ddb.<op>(...)``, ``<x>.sqs.<op>(...)``, ``<x>.cloudwatch.<op>(...)``
  (or a bare ``ddb.<op>(...)``), with the module it is in and the keyword arguments that matter to IAM and
  metrics (``IndexName``, ``Namespace``, the ``MetricData`` literals).
* ``log_events``: every ``log("<event>", field=...)`` call (the worker's JSON log lines, which CloudWatch
  Logs metric filters read), with its field names.
* ``import_closure``: the fleet modules a module imports, directly or not, so the worker's and the
  router's calls can be told apart (``fleet.worker`` runs in ECS, ``fleet.router`` in Lambda).
* ``iam_action``: the IAM action that authorises an SDK operation, from botocore's service models.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import botocore.session
from botocore import xform_name

# The attribute names fleet.aws.AwsClients gives its clients -> botocore service name and IAM prefix.
CLIENT_SERVICES: dict[str, str] = {"ddb": "dynamodb", "sqs": "sqs", "cloudwatch": "cloudwatch"}
IAM_PREFIXES: dict[str, str] = {"dynamodb": "dynamodb", "sqs": "sqs", "cloudwatch": "cloudwatch"}
# Batch operations SQS authorises with the single-message action (there is no IAM action of their own).
IAM_ACTION_OF_BATCH: dict[str, str] = {
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:SendMessageBatch": "sqs:SendMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
}


@dataclass(frozen=True)
class AwsCall:
    """One SDK call found in the fleet's source."""

    module: str  # e.g. fleet.store
    line: int
    service: str  # botocore service name
    operation: str  # snake_case, as called
    keywords: frozenset[str]
    namespace: str | None  # Namespace= literal (put_metric_data)
    metrics: tuple[tuple[str, str | None, frozenset[str]], ...]  # (MetricName, Unit, dimension names)

    @property
    def uses_index(self) -> bool:
        return "IndexName" in self.keywords


@dataclass(frozen=True)
class LogEvent:
    """One ``log("<event>", **fields)`` call."""

    module: str
    line: int
    event: str
    fields: frozenset[str]


@dataclass(frozen=True)
class ModuleFacts:
    """What one module imports, the SDK calls it makes and the log lines it writes."""

    imports: frozenset[str]
    calls: tuple[AwsCall, ...]
    logs: tuple[LogEvent, ...]


def module_name(fleet_dir: Path, path: Path) -> str:
    relative = path.relative_to(fleet_dir.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def fleet_modules(fleet_dir: Path) -> dict[str, ModuleFacts]:
    """Every module of the fleet package, analysed, by dotted name."""
    names = {module_name(fleet_dir, path): path for path in sorted(fleet_dir.rglob("*.py"))}
    return {name: module_facts(name, path.read_text(encoding="utf-8")) for name, path in names.items()}


@cache
def module_facts(name: str, source: str) -> ModuleFacts:
    """One walk over a module's syntax tree (cached by source: the tests analyse the same code often)."""
    imports: set[str] = set()
    calls: list[AwsCall] = []
    logs: list[LogEvent] = []
    package = name.split(".")[:-1]
    for node in ast.walk(ast.parse(source, filename=name)):
        if isinstance(node, ast.Import):
            imports.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, or `level - 1` packages up
                parent = package[: len(package) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            imports.add(base)
            imports.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call):
            call = _aws_call(name, node)
            if call is not None:
                calls.append(call)
            log = _log_event(name, node)
            if log is not None:
                logs.append(log)
    return ModuleFacts(frozenset(imports), tuple(calls), tuple(logs))


def import_closure(modules: dict[str, ModuleFacts], start: str) -> set[str]:
    """``start`` and every fleet module it imports, directly or through others."""
    seen: set[str] = set()
    pending = [start]
    while pending:
        name = pending.pop()
        if name in seen or name not in modules:
            continue
        seen.add(name)
        pending.extend(module for module in modules[name].imports if module in modules)
    return seen


def aws_calls(modules: dict[str, ModuleFacts]) -> list[AwsCall]:
    return [call for facts in modules.values() for call in facts.calls]


def log_events(modules: dict[str, ModuleFacts]) -> list[LogEvent]:
    return [log for facts in modules.values() for log in facts.logs]


def _client_service(node: ast.expr) -> str | None:
    """The service of ``x.ddb`` / ``ddb`` (and the other client attributes), else None."""
    if isinstance(node, ast.Attribute) and node.attr in CLIENT_SERVICES:
        return CLIENT_SERVICES[node.attr]
    if isinstance(node, ast.Name) and node.id in CLIENT_SERVICES:
        return CLIENT_SERVICES[node.id]
    return None


def _literal_str(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _entries(node: ast.Dict) -> dict[str, ast.expr]:
    """The string-keyed entries of a dict literal."""
    return {
        key.value: value
        for key, value in zip(node.keys, node.values, strict=True)
        if isinstance(key, ast.Constant) and isinstance(key.value, str)
    }


def _metric_data(call: ast.Call) -> tuple[tuple[str, str | None, frozenset[str]], ...]:
    """(MetricName, Unit, dimension names) of each dict literal in the call's MetricData list."""
    metrics: list[tuple[str, str | None, frozenset[str]]] = []
    for keyword in call.keywords:
        if keyword.arg != "MetricData" or not isinstance(keyword.value, ast.List | ast.Tuple):
            continue
        for element in keyword.value.elts:
            entries = _entries(element) if isinstance(element, ast.Dict) else {}
            name = _literal_str(entries.get("MetricName"))
            if name is None:
                continue
            listed = entries.get("Dimensions")
            dimensions = [
                _literal_str(_entries(d).get("Name"))
                for d in (listed.elts if isinstance(listed, ast.List | ast.Tuple) else [])
                if isinstance(d, ast.Dict)
            ]
            unit = _literal_str(entries.get("Unit"))
            metrics.append((name, unit, frozenset(d for d in dimensions if d)))
    return tuple(metrics)


def _aws_call(module: str, node: ast.Call) -> AwsCall | None:
    if not isinstance(node.func, ast.Attribute):
        return None
    service = _client_service(node.func.value)
    if service is None:
        return None
    keywords = {keyword.arg: keyword.value for keyword in node.keywords if keyword.arg}
    return AwsCall(
        module=module,
        line=node.lineno,
        service=service,
        operation=node.func.attr,
        keywords=frozenset(keywords),
        namespace=_literal_str(keywords.get("Namespace")),
        metrics=_metric_data(node),
    )


def _log_event(module: str, node: ast.Call) -> LogEvent | None:
    if not (isinstance(node.func, ast.Name) and node.func.id == "log" and node.args):
        return None
    event = _literal_str(node.args[0])
    if event is None:
        return None
    fields = frozenset(keyword.arg for keyword in node.keywords if keyword.arg)
    return LogEvent(module=module, line=node.lineno, event=event, fields=fields)


@cache
def _operations(service: str) -> dict[str, str]:
    """snake_case operation -> API operation name, from botocore's model of ``service``."""
    model = botocore.session.get_session().get_service_model(service)
    return {xform_name(operation): operation for operation in model.operation_names}


def iam_action(service: str, operation: str) -> str:
    """The IAM action authorising ``operation`` (snake_case) of ``service``; KeyError for an unknown one."""
    api_name = _operations(service).get(operation)
    if api_name is None:
        raise KeyError(f"{service} has no operation {operation!r}")
    action = f"{IAM_PREFIXES[service]}:{api_name}"
    return IAM_ACTION_OF_BATCH.get(action, action)
