"""Tests of harness.aws.deployment and ``wsfleet aws-preflight`` against a moto server standing in for AWS:
a deployment read from terraform's outputs, its guardrails checked, and every failure a clear line."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import boto3
import pytest

from harness.aws.deployment import DeploymentError, read_outputs
from harness.aws.topology import running_workers
from harness.cli import main

REGION, ACCOUNT = "eu-west-1", "123456789012"  # moto's account
ALLOWED = {"wsfleet:chaos": "allowed"}
TABLES = {"connections_table": "fleet-connections", "messages_table": "fleet-messages",
          "workers_table": "fleet-workers"}


def deploy(untagged: tuple[str, ...] = (), **changed: Any) -> dict[str, Any]:
    """What terraform would have created (each resource tagged, except those named in ``untagged``), and the
    ``terraform output -json`` naming it (``changed``: outputs replaced, e.g. a tampered ``router_url``)."""
    def tags(name: str) -> dict[str, str]:
        return {"Project": "wsfleet", **({} if name in untagged else ALLOWED)}

    ddb = boto3.client("dynamodb", region_name=REGION)
    for table in TABLES.values():
        ddb.create_table(TableName=table, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                         AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                         BillingMode="PAY_PER_REQUEST",
                         Tags=[{"Key": k, "Value": v} for k, v in tags(table).items()])
    queue = boto3.client("sqs", region_name=REGION).create_queue(QueueName="fleet-notify",
                                                                 tags=tags("fleet-notify"))["QueueUrl"]
    ecs = boto3.client("ecs", region_name=REGION)
    ecs.create_cluster(clusterName="fleet", tags=[{"key": k, "value": v} for k, v in tags("fleet").items()])
    ecs.register_task_definition(family="worker", containerDefinitions=[{"name": "w", "image": "x", "memory": 128}])
    ecs.create_service(cluster="fleet", serviceName="workers", taskDefinition="worker", desiredCount=0,
                       tags=[{"key": k, "value": v} for k, v in tags("workers").items()])
    api = boto3.client("apigatewayv2", region_name=REGION).create_api(Name="fleet-router", ProtocolType="HTTP",
                                                                      Tags=tags("fleet-router"))
    values = {"region": REGION, "router_url": api["ApiEndpoint"], "router_api_id": api["ApiId"], **TABLES,
              "queue_url": queue, "cluster": "fleet", "service": "workers",
              "worker_log_group": "/ecs/fleet", "router_log_group": "/aws/lambda/fleet-router",
              "fleet_environment": {"WSFLEET_PROFILE": "hardened"}, "standby_region": None, **changed}
    return {name: {"sensitive": False, "type": "string", "value": value} for name, value in values.items()}


def outputs_file(tmp_path: Path, outputs: Any) -> Path:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    return path


def preflight(path: Path, *extra: str, account: str = ACCOUNT, region: str = REGION) -> list[str]:
    return ["aws-preflight", "--outputs", str(path), "--account", account, "--region", region, *extra]


def test_a_tagged_deployment_in_the_named_account_and_region_passes(moto_aws: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = outputs_file(tmp_path, deploy())
    assert main(preflight(path)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "ok    region", "ok    account", *(f"ok    table {t}" for t in TABLES.values()), "ok    queue fleet-notify",
        "ok    cluster fleet", "ok    service workers", f"ok    router {read_outputs(path).router_api_id}"]
    deployment = read_outputs(path)
    assert deployment.tables == {"connections": "fleet-connections", "messages": "fleet-messages",
                                 "workers": "fleet-workers"}
    assert deployment.fleet_environment == {"WSFLEET_PROFILE": "hardened"}


@pytest.mark.parametrize(("untagged", "check"), [
    ("fleet-messages", "table fleet-messages:"), ("fleet-notify", "queue fleet-notify:"), ("fleet", "cluster fleet:"),
    ("workers", "service workers:"), ("fleet-router", "router "),
])
def test_a_resource_without_the_tag_is_refused(moto_aws: str, tmp_path: Path, untagged: str, check: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(preflight(outputs_file(tmp_path, deploy(untagged=(untagged,))))) == 1
    out, err = capsys.readouterr()
    [failed] = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert failed.startswith(f"FAIL  {check}")
    assert failed.endswith("not tagged wsfleet:chaos=allowed (tags: Project=wsfleet)")
    assert "1 of 9 checks failed" in err and "nothing may run" in err


def test_another_account_or_region_is_refused(moto_aws: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = outputs_file(tmp_path, deploy())
    assert main(preflight(path, account="210987654321")) == 1
    assert "FAIL  account: the credentials are account 123456789012, the command names 210987654321" in (
        capsys.readouterr().out)
    assert main(preflight(path, region="us-east-1")) == 1
    assert "FAIL  region: the outputs' region is eu-west-1, the command names us-east-1" in capsys.readouterr().out


def test_a_custom_tag_is_checked_instead(moto_aws: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = outputs_file(tmp_path, deploy())
    assert main(preflight(path, "--tag", "Project=wsfleet")) == 0
    assert main(preflight(path, "--tag", "Project")) == 2
    assert "--tag must be KEY=VALUE" in capsys.readouterr().err


def test_missing_resources_and_an_unreachable_endpoint_fail_their_checks_with_the_reason(
        moto_aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path = outputs_file(tmp_path, deploy())
    boto3.client("ecs", region_name=REGION).delete_service(cluster="fleet", service="workers", force=True)
    boto3.client("dynamodb", region_name=REGION).delete_table(TableName="fleet-workers")
    assert main(preflight(path)) == 1
    out = capsys.readouterr().out
    assert "FAIL  table fleet-workers: ResourceNotFoundException" in out
    assert "FAIL  service workers: ECS service workers of cluster fleet is INACTIVE" in out  # deleted
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed}")
    assert main(preflight(path)) == 1
    out = capsys.readouterr().out
    assert "FAIL  account: Could not connect to the endpoint URL" in out


@pytest.mark.parametrize(("content", "message"), [
    (None, "cannot read"),
    ("{not json", "is not JSON"),
    ("[]", "is not an object of outputs"),
    (json.dumps({"region": {"value": REGION}}), "no router_url, connections_table"),
    (json.dumps({"region": {"value": REGION}, "router_url": {"value": ""}}), "no router_url"),
])
def test_unreadable_outputs_are_a_usage_error(tmp_path: Path, content: str | None, message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "outputs.json"
    if content is not None:
        path.write_text(content)
    assert main(preflight(path)) == 2
    assert message in capsys.readouterr().err
    with pytest.raises(DeploymentError, match=message):
        read_outputs(path)


def test_a_terraform_directory_without_state_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["aws-preflight", "--terraform-dir", str(tmp_path), "--account", ACCOUNT, "--region", REGION]) == 2
    err = capsys.readouterr().err
    assert f"terraform output -json in {tmp_path}" in err


def other_api() -> dict[str, Any]:
    """Another API of the account (someone else's), tagged as well."""
    return boto3.client("apigatewayv2", region_name=REGION).create_api(Name="elsewhere", ProtocolType="HTTP",
                                                                        Tags=ALLOWED)


@pytest.mark.parametrize(("tamper", "says"), [
    (lambda: {"router_url": other_api()["ApiEndpoint"]}, "is neither API"),
    (lambda: {"router_url": "https://router.attacker.example"}, "host 'router.attacker.example' is neither API"),
    (lambda: {"router_api_id": other_api()["ApiId"]}, "is neither API"),
    (lambda: {"router_api_id": "nosuchapi"}, "NotFoundException"),
    (lambda: {"router_api_id": ""}, "the outputs name no router_api_id"),
])
def test_a_router_url_that_is_not_the_deployments_api_is_refused_before_anything_is_sent(
        moto_aws: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], tamper: Any, says: str) -> None:
    """A tampered outputs file could otherwise point the signed STARTs and STOPs at another API."""
    outputs = deploy()
    outputs.update({name: {"value": value} for name, value in tamper().items()})
    assert main(preflight(outputs_file(tmp_path, outputs))) == 1
    [failed] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
    assert failed.startswith("FAIL  router") and says in failed


