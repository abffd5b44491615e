"""A fleet deployed on AWS, as the harness sees it: what ``terraform output -json`` names (``Deployment``), and
the guardrails checked before a run may touch any of it (``preflight``).

``read_outputs`` takes the outputs from a file (``terraform output -json > FILE``) or runs terraform in the
deployment's directory.  ``preflight`` checks, with credentials from the standard chain:

- *region*: the outputs' region is the one the command names;
- *account*: the credentials' account (STS ``GetCallerIdentity``) is the one the command names;
- *tags*: every resource a run may touch (the three tables, the queue, the ECS cluster and service) carries
  the allowlisted tag (default ``wsfleet:chaos=allowed``, which terraform adds with ``chaos_target = true``);
- *router*: ``router_url`` is the deployment's own API (``router_api_id``, API Gateway v2): its execute-api
  endpoint (unless disabled, as terraform does with a custom domain) or a custom domain mapped to it, over
  HTTPS (plain HTTP to a loopback address only: a stand-in), and the API carries the tag; so a tampered
  outputs file cannot send signed STARTs and STOPs elsewhere.

A check that cannot be made (no credentials, an access denied, an endpoint down) fails with the reason;
nothing here writes anything.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CHAOS_TAG = ("wsfleet:chaos", "allowed")
TABLE_OUTPUTS = {"connections": "connections_table", "messages": "messages_table", "workers": "workers_table"}
REQUIRED_OUTPUTS = ("region", "router_url", *TABLE_OUTPUTS.values(), "queue_url", "cluster", "service",
                    "worker_log_group", "router_log_group")
UPSTREAM_OUTPUTS = ("upstream_url", "upstream_control_url", "upstream_log_group")
TERRAFORM_TIMEOUT_S = 120


class DeploymentError(Exception):
    """The outputs could not be read, or do not describe a deployment; the message says which and why."""


@dataclass(frozen=True)
class Deployment:
    """The names of one deployed fleet (the primary region's)."""

    region: str
    router_url: str
    tables: dict[str, str]  # role (connections, messages, workers) -> table name
    queue_url: str
    cluster: str
    service: str
    worker_log_group: str
    router_log_group: str
    fleet_environment: dict[str, str] = field(default_factory=dict)
    fis_role_arn: str = ""  # with chaos_target: the role FIS experiments assume
    # The upstream simulator a scenario streams from: its WebSocket base URL, its control API, and the log
    # group of its history (ground truth).  terraform does not deploy it; the outputs file or the command
    # names it.
    upstream_url: str = ""
    upstream_control_url: str = ""
    upstream_log_group: str = ""
    router_api_id: str = ""  # the router's API Gateway (v2) id: preflight checks router_url against it

    @classmethod
    def from_outputs(cls, outputs: Mapping[str, Any], source: str) -> Deployment:
        """From ``terraform output -json`` (each output ``{"value": ...}``; a plain value is taken as is)."""
        values = {name: (entry["value"] if isinstance(entry, dict) and "value" in entry else entry)
                  for name, entry in outputs.items()}
        missing = [name for name in REQUIRED_OUTPUTS if not isinstance(values.get(name), str) or not values[name]]
        if missing:
            raise DeploymentError(f"{source}: no {', '.join(missing)} among the outputs (is it the output of "
                                  "`terraform output -json` in wsfleet's terraform/ directory?)")
        environment = values.get("fleet_environment") or {}
        if not isinstance(environment, dict):
            raise DeploymentError(f"{source}: fleet_environment must be an object of WSFLEET_* variables")
        return cls(region=values["region"], router_url=values["router_url"],
                   tables={role: values[name] for role, name in TABLE_OUTPUTS.items()},
                   queue_url=values["queue_url"], cluster=values["cluster"], service=values["service"],
                   worker_log_group=values["worker_log_group"], router_log_group=values["router_log_group"],
                   fleet_environment={str(k): str(v) for k, v in environment.items()},
                   fis_role_arn=str(values.get("fis_role_arn") or ""),
                   router_api_id=str(values.get("router_api_id") or ""),
                   **{name: str(values.get(name) or "") for name in UPSTREAM_OUTPUTS})


def read_outputs(outputs_file: Path | None = None, terraform_dir: Path | None = None) -> Deployment:
    """The deployment named by an outputs file, or by ``terraform output -json`` run in ``terraform_dir``."""
    if outputs_file is not None:
        try:
            text = outputs_file.read_text()
        except OSError as exc:
            raise DeploymentError(f"cannot read {outputs_file}: {exc.strerror or exc}") from None
        source = str(outputs_file)
    elif terraform_dir is not None:
        source = f"terraform output -json in {terraform_dir}"
        try:
            done = subprocess.run(["terraform", f"-chdir={terraform_dir}", "output", "-json"], capture_output=True,
                                  text=True, timeout=TERRAFORM_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DeploymentError(f"{source} could not run: {exc}") from None
        if done.returncode != 0:
            raise DeploymentError(f"{source} failed: {done.stderr.strip()[-500:] or done.returncode}")
        text = done.stdout
    else:
        raise DeploymentError("name the deployment: --outputs FILE or --terraform-dir DIR")
    try:
        outputs = json.loads(text)
    except ValueError as exc:
        raise DeploymentError(f"{source} is not JSON: {exc}") from None
    if not isinstance(outputs, dict):
        raise DeploymentError(f"{source} is not an object of outputs")
    return Deployment.from_outputs(outputs, source)


@dataclass(frozen=True)
class Guardrails:
    """What the command names: the only account and region a run may touch, and the tag it must find."""

    account: str
    region: str
    tag: tuple[str, str] = CHAOS_TAG


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def preflight(deployment: Deployment, guardrails: Guardrails, session: Any) -> list[Check]:
    """Every guardrail check, in order (``session``: a boto3 Session; its clients in the outputs' region)."""
    checks = [Check("region", deployment.region == guardrails.region,
                    f"the outputs' region is {deployment.region}, the command names {guardrails.region}")]
    checks.append(_checked("account", lambda: _account_check(session, deployment.region, guardrails.account)))
    for name, read_tags in _tag_readers(deployment, session).items():
        checks.append(_checked(name, lambda read_tags=read_tags: _tag_check(read_tags(), guardrails.tag)))
    checks.append(_checked(f"router {deployment.router_api_id or '(no router_api_id)'}",
                           lambda: _router_check(deployment, session, guardrails.tag)))
    return checks


def aws_error_text(exc: Exception) -> str:
    """One line for a botocore error: "Code: Message" for an AWS answer, the error's text otherwise
    (no credentials, an endpoint down, ...)."""
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"{error.get('Code', 'error')}: {error.get('Message', exc)}"
    return str(exc)


def _checked(name: str, check: Callable[[], tuple[bool, str]]) -> Check:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        ok, detail = check()
    except (ClientError, BotoCoreError) as exc:
        ok, detail = False, aws_error_text(exc)
    except LookupError as exc:
        ok, detail = False, str(exc.args[0]) if exc.args else type(exc).__name__
    return Check(name, ok, detail)


def _account_check(session: Any, region: str, account: str) -> tuple[bool, str]:
    found = session.client("sts", region_name=region).get_caller_identity()["Account"]
    return found == account, f"the credentials are account {found}, the command names {account}"


def _tag_check(tags: dict[str, str], tag: tuple[str, str]) -> tuple[bool, str]:
    key, value = tag
    if tags.get(key) == value:
        return True, f"tagged {key}={value}"
    return False, f"not tagged {key}={value} (tags: {', '.join(f'{k}={v}' for k, v in sorted(tags.items())) or 'none'})"


def _router_check(deployment: Deployment, session: Any, tag: tuple[str, str]) -> tuple[bool, str]:
    """Is ``router_url`` the deployment's own API, reached over HTTPS, and is that API tagged?"""
    url = urlsplit(deployment.router_url)
    host = url.hostname or ""
    if not deployment.router_api_id:
        return False, "the outputs name no router_api_id: router_url cannot be checked (terraform outputs it)"
    if url.scheme != "https" and not (url.scheme == "http" and _loopback(host)):
        return False, f"router_url {deployment.router_url!r} is not HTTPS: signed calls would travel in the clear"
    apigw = session.client("apigatewayv2", region_name=deployment.region)
    api = apigw.get_api(ApiId=deployment.router_api_id)
    if host == urlsplit(str(api.get("ApiEndpoint", ""))).hostname:
        if api.get("DisableExecuteApiEndpoint"):
            return False, (f"router_url's host {host!r} is API {deployment.router_api_id}'s execute-api endpoint, "
                           "which is disabled (the API answers on its custom domain only)")
        where = "its execute-api endpoint"
    else:
        mapped = {item.get("ApiId") for item in apigw.get_api_mappings(DomainName=host).get("Items", [])}
        if deployment.router_api_id not in mapped:
            return False, (f"router_url's host {host!r} is neither API {deployment.router_api_id}'s endpoint nor a "
                           f"custom domain mapped to it (mapped: {', '.join(sorted(map(str, mapped))) or 'none'})")
        where = f"custom domain {host}"
    ok, detail = _tag_check(dict(api.get("Tags") or {}), tag)
    return ok, f"router_url is {where}; {detail}"


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _tag_readers(deployment: Deployment, session: Any) -> dict[str, Callable[[], dict[str, str]]]:
    region = deployment.region

    def table(name: str) -> Callable[[], dict[str, str]]:
        def read() -> dict[str, str]:
            ddb = session.client("dynamodb", region_name=region)
            arn = ddb.describe_table(TableName=name)["Table"]["TableArn"]
            return {t["Key"]: t["Value"] for t in ddb.list_tags_of_resource(ResourceArn=arn).get("Tags", [])}
        return read

    def queue() -> dict[str, str]:
        return dict(session.client("sqs", region_name=region).list_queue_tags(QueueUrl=deployment.queue_url)
                    .get("Tags", {}))

    def cluster() -> dict[str, str]:
        found = session.client("ecs", region_name=region).describe_clusters(
            clusters=[deployment.cluster], include=["TAGS"])["clusters"]
        return _ecs_tags(found, f"ECS cluster {deployment.cluster}")

    def service() -> dict[str, str]:
        found = session.client("ecs", region_name=region).describe_services(
            cluster=deployment.cluster, services=[deployment.service], include=["TAGS"])["services"]
        return _ecs_tags(found, f"ECS service {deployment.service} of cluster {deployment.cluster}")

    return {**{f"table {name}": table(name) for name in deployment.tables.values()},
            f"queue {deployment.queue_url.rsplit('/', 1)[-1]}": queue,
            f"cluster {deployment.cluster}": cluster, f"service {deployment.service}": service}


def _ecs_tags(described: list[dict[str, Any]], what: str) -> dict[str, str]:
    """The tags of the one resource described; LookupError when there is none, or it is not ACTIVE (a deleted
    service is still described, INACTIVE, for a while)."""
    if not described:
        raise LookupError(f"{what} does not exist")
    status = described[0].get("status", "ACTIVE")
    if status != "ACTIVE":
        raise LookupError(f"{what} is {status}")
    return {t["key"]: t["value"] for t in described[0].get("tags", [])}
