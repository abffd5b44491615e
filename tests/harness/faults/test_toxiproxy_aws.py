"""The HTTP-aware toxics (aws_error, aws_slow, aws_swallow) on real traffic: raw HTTP/1.1 to a tiny local
server through the embedded Toxiproxy server, then botocore against the project's dynalite and moto."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from botocore.exceptions import ClientError

from harness.backends import EmbeddedBackend
from harness.backends.resources import client as aws_client
from harness.faults.network import Proxy, ToxiproxyClient, ToxiproxyError, start_embedded_toxiproxy

SEED = 99
SEEN: list[tuple[str, bytes, float]] = []  # (operation, body, arrival time) of what the server received


class RecordingHandler(BaseHTTPRequestHandler):
    """Answers every POST with 200 and records (operation, body, arrival time)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        target = self.headers.get("X-Amz-Target", "")
        SEEN.append((target.partition(".")[2], body, time.monotonic()))
        payload = json.dumps({"served": target}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def http_address() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), RecordingHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def toxiproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToxiproxyClient]:
    url, stop = start_embedded_toxiproxy(tmp_path_factory.mktemp("toxiproxy"), seed=SEED)
    client = ToxiproxyClient(url)
    yield client
    client.close()
    stop()


@pytest.fixture
def proxy(toxiproxy: ToxiproxyClient, http_address: str) -> Iterator[Proxy]:
    SEEN.clear()
    yield toxiproxy.create_proxy("aws", http_address)
    toxiproxy.delete_proxy("aws")


def call(conn: http.client.HTTPConnection, target: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    conn.request("POST", "/", body=json.dumps(body or {}), headers={"X-Amz-Target": target})
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def connect(proxy: Proxy) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)


def seen_operations() -> list[str]:
    return [operation for operation, _, _ in SEEN]


def test_aws_error_answers_selected_operations_without_forwarding(toxiproxy: ToxiproxyClient, proxy: Proxy) -> None:
    toxiproxy.add_toxic("aws", "aws_error", stream="upstream", attributes={
        "service": "dynamodb", "operation": "PutItem", "code": "ProvisionedThroughputExceededException"})
    conn = connect(proxy)
    status, body = call(conn, "DynamoDB_20120810.PutItem")
    assert status == 400
    assert body["__type"].endswith("#ProvisionedThroughputExceededException")
    assert call(conn, "DynamoDB_20120810.GetItem") == (200, {"served": "DynamoDB_20120810.GetItem"})
    assert call(conn, "AmazonSQS.SendMessage")[0] == 200  # another service: untouched
    assert seen_operations() == ["GetItem", "SendMessage"]  # same keep-alive connection throughout


def test_toxicity_is_drawn_per_request_on_one_connection(toxiproxy: ToxiproxyClient, proxy: Proxy) -> None:
    toxiproxy.add_toxic("aws", "aws_error", stream="upstream", toxicity=0.3,
                        attributes={"service": "dynamodb", "code": "InternalServerError"})
    conn = connect(proxy)
    statuses = [call(conn, "DynamoDB_20120810.Query")[0] for _ in range(300)]
    failed = statuses.count(500)
    assert set(statuses) == {200, 500}
    assert 0.2 * 300 <= failed <= 0.4 * 300
    assert len(SEEN) == 300 - failed


def test_sqs_throttling_carries_the_query_compatible_code(toxiproxy: ToxiproxyClient, proxy: Proxy) -> None:
    toxiproxy.add_toxic("aws", "aws_error", stream="upstream",
                        attributes={"service": "sqs", "code": "RequestThrottled"})
    conn = connect(proxy)
    conn.request("POST", "/", body="{}", headers={"X-Amz-Target": "AmazonSQS.ReceiveMessage"})
    response = conn.getresponse()
    response.read()
    assert response.status == 400
    assert response.getheader("x-amzn-query-error") == "RequestThrottled;Sender"