def test_a_router_url_in_the_clear_is_refused(moto_aws: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    outputs = deploy()
    outputs["router_url"]["value"] = outputs["router_url"]["value"].replace("https://", "http://")
    assert main(preflight(outputs_file(tmp_path, outputs))) == 1
    assert "is not HTTPS: signed calls would travel in the clear" in capsys.readouterr().out


def test_a_disabled_execute_api_endpoint_is_refused_as_router_url(moto_aws: str, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """With a custom domain terraform disables the execute-api endpoint: calls there would all be refused."""
    outputs = deploy()
    boto3.client("apigatewayv2", region_name=REGION).update_api(ApiId=outputs["router_api_id"]["value"],
                                                                DisableExecuteApiEndpoint=True)
    assert main(preflight(outputs_file(tmp_path, outputs))) == 1
    [failed] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
    assert failed.startswith("FAIL  router") and "execute-api endpoint, which is disabled" in failed


def test_a_custom_domain_mapped_to_the_api_is_the_deployments_router(moto_aws: str, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    outputs = deploy()
    apigw = boto3.client("apigatewayv2", region_name=REGION)
    api_id = outputs["router_api_id"]["value"]
    apigw.create_stage(ApiId=api_id, StageName="$default")
    apigw.create_domain_name(DomainName="router.example.com", DomainNameConfigurations=[
        {"CertificateArn": f"arn:aws:acm:{REGION}:{ACCOUNT}:certificate/x", "EndpointType": "REGIONAL"}])
    apigw.create_api_mapping(ApiId=api_id, DomainName="router.example.com", Stage="$default")
    outputs["router_url"]["value"] = "https://router.example.com"
    assert main(preflight(outputs_file(tmp_path, outputs))) == 0
    assert f"ok    router {api_id}: router_url is custom domain router.example.com; tagged" in capsys.readouterr().out


def test_live_workers_are_asked_of_the_services_tasks_only(moto_aws: str, tmp_path: Path) -> None:
    """A task ARN in the workers table (which the system under test writes) counts only if ECS lists it among
    the service's running tasks: ListTasks names the service (moto ignores the filter; AWS applies it)."""
    deployment = read_outputs(outputs_file(tmp_path, deploy()))
    ecs = boto3.client("ecs", region_name=REGION)
    asked: list[dict[str, Any]] = []
    ecs.meta.events.register("provide-client-params.ecs.ListTasks", lambda params, **_: asked.append(dict(params)))
    running_workers(boto3.client("dynamodb", region_name=REGION), ecs, deployment)
    assert asked and all(params.get("serviceName") == "workers" and params["cluster"] == "fleet" for params in asked)
