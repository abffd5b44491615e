"""The LocalStack backend: docker-compose.yml and the ready hook agree with harness.backends.localstack,
the ready hook creates exactly what the embedded backend creates, and ``localstack_backend`` points the
fleet at an endpoint.  A moto server stands in for LocalStack (both are AWS-compatible endpoints); the
test against a real LocalStack container runs only where testcontainers and a Docker engine exist."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet import schema
from fleet.config import ENV_VARS, FleetConfig
from harness.backends import localstack as localstack_module
from harness.backends.base import ENDPOINT_ENV_VARS, Backend
from harness.backends.localstack import LOCALSTACK_SERVICES, localstack_backend, localstack_unavailable
from harness.backends.resources import client
from harness.backends.servers import ServerProcess, start_moto
from tests.deploy.deploy_tree import LOCALSTACK, REPO

COMPOSE = LOCALSTACK / "docker-compose.yml"
READY_HOOK = LOCALSTACK / "init" / "ready.d" / "wsfleet-resources.sh"
STANDBY_REGION = "us-west-2"


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[ServerProcess]:
    """A fresh moto server standing in for LocalStack: nothing exists there yet."""
    server = start_moto(tmp_path, name="localstack-stand-in", serialise_dynamodb=False)
    try:
        yield server
    finally:
        server.stop()


def _compose_service() -> dict[str, Any]:
    compose = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    service: dict[str, Any] = compose["services"]["localstack"]
    return service


def test_compose_enables_the_services_the_backend_names() -> None:
    services = str(_compose_service()["environment"]["SERVICES"]).split(",")
    assert services == list(LOCALSTACK_SERVICES)
    assert {"dynamodb", "sqs", "cloudwatch", "route53", "lambda", "apigateway"} <= set(services)


def test_compose_mounts_the_repository_and_the_ready_hook() -> None:
    service = _compose_service()
    volumes = service["volumes"]
    repo_in_container = service["environment"]["WSFLEET_REPO"]
    assert f"..:{repo_in_container}:ro" in volumes
    assert "./init/ready.d:/etc/localstack/init/ready.d:ro" in volumes
    assert (COMPOSE.parent / "..").resolve() == REPO
    assert all(port.startswith("127.0.0.1:") for port in service["ports"]), "loopback only"


def test_ready_hook_is_an_executable_shell_script() -> None:
    assert READY_HOOK.read_text(encoding="utf-8").startswith("#!/bin/sh\n")
    assert os.access(READY_HOOK, os.X_OK)


def _run_ready_hook(endpoint: str) -> subprocess.CompletedProcess[str]:
    """Run the hook as LocalStack would (its env), with this interpreter standing in for LocalStack's."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "WSFLEET_REPO": str(REPO),
        "WSFLEET_PYTHON": sys.executable,
        "WSFLEET_LOCALSTACK_ENDPOINT": endpoint,
        "AWS_DEFAULT_REGION": "us-east-1",
        "WSFLEET_STANDBY_REGION": STANDBY_REGION,
    }
    return subprocess.run(
        ["/bin/sh", str(READY_HOOK)], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def _table_view(env: dict[str, str], name: str) -> dict[str, Any]:
    table = client(env, "dynamodb").describe_table(TableName=name)["Table"]
    return {
        "keys": table["KeySchema"],
        "attributes": sorted(table["AttributeDefinitions"], key=lambda a: a["AttributeName"]),
        "indexes": sorted(
            (index["IndexName"], json.dumps(index["KeySchema"]), json.dumps(index["Projection"]))
            for index in table.get("GlobalSecondaryIndexes", [])
        ),
        "billing": table.get("BillingModeSummary", {}).get("BillingMode", "PAY_PER_REQUEST"),
    }


def _queue_view(env: dict[str, str], name: str) -> dict[str, Any]:
    sqs = client(env, "sqs")
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    view: dict[str, Any] = {k: attributes.get(k) for k in ("VisibilityTimeout", "MessageRetentionPeriod")}
    if "RedrivePolicy" in attributes:
        policy = json.loads(attributes["RedrivePolicy"])
        view["maxReceiveCount"] = int(policy["maxReceiveCount"])
        view["deadLetterTarget"] = policy["deadLetterTargetArn"].rsplit(":", 1)[-1]
    return view


def _resources(backend: Backend, env: dict[str, str]) -> dict[str, Any]:
    return {
        "tables": {role: _table_view(env, name) for role, name in sorted(backend.tables.items())},
        "queues": {name: _queue_view(env, name) for name in (schema.QUEUE_NAME, schema.DLQ_NAME)},
    }


def test_ready_hook_creates_what_the_embedded_backend_creates(
    backend: Backend, stand_in: ServerProcess
) -> None:
    result = _run_ready_hook(stand_in.url)
    assert result.returncode == 0, result.stderr
    described = [Backend(**json.loads(line)) for line in result.stdout.splitlines()]
    assert [b.region for b in described] == ["us-east-1", STANDBY_REGION]

    embedded = _resources(backend, backend.env())
    for prepared in described:
        assert prepared.kind == "localstack"
        assert prepared.tables == backend.tables
        assert _resources(prepared, prepared.env()) == embedded, prepared.region
    assert embedded["queues"][schema.QUEUE_NAME]["maxReceiveCount"] == schema.MAX_RECEIVES


def test_ready_hook_can_run_again(stand_in: ServerProcess) -> None:
    """LocalStack with persistence runs its ready hooks on every start: existing resources are kept."""
    assert _run_ready_hook(stand_in.url).returncode == 0
    again = _run_ready_hook(stand_in.url)
    assert again.returncode == 0, again.stderr


def test_localstack_backend_points_every_service_at_the_endpoint(stand_in: ServerProcess) -> None:
    prepared = localstack_backend(stand_in.url, region=STANDBY_REGION)
    env = prepared.env()
    assert {env[ENDPOINT_ENV_VARS[service]] for service in ENDPOINT_ENV_VARS} == {stand_in.url}
    config = FleetConfig.from_env(env)
    assert config.region == STANDBY_REGION
    assert config.queue_url.endswith("/" + schema.QUEUE_NAME)
    assert env[ENV_VARS["connections_table"]] == FleetConfig().connections_table
    tables = client(env, "dynamodb").list_tables()["TableNames"]
    assert {d["TableName"] for d in schema.tables(config)} <= set(tables)


def test_cli_reports_an_unreachable_endpoint_without_a_traceback() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "harness.backends.localstack", "--endpoint", "http://127.0.0.1:9", "--region",
         "us-east-1"],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("error: ") and "127.0.0.1:9" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_refuses_an_endpoint_that_is_not_a_url() -> None:
    assert localstack_module.main(["--endpoint", "localhost:4566"]) == 1


