"""What the fleet's code asks of AWS, read from its source with ``ast`` (nothing is imported or run).

* ``aws_calls``: every call ``<anything>.ddb.<op>(...)``, ``<x>.sqs.<op>(...)``, ``<x>.cloudwatch.<op>(...)``
  (or a bare ``ddb.<op>(...)``), with the module it is in and the keyword arguments that matter to IAM and
  metrics (``IndexName``, ``Namespace``, the ``MetricData`` literals), and for DynamoDB the table each
  action touches (``TableUse``: from ``TableName``, the keys of ``RequestItems``, or the items of a
  transaction).
* ``table_roles``: which tables (``connections``, ``messages``, ``workers``: the ``*_table`` settings) a
  table reference names, following a parameter to every call site that passes it.
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
CLIENT_SERVICES: dict[str, str] = {"ddb": "dynamodb", "sqs": "sqs", "cloudwatch": "cloudwatch", "ecs": "ecs",
                                   "arc": "route53-recovery-cluster"}
IAM_PREFIXES: dict[str, str] = {"dynamodb": "dynamodb", "sqs": "sqs", "cloudwatch": "cloudwatch", "ecs": "ecs",
                                "route53-recovery-cluster": "route53-recovery-cluster"}
# IAM authorises each item of a DynamoDB transaction with the single-item action (TransactWriteItems and
# TransactGetItems are no IAM actions).
TRANSACT_ITEM_ACTIONS: dict[str, str] = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
    "Get": "dynamodb:GetItem",
}
TRANSACT_OPERATIONS = ("transact_write_items", "transact_get_items")
BATCH_OPERATIONS = ("batch_write_item", "batch_get_item")
# A setting naming a table ends with this (FleetConfig.connections_table, ...); its prefix is the role.
TABLE_SETTING_SUFFIX = "_table"
# How many parameters deep a table reference is followed through call sites.
MAX_PARAMETER_DEPTH = 5
# Batch operations SQS authorises with the single-message action (there is no IAM action of their own).
IAM_ACTION_OF_BATCH: dict[str, str] = {
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:SendMessageBatch": "sqs:SendMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
}


@dataclass(frozen=True)
class TableRef:
    """Where a table name comes from: a ``*_table`` setting (``role``), a parameter of the enclosing
    function (``function``, ``parameter``, ``position`` among its arguments after self), or an
    expression this reader cannot follow (``text``)."""

    role: str | None = None
    function: str | None = None
    parameter: str | None = None
    position: int | None = None
    text: str | None = None


@dataclass(frozen=True)
class TableUse:
    """One IAM action a DynamoDB call needs on one table (``action`` None: the call's own action)."""

    action: str | None
    table: TableRef


@dataclass(frozen=True)
class CallSite:
    """A call of a fleet function by name, with the table references of its arguments."""

    module: str
    callee: str
    positional: tuple[TableRef, ...]
    keywords: tuple[tuple[str, TableRef], ...]


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
    tables: tuple[TableUse, ...] = ()  # DynamoDB: the actions per table

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
    call_sites: tuple[CallSite, ...] = ()


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
    sites: list[CallSite] = []
    package = name.split(".")[:-1]
    tree = ast.parse(source, filename=name)
    enclosing = _enclosing_functions(tree)
    for node in ast.walk(tree):
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
            function = enclosing.get(id(node))
            call = _aws_call(name, node, function)
            if call is not None:
                calls.append(call)
                continue
            log = _log_event(name, node)
            if log is not None:
                logs.append(log)
            site = _call_site(name, node, function)
            if site is not None:
                sites.append(site)
    return ModuleFacts(frozenset(imports), tuple(calls), tuple(logs), tuple(sites))


Function = ast.FunctionDef | ast.AsyncFunctionDef


def _enclosing_functions(tree: ast.Module) -> dict[int, Function]:
    """The innermost function around each node (by ``id``); module-level nodes have none."""
    enclosing: dict[int, Function] = {}
    for function in ast.walk(tree):  # outer functions come first, so inner ones overwrite
        if isinstance(function, Function):
            for node in ast.walk(function):
                if node is not function:
                    enclosing[id(node)] = function
    return enclosing


def positional_parameters(function: Function) -> list[str]:
    """Positional parameter names, without a method's ``self`` / ``cls``."""
    names = [arg.arg for arg in [*function.args.posonlyargs, *function.args.args]]
    return names[1:] if names[:1] in (["self"], ["cls"]) else names


def _table_ref(node: ast.expr, function: Function | None, depth: int = 0) -> TableRef:
    """What ``node`` (an expression naming a table) refers to, in ``function``."""
    if isinstance(node, ast.Attribute) and node.attr.endswith(TABLE_SETTING_SUFFIX):
        return TableRef(role=node.attr.removesuffix(TABLE_SETTING_SUFFIX))
    if isinstance(node, ast.Name) and function is not None and depth < MAX_PARAMETER_DEPTH:
        for statement in ast.walk(function):
            if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                    and isinstance(statement.targets[0], ast.Name) and statement.targets[0].id == node.id):
                return _table_ref(statement.value, function, depth + 1)
        parameters = positional_parameters(function)
        if node.id in parameters:
            return TableRef(function=function.name, parameter=node.id, position=parameters.index(node.id))
        if node.id in {arg.arg for arg in function.args.kwonlyargs}:
            return TableRef(function=function.name, parameter=node.id)
    return TableRef(text=ast.unparse(node))


