"""The embedded backend as others see it: environment alone reaches it; without Node, moto stands in."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import aioboto3
import psutil  # type: ignore[import-untyped]
import pytest
from botocore.configprovider import ConfiguredEndpointProvider

from fleet import schema
from fleet.config import FleetConfig
from harness.backends import (
    ENDPOINT_ENV_VARS,
    Backend,
    BackendError,
    EmbeddedBackend,
    KeptBackends,
    embedded,
    start_embedded,
)
from harness.backends.resources import client

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("service", sorted(ENDPOINT_ENV_VARS))
def test_endpoint_variables_are_the_ones_botocore_reads(service: str) -> None:
    url = f"http://127.0.0.1:1/{service}"
    provider = ConfiguredEndpointProvider(
        full_config={}, scoped_config={}, client_name=service,
        environ={ENDPOINT_ENV_VARS[service]: url, "AWS_ENDPOINT_URL": "http://127.0.0.1:2"},
    )
    assert provider.provide() == url


def test_env_names_everything_a_fleet_process_reads() -> None:
    backend = Backend(
        kind="embedded", region="eu-west-1", endpoints={"dynamodb": "http://127.0.0.1:1"},
        queue_url="http://127.0.0.1:2/000000000000/q",
        tables={"connections": "c", "messages": "m", "workers": "w"},
    )
    env = backend.env()
    assert env["AWS_ENDPOINT_URL_DYNAMODB"] == "http://127.0.0.1:1"
    assert env["AWS_ACCESS_KEY_ID"] == "test"
    config = FleetConfig.from_env(env)
    assert (config.region, config.queue_url) == ("eu-west-1", backend.queue_url)
    assert (config.connections_table, config.messages_table, config.workers_table) == ("c", "m", "w")
    assert "AWS_ACCESS_KEY_ID" not in Backend("aws", "eu-west-1", {}, "").env()


async def test_clients_configured_only_by_env_reach_every_service(
    backend: EmbeddedBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in backend.env().items():
        monkeypatch.setenv(name, value)
    session = aioboto3.Session()
    async with session.client("dynamodb") as ddb:
        assert ddb.meta.endpoint_url == backend.endpoints["dynamodb"]
        assert set(backend.tables.values()) <= set((await ddb.list_tables())["TableNames"])
    async with session.client("sqs") as sqs:
        queue = await sqs.get_queue_url(QueueName="wsfleet-notify")
        assert queue["QueueUrl"] == backend.queue_url
    async with session.client("cloudwatch") as cloudwatch:
        assert cloudwatch.meta.endpoint_url == backend.endpoints["cloudwatch"]
        assert "Metrics" in await cloudwatch.list_metrics()
    async with session.client("route53") as route53:
        assert route53.meta.endpoint_url == backend.endpoints["route53"]
        assert "HostedZones" in await route53.list_hosted_zones()


def test_without_node_dynamodb_falls_back_to_moto_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(embedded, "dynalite_command", lambda: ([], "no `node` on PATH"))
    with start_embedded(dynamodb="dynalite") as running:
        assert running.dynamodb_engine == "moto"
        assert running.endpoints["dynamodbstreams"] == running.endpoints["dynamodb"]
    err = capsys.readouterr().err
    assert "dynalite unavailable (no `node` on PATH)" in err
    assert "moto" in err


def test_unknown_engine_is_refused() -> None:
    with pytest.raises(BackendError, match="dynamodb must be one of dynalite, moto"):
        start_embedded(dynamodb="cassandra")


_ORPHAN_SCRIPT = """
import json, os, signal, sys, time
from harness.backends import start_embedded
backend = start_embedded()
print(json.dumps({"pids": backend.pids(), "log_dir": str(backend.log_dir)}), flush=True)
if sys.argv[1] == "exit":
    sys.exit(0)  # without stop(): the atexit hook must end the servers
time.sleep(60)  # killed here by the test: the servers notice their parent is gone
"""


def _gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_servers_do_not_outlive_their_parent(how: str) -> None:
    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN_SCRIPT, how], stdout=subprocess.PIPE, text=True,
                              cwd=REPO, env=os.environ | {"PYTHONPATH": str(REPO)})
    try:
        assert parent.stdout is not None
        started = json.loads(parent.stdout.readline())
        pids = started["pids"]
        if how == "sigkill":
            parent.kill()
        parent.wait(30)
        deadline = time.monotonic() + 10
        while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in pids if not _gone(pid)] == []
        if how == "exit":
            assert not Path(started["log_dir"]).exists()
        shutil.rmtree(started["log_dir"], ignore_errors=True)  # a killed parent cannot remove it
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


@pytest.mark.parametrize("engine", ["dynalite", "moto"])
def test_a_kept_backend_is_lent_again_with_nothing_of_the_run_before(engine: str) -> None:
    config = FleetConfig()
    with KeptBackends() as kept:
        first = kept.fresh(engine, config)
        pids = first.pids()
        ddb, sqs = client(first.env(), "dynamodb"), client(first.env(), "sqs")
        for table in schema.tables(config):
            types = {a["AttributeName"]: a["AttributeType"] for a in table["AttributeDefinitions"]}
            ddb.put_item(TableName=table["TableName"], Item={
                key["AttributeName"]: {types[key["AttributeName"]]: "1"} for key in table["KeySchema"]})
        for body in ("queued", "in flight"):
            sqs.send_message(QueueUrl=first.queue_url, MessageBody=body)
        assert sqs.receive_message(QueueUrl=first.queue_url, VisibilityTimeout=600)["Messages"]

        again = kept.fresh(engine, config)

        assert again is first and again.pids() == pids  # the same servers, not started anew
        assert [item for table in again.tables.values() for item in ddb.scan(TableName=table)["Items"]] == []
        assert sorted(ddb.list_tables()["TableNames"]) == sorted(again.tables.values())
        counts = sqs.get_queue_attributes(QueueUrl=again.queue_url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        assert counts == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}
    assert not first.running()