def test_unavailable_without_testcontainers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "testcontainers.localstack", None)
    assert "testcontainers is not installed" in str(localstack_unavailable())


def test_unavailable_without_a_docker_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stub = types.ModuleType("testcontainers.localstack")
    monkeypatch.setitem(sys.modules, "testcontainers.localstack", stub)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'docker.sock'}")
    assert "no Docker engine" in str(localstack_unavailable())


def test_start_localstack_starts_the_container_prepares_it_and_removes_it(
        stand_in: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything up to the container itself: testcontainers' LocalStackContainer (a stand-in here, whose
    endpoint is the moto server) is asked for the pinned image, the region and the services, started, its
    endpoint prepared as any LocalStack's, and stopped when the block ends, also on an error."""
    calls: list[tuple[str, Any]] = []

    class Container:
        def __init__(self, image: str, region_name: str) -> None:
            calls.append(("new", (image, region_name)))

        def with_services(self, *services: str) -> Container:
            calls.append(("services", services))
            return self

        def start(self) -> None:
            calls.append(("start", None))

        def get_url(self) -> str:
            return stand_in.url

        def stop(self) -> None:
            calls.append(("stop", None))

    stub = types.ModuleType("testcontainers.localstack")
    stub.LocalStackContainer = Container  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "testcontainers.localstack", stub)
    monkeypatch.setattr(localstack_module, "_docker_engine_problem", lambda: None)
    with localstack_module.start_localstack(region=STANDBY_REGION) as backend:
        assert calls == [("new", (localstack_module.LOCALSTACK_IMAGE, STANDBY_REGION)),
                         ("services", LOCALSTACK_SERVICES), ("start", None)]
        env = backend.env()
        tables = set(client(env, "dynamodb").list_tables()["TableNames"])
        assert {d["TableName"] for d in schema.tables(FleetConfig.from_env(env))} <= tables
    assert calls[-1] == ("stop", None)
    with pytest.raises(RuntimeError), localstack_module.start_localstack():
        raise RuntimeError("the run failed")
    assert calls[-1] == ("stop", None) and calls.count(("stop", None)) == 2


def test_a_localstack_container_gets_the_schema(localstack: Backend) -> None:
    env = localstack.env()
    for definition in schema.tables(FleetConfig.from_env(env)):
        table = client(env, "dynamodb").describe_table(TableName=definition["TableName"])["Table"]
        assert table["KeySchema"] == definition["KeySchema"]
    assert _queue_view(env, schema.QUEUE_NAME)["maxReceiveCount"] == schema.MAX_RECEIVES