def _table_uses(operation: str, keywords: dict[str, ast.expr], function: Function | None) -> tuple[TableUse, ...]:
    """The (action, table) pairs a DynamoDB call needs."""
    if operation in TRANSACT_OPERATIONS:
        uses = [
            TableUse(TRANSACT_ITEM_ACTIONS[kind], _table_ref(_entries(item)["TableName"], function))
            for node in (ast.walk(function) if function is not None else ())
            if isinstance(node, ast.Dict)
            for kind, item in _entries(node).items()
            if kind in TRANSACT_ITEM_ACTIONS and isinstance(item, ast.Dict) and "TableName" in _entries(item)
        ]
        return tuple(uses) or (TableUse(None, TableRef(text="TransactItems (no literal items found)")),)
    if operation in BATCH_OPERATIONS:
        items = keywords.get("RequestItems")
        if not isinstance(items, ast.Dict):
            return (TableUse(None, TableRef(text="RequestItems (not a dict literal)")),)
        return tuple(TableUse(None, _table_ref(key, function)) for key in items.keys if key is not None)
    table = keywords.get("TableName")
    return (TableUse(None, _table_ref(table, function) if table is not None else TableRef(text="no TableName")),)


def _call_site(module: str, node: ast.Call, function: Function | None) -> CallSite | None:
    """A call of a function by name (``f(...)`` or ``x.f(...)``) that passes arguments."""
    callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
    if not isinstance(callee, str) or not (node.args or node.keywords):
        return None
    positional = tuple(_table_ref(arg, function) for arg in node.args)
    keywords = tuple((k.arg, _table_ref(k.value, function)) for k in node.keywords if k.arg)
    return CallSite(module, callee, positional, keywords)


def table_roles(ref: TableRef, modules: dict[str, ModuleFacts], closure: set[str], depth: int = 0) -> set[str]:
    """The table roles ``ref`` can name, following parameters to their call sites in ``closure``; a
    reference that cannot be followed is returned as ``?<expression>``."""
    if ref.role is not None:
        return {ref.role}
    if ref.function is None or depth >= MAX_PARAMETER_DEPTH:
        return {f"?{ref.text}"}
    roles: set[str] = set()
    for module in sorted(closure):
        for site in modules[module].call_sites:
            if site.callee != ref.function:
                continue
            passed = dict(site.keywords).get(str(ref.parameter))
            if passed is None and ref.position is not None and ref.position < len(site.positional):
                passed = site.positional[ref.position]
            if passed is not None:
                roles |= table_roles(passed, modules, closure, depth + 1)
    return roles


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


def _aws_call(module: str, node: ast.Call, function: Function | None) -> AwsCall | None:
    if not isinstance(node.func, ast.Attribute):
        return None
    service = _client_service(node.func.value)
    if service is None:
        return None
    keywords = {keyword.arg: keyword.value for keyword in node.keywords if keyword.arg}
    tables = _table_uses(node.func.attr, keywords, function) if service == "dynamodb" else ()
    return AwsCall(
        module=module,
        line=node.lineno,
        service=service,
        operation=node.func.attr,
        keywords=frozenset(keywords),
        namespace=_literal_str(keywords.get("Namespace")),
        metrics=_metric_data(node),
        tables=tables,
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