def test_aws_slow_forwards_then_holds_the_answer(toxiproxy: ToxiproxyClient, proxy: Proxy) -> None:
    toxiproxy.add_toxic("aws", "aws_slow", stream="upstream",
                        attributes={"service": "sqs", "operation": "ReceiveMessage", "latency": 1000})
    conn = connect(proxy)
    started = time.monotonic()
    assert call(conn, "AmazonSQS.ReceiveMessage")[0] == 200
    answered = time.monotonic()
    [(_, _, arrived)] = SEEN
    # margins of half the latency, so a loaded machine cannot blur held and not held
    assert arrived - started < 0.5  # forwarded at once: the server acted before the client heard
    assert answered - started >= 1.0
    started = time.monotonic()
    assert call(conn, "AmazonSQS.SendMessage")[0] == 200
    assert time.monotonic() - started < 0.5  # another operation is not held


def test_aws_swallow_acknowledges_deletes_it_never_forwards(toxiproxy: ToxiproxyClient, proxy: Proxy) -> None:
    toxiproxy.add_toxic("aws", "aws_swallow", stream="upstream",
                        attributes={"service": "sqs", "operation": "DeleteMessage,DeleteMessageBatch"})
    conn = connect(proxy)
    entries = [{"Id": "a", "ReceiptHandle": "r1"}, {"Id": "b", "ReceiptHandle": "r2"}]
    assert call(conn, "AmazonSQS.DeleteMessageBatch", {"Entries": entries}) == (
        200, {"Successful": [{"Id": "a"}, {"Id": "b"}], "Failed": []})
    assert call(conn, "AmazonSQS.DeleteMessage", {"ReceiptHandle": "r"}) == (200, {})
    assert seen_operations() == []


def test_removing_the_toxic_lets_requests_through_again(toxiproxy: ToxiproxyClient, proxy: Proxy) -> None:
    toxiproxy.add_toxic("aws", "aws_error", stream="upstream", name="throttle",
                        attributes={"service": "dynamodb", "code": "ThrottlingException"})
    conn = connect(proxy)
    assert call(conn, "DynamoDB_20120810.PutItem")[0] == 400
    toxiproxy.remove_toxic("aws", "throttle")
    assert call(conn, "DynamoDB_20120810.PutItem")[0] == 200


