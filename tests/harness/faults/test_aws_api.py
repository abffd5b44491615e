"""The AWS API fault kinds (harness.faults.aws_api): parameters checked when built, the toxic they put on the
worker's proxy, healing; and one end-to-end run where a throttled worker keeps its stream."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from harness.cluster import Cluster, ClusterSpec, WorkerHandle
from harness.faults import plane
from harness.faults.aws_api import AWS_API_FAULTS
from harness.faults.network import ToxiproxyClient, start_embedded_toxiproxy
from harness.faults.plane import FaultError, Nemesis


def build(kind: str, **params: Any) -> Any:
    return AWS_API_FAULTS[kind](kind, "w1", params)


@pytest.mark.parametrize(("kind", "params", "toxic_type", "service", "attributes"), [
    ("aws_throttle", {"fraction": 0.2}, "aws_error", "dynamodb",
     {"code": "ProvisionedThroughputExceededException", "operation": ""}),
    ("aws_throttle", {"service": "sqs"}, "aws_error", "sqs", {"code": "RequestThrottled"}),
    ("aws_throttle", {"code": "ThrottlingException", "operation": "PutItem"}, "aws_error", "dynamodb",
     {"code": "ThrottlingException", "operation": "PutItem"}),
    ("aws_5xx", {"status": 503}, "aws_error", "dynamodb", {"code": "ServiceUnavailable"}),
    ("aws_5xx", {"service": "sqs"}, "aws_error", "sqs", {"code": "InternalFailure"}),
    ("aws_slow", {"latency_ms": 250}, "aws_slow", "dynamodb", {"latency": 250}),
    ("sqs_throttle", {}, "aws_error", "sqs", {"code": "RequestThrottled"}),
    ("sqs_duplicate", {"fraction": 0.5}, "aws_swallow", "sqs", {"operation": "DeleteMessage,DeleteMessageBatch"}),
    ("sqs_late", {"latency_ms": 3000}, "aws_slow", "sqs", {"operation": "ReceiveMessage", "latency": 3000}),
])
def test_each_kind_puts_its_toxic_on_the_service_proxy_and_heals(
    tmp_path: Path, kind: str, params: dict[str, Any], toxic_type: str, service: str, attributes: dict[str, Any]
) -> None:
    url, stop = start_embedded_toxiproxy(tmp_path)
    toxiproxy = ToxiproxyClient(url)
    try:
        proxies = {"dynamodb": "w1-dynamodb", "services": "w1-services"}
        for proxy in proxies.values():
            toxiproxy.create_proxy(proxy, "127.0.0.1:9")
        handle = WorkerHandle("w1", cast(Any, object()), {}, proxies)
        cluster = cast(Cluster, SimpleNamespace(workers={"w1": handle}, toxiproxy=toxiproxy))
        fault = build(kind, **params)
        fault.start(cluster)
        proxy = proxies["dynamodb" if service == "dynamodb" else "services"]
        [toxic] = toxiproxy.get_toxics(proxy)
        assert (toxic.type, toxic.stream, toxic.name) == (toxic_type, "upstream", kind)
        assert toxic.toxicity == params.get("fraction", 1.0)
        assert attributes.items() <= toxic.attributes.items()
        assert fault.params["service"] == service  # the effective parameters, for the history
        fault.heal(cluster)
        fault.heal(cluster)
        assert toxiproxy.get_toxics(proxy) == []
    finally:
        toxiproxy.close()
        stop()


@pytest.mark.parametrize(("kind", "params", "message"), [
    ("aws_throttle", {"fraction": 1.5}, "fraction must be a number from 0 to 1"),
    ("aws_throttle", {"service": "s3"}, "service must be one of dynamodb, sqs"),
    ("aws_throttle", {"service": "sqs", "code": "ProvisionedThroughputExceededException"}, "sqs has no error"),
    ("aws_5xx", {"status": 502}, "status must be 500 or 503"),
    ("aws_slow", {"latency_ms": -1}, "latency_ms must be a number"),
    ("aws_slow", {"operation": ["PutItem"]}, "operation must be a string"),
    ("sqs_late", {"service": "dynamodb"}, "service is always 'sqs'"),
    ("sqs_duplicate", {"operation": "SendMessage"}, "operation is always"),
])
def test_bad_parameters_are_refused_when_built(kind: str, params: dict[str, Any], message: str) -> None:
    with pytest.raises(FaultError, match=message):
        build(kind, **params)


# -- end to end ------------------------------------------------------------------------------------------
@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(ClusterSpec(workers=1, profile="hardened", timescale=0.1, run_dir=tmp_path)) as running:
        yield running


@pytest.mark.e2e
def test_a_throttled_worker_keeps_its_stream(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    for kind, factory in AWS_API_FAULTS.items():  # until the lead merges AWS_API_FAULTS into the registry
        monkeypatch.setitem(plane.REGISTRY, kind, factory)
    cluster.start_connection("t1")
    deadline = time.monotonic() + 30
    while not cluster.streams()["t1"]["sessions"]:
        assert time.monotonic() < deadline, "t1 was never consumed"
        time.sleep(0.05)
    nemesis = Nemesis(cluster)
    nemesis.start("aws_throttle", "worker-1", fraction=0.3)
    proxy = cluster.workers["worker-1"].proxies["dynamodb"]
    assert cluster.toxiproxy is not None
    assert [toxic.type for toxic in cluster.toxiproxy.get_toxics(proxy)] == ["aws_error"]
    time.sleep(3.0)  # the fault's duration: six heartbeats and the stream's writes, throttled
    nemesis.heal_all()
    assert cluster.toxiproxy.get_toxics(proxy) == []
    events = [json.loads(line) for line in (cluster.run_dir / "history" / "nemesis.jsonl").read_text().splitlines()]
    [started] = [event for event in events if event.get("type") == "fault.start"]
    assert started["params"]["code"] == "ProvisionedThroughputExceededException"
    [session] = cluster.streams()["t1"]["sessions"]  # never dropped: one session, still open
    assert session["closed"] is None
    worker_history = (cluster.run_dir / "history" / "worker-1.jsonl").read_text().splitlines()
    counted = [json.loads(line) for line in worker_history if '"requests"' in line]
    counted = [event["errors"] for event in counted if event["type"] == "requests"]
    assert counted[-1].get("ProvisionedThroughputExceededException", 0) > 0  # the worker met and counted them
