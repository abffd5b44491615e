"""The harness operator's IAM (terraform/modules/chaos, ``aws_iam_policy_document.harness``) against the calls
the harness's AWS backend makes, read with ``ast``: every call granted, nothing granted that is never called.

A call is a method called on a boto3 client: ``<x>.client("<service>", ...).<operation>(...)``, or on a name
or attribute bound to such a client anywhere in the scanned modules (``aws_logs.fetch_history`` takes the
``logs`` client ``cli_aws`` made; ``AwsTopology`` keeps ``self._ecs``), or on the parameter of a scanned
module's function that such a client is passed to (``message_log.newest(self._dynamodb, ...)`` reads through
its ``dynamodb``); ``get_paginator("<operation>")`` counts as that operation.  The scanned modules are the
AWS backend's, the scenario phases it runs and the readers they call.
Router calls are signed for ``execute-api`` (``harness/router_client.py``): ``execute-api:Invoke``.
``sts:GetCallerIdentity`` needs no permission; ``fis:CreateExperimentTemplate`` also needs ``iam:PassRole``
and ``fis:TagResource`` (``IMPLIED``)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.deploy.deploy_fleet_code import Function, positional_parameters
from tests.deploy.deploy_hcl import Instance

HARNESS_AWS_MODULES = ("harness/aws/deployment.py", "harness/aws/logs.py", "harness/aws/topology.py",
                       "harness/cli_aws.py", "harness/scenarios/runner.py", "harness/ground_truth.py",
                       "harness/message_log.py")
SIGNER_MODULE = "harness/router_client.py"
NEEDS_NO_PERMISSION = frozenset({"sts:GetCallerIdentity"})
# Calls that need more than their own action: creating an experiment template passes the FIS role and tags
# the template (``aws_fis.kill_template`` always tags).
IMPLIED = {"fis:CreateExperimentTemplate": ("iam:PassRole", "fis:TagResource")}
# SDK operations whose IAM action is named otherwise: API Gateway's reads are all ``apigateway:GET``.
IAM_ACTIONS = {"apigatewayv2:GetApi": "apigateway:GET", "apigatewayv2:GetApiMappings": "apigateway:GET"}


def _client_service(node: ast.expr) -> str | None:
    """``"svc"`` when ``node`` is a ``<x>.client("svc", ...)`` call."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "client"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return node.args[0].value
    return None


def _bound_name(node: ast.expr) -> str | None:
    """``x`` for a name ``x`` or an attribute ``<y>.x``: what a client may be bound to."""
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def _operation(call: ast.Call) -> str:
    assert isinstance(call.func, ast.Attribute)
    name = call.func.attr
    if name == "get_paginator" and call.args and isinstance(call.args[0], ast.Constant):
        name = str(call.args[0].value)
    return "".join(part.capitalize() for part in name.split("_"))


def _follow_into_parameters(trees: list[ast.Module], clients: dict[str, str]) -> None:
    """Bind, in ``clients``, each parameter of a scanned function to the service of a client passed to it,
    until no call passes a new one."""
    functions = {node.name: node for tree in trees for node in ast.walk(tree) if isinstance(node, Function)}
    calls = [node for tree in trees for node in ast.walk(tree) if isinstance(node, ast.Call)]
    while True:
        found: dict[str, str] = {}
        for call in calls:
            callee = functions.get(_bound_name(call.func) or "")
            if callee is None:
                continue
            for parameter, argument in zip(positional_parameters(callee), call.args, strict=False):
                service = clients.get(_bound_name(argument) or "")
                if service is not None and parameter not in clients:
                    found[parameter] = service
        if not found:
            return
        clients.update(found)


def harness_actions(repo: Path) -> set[str]:
    """The IAM actions the harness's AWS calls need."""
    trees = [ast.parse((repo / name).read_text(encoding="utf-8"), filename=name) for name in HARNESS_AWS_MODULES]
    clients = {name: service for tree in trees for node in ast.walk(tree)
               if isinstance(node, ast.Assign) and len(node.targets) == 1
               and (name := _bound_name(node.targets[0])) is not None
               and (service := _client_service(node.value)) is not None}
    _follow_into_parameters(trees, clients)
    actions: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)) or node.func.attr == "client":
                continue
            receiver = node.func.value
            bound = _bound_name(receiver)
            service = _client_service(receiver) or (clients.get(bound) if bound is not None else None)
            if service is not None:
                call = f"{service}:{_operation(node)}"
                actions.add(IAM_ACTIONS.get(call, call))
    signer = ast.parse((repo / SIGNER_MODULE).read_text(encoding="utf-8"))
    if any(isinstance(n, ast.Constant) and n.value == "execute-api" for n in ast.walk(signer)):
        actions.add("execute-api:Invoke")
    actions |= {implied for action in list(actions) for implied in IMPLIED.get(action, ())}
    return actions - NEEDS_NO_PERMISSION


def harness_iam_problems(terraform_dir: Path, repo: Path) -> list[str]:
    chaos = Instance.root(terraform_dir).child("chaos")
    document = chaos.module.data_source("aws_iam_policy_document").get("harness")
    if document is None:
        return ["modules/chaos has no aws_iam_policy_document.harness (the harness operator's policy)"]
    granted: set[str] = set()
    for statement in chaos.resolve(document).get("statement", []):
        listed = statement.get("actions", [])
        granted.update(listed if isinstance(listed, list) else [listed])
    needed = harness_actions(repo)
    return ([f"the harness calls {action} but modules/chaos does not grant it" for action in sorted(needed - granted)]
            + [f"modules/chaos grants {action} but the harness never calls it" for action in sorted(granted - needed)])