def test_removing_the_toxic_mid_request_closes_the_connection(toxiproxy: ToxiproxyClient, proxy: Proxy) -> None:
    toxiproxy.add_toxic("aws", "aws_error", stream="upstream", name="throttle",
                        attributes={"service": "dynamodb", "code": "ThrottlingException"})
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nX-Amz-Target: DynamoDB_20120810.PutItem\r\nContent-Length: 20\r\n\r\n{")
        time.sleep(0.2)  # the proxy reads the partial request and holds it
        toxiproxy.remove_toxic("aws", "throttle")
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(100) == b""  # closed: the held bytes cannot be forwarded whole any more
    assert SEEN == []


def test_removing_aws_slow_releases_a_held_answer(toxiproxy: ToxiproxyClient, proxy: Proxy) -> None:
    toxiproxy.add_toxic("aws", "aws_slow", stream="upstream", name="slow",
                        attributes={"service": "sqs", "latency": 30_000})
    conn = connect(proxy)
    conn.request("POST", "/", body="{}", headers={"X-Amz-Target": "AmazonSQS.ReceiveMessage"})
    deadline = time.monotonic() + 5
    while not SEEN:  # the server answered; the proxy holds the answer
        assert time.monotonic() < deadline
        time.sleep(0.02)
    started = time.monotonic()
    toxiproxy.remove_toxic("aws", "slow")
    assert conn.getresponse().status == 200
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize(("stream", "attributes", "message"), [
    ("downstream", {"service": "dynamodb", "code": "ThrottlingException"}, "upstream stream only"),
    ("upstream", {"service": "dynamodb", "code": "RequestThrottled"}, "must be one of"),
    ("upstream", {"code": "ThrottlingException"}, "'service' of aws_error is required"),
    ("upstream", {"service": "s3", "code": "ThrottlingException"}, "'service'"),
    ("upstream", {"service": "dynamodb", "code": 5}, "must be a string"),
    ("upstream", {"service": "dynamodb", "code": "ThrottlingException", "operation": 1}, "must be a string"),
])
def test_bad_attributes_are_refused_with_the_reason(
    toxiproxy: ToxiproxyClient, proxy: Proxy, stream: str, attributes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ToxiproxyError, match=message):
        toxiproxy.add_toxic("aws", "aws_error", stream=stream, attributes=attributes)


def test_swallow_is_limited_to_answers_it_can_fake(toxiproxy: ToxiproxyClient, proxy: Proxy) -> None:
    with pytest.raises(ToxiproxyError, match="aws_swallow needs"):
        toxiproxy.add_toxic("aws", "aws_swallow", stream="upstream",
                            attributes={"service": "sqs", "operation": "SendMessage"})


# -- botocore against dynalite and moto ---------------------------------------------------------------
@pytest.fixture
def backend_proxies(toxiproxy: ToxiproxyClient, backend: EmbeddedBackend) -> Iterator[dict[str, str]]:
    """Proxies to the backend's DynamoDB and SQS; the env a boto3 client uses to go through them."""
    env = backend.env()
    for service in ("dynamodb", "sqs"):
        listen = toxiproxy.create_proxy(f"backend-{service}", backend.endpoints[service].split("//")[1]).listen
        env[f"AWS_ENDPOINT_URL_{service.upper()}"] = f"http://{listen}"
    yield env
    for service in ("dynamodb", "sqs"):
        toxiproxy.delete_proxy(f"backend-{service}")


def error_code(call: Any) -> tuple[str, int]:
    with pytest.raises(ClientError) as raised:
        call()
    return raised.value.response["Error"]["Code"], raised.value.response["ResponseMetadata"]["HTTPStatusCode"]


@pytest.mark.parametrize(("code", "status"), [
    ("ProvisionedThroughputExceededException", 400), ("ThrottlingException", 400),
    ("InternalServerError", 500), ("ServiceUnavailable", 503),
])
def test_botocore_raises_the_injected_dynamodb_error(
    toxiproxy: ToxiproxyClient, backend_proxies: dict[str, str], backend: EmbeddedBackend, code: str, status: int
) -> None:
    toxiproxy.add_toxic("backend-dynamodb", "aws_error", stream="upstream",
                        attributes={"service": "dynamodb", "code": code, "operation": "GetItem"})
    ddb = aws_client(backend_proxies, "dynamodb")
    table = backend.tables["connections"]
    ddb.describe_table(TableName=table)  # other operations go through
    assert error_code(lambda: ddb.get_item(TableName=table, Key={"pk": {"S": "nobody"}})) == (code, status)


def test_botocore_sees_sqs_throttling_and_duplicate_delivery(
    toxiproxy: ToxiproxyClient, backend_proxies: dict[str, str], clean_backend: EmbeddedBackend
) -> None:
    sqs = aws_client(backend_proxies, "sqs")
    queue = clean_backend.queue_url
    toxiproxy.add_toxic("backend-sqs", "aws_error", stream="upstream", name="throttle",
                        attributes={"service": "sqs", "code": "RequestThrottled", "operation": "SendMessage"})
    assert error_code(lambda: sqs.send_message(QueueUrl=queue, MessageBody="m"))[0] == "RequestThrottled"
    toxiproxy.remove_toxic("backend-sqs", "throttle")

    toxiproxy.add_toxic("backend-sqs", "aws_swallow", stream="upstream",
                        attributes={"service": "sqs", "operation": "DeleteMessage"})
    sqs.send_message(QueueUrl=queue, MessageBody="once")
    [first] = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=1, VisibilityTimeout=1)["Messages"]
    sqs.delete_message(QueueUrl=queue, ReceiptHandle=first["ReceiptHandle"])  # "succeeds"
    [again] = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=5)["Messages"]
    assert again["MessageId"] == first["MessageId"]  # delivered twice
