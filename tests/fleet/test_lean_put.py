"""The lean PutItem of ``fleet.lean_put`` against both engines: it stores what the SDK's put stores, is counted,
billed and dated as the SDK's answers are, is signed for DynamoDB in the client's region, and its errors
are translated in ``fleet.aws.aws_errors``'s one place, as the SDK's."""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import botocore.auth
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import ReadOnlyCredentials
from botocore.httpsession import get_cert_path

from fleet.aws import AwsClients
from fleet.batch_log import BATCH, LogItem, Message, Writer
from fleet.config import FleetConfig
from fleet.errors import ConditionFailed, StoreError, StoreUnavailable
from fleet.lean_http import Answer
from fleet.lean_put import CONTENT_TYPE, TARGET, LeanDynamoDB, Signer, env_proxy, host_header, tls_context
from fleet.store import AwsAdapter
from fleet.typed import to_typed
from tests.fleet.lean_wire import Canned, Wire, refusal, wire
from tests.fleet.test_store import new_pk, stored


def batch_item(pk: str, b: int) -> LogItem:
    messages = (Message(1, 10, "a" * 100), Message(2, 11, "b" * 100))
    return LogItem(pk, b, BATCH, Writer("w1", "g", 1, 1), 1, 2, 5, messages)


def counts(aws: AwsClients) -> tuple[Counter[str], dict[str, float]]:
    return Counter(aws.operations), dict(aws.units)


def delta(before: tuple[Counter[str], dict[str, float]], after: tuple[Counter[str], dict[str, float]]) -> Any:
    operations = after[0] - before[0]
    units = {k: round(v - before[1].get(k, 0.0), 6) for k, v in after[1].items() if v != before[1].get(k, 0.0)}
    return dict(operations), units


class Answers(Wire):
    """Keeps each answer the service gave."""

    def __init__(self, http: Any) -> None:
        super().__init__(http)
        self.kept: list[Answer] = []

    async def post(self, headers: Mapping[str, str], body: bytes) -> Answer:
        self.kept.append(await super().post(headers, body))
        return self.kept[-1]


async def test_a_lean_put_stores_counts_bills_and_dates_as_the_sdks_put_of_the_same_item(
        store: AwsAdapter, monkeypatch: pytest.MonkeyPatch) -> None:
    aws = store.aws
    dated: list[float] = []
    add = aws.skew.add
    monkeypatch.setattr(aws.skew, "add", lambda sent, answered, server: (dated.append(server), add(sent, answered,
                                                                                                   server)))
    answers = Answers(aws.lean.ddb.http)
    aws.lean.ddb.http = answers
    pk = new_pk()
    before = counts(aws)
    await store.put_log_item(batch_item(pk, 1))
    lean = delta(before, counts(aws))
    assert "x-amz-crc32" in answers.kept[0].headers  # the engine sends it, and it matched the body
    before = counts(aws)
    await aws.ddb.put_item(TableName=store.config.messages_table, Item=to_typed(batch_item(pk, 2).to_item()),
                           ConditionExpression="attribute_not_exists(sk)")
    sdk = delta(before, counts(aws))

    assert lean == sdk and lean[0] == {"PutItem messages": 1} and lean[1]["write messages"] > 0
    assert len(dated) == 2  # both answers' Date went to the skew estimator
    items = await stored(store, pk)
    assert {k: v for k, v in items[1].items() if k != "sk"} == {k: v for k, v in items[2].items() if k != "sk"}


@pytest.mark.parametrize(("answer", "error", "code"), [
    (refusal("ConditionalCheckFailedException"), ConditionFailed, "ConditionalCheckFailedException"),
    (refusal("ProvisionedThroughputExceededException"), StoreUnavailable, "ProvisionedThroughputExceededException"),
    (refusal("InternalServerError", status=500), StoreUnavailable, "InternalServerError"),
    (Canned(502, {}), StoreUnavailable, "HTTP 502"),  # a proxy's page: no code, the status says it
    # a body damaged on the way (its x-amz-crc32 is not its CRC32): what happened is unknown, as for the SDK
    (Canned(200, {}, {"x-amz-crc32": "1"}), StoreUnavailable, "ConnectionError"),
    (refusal("ValidationException"), StoreError, "ValidationException"),
])
async def test_an_error_answer_is_translated_and_counted_as_the_sdks(
        store: AwsAdapter, answer: Canned, error: type[StoreError], code: str) -> None:
    wire(store.aws).canned.append(answer)
    errors = Counter(store.aws.errors)
    with pytest.raises(error) as raised:
        await store.put_log_item(batch_item(new_pk(), 1))
    assert type(raised.value) is error
    assert store.aws.errors - errors == Counter({code: 1})


async def test_a_put_that_cannot_reach_the_service_has_an_unknown_outcome(
        engine_config: FleetConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", f"http://127.0.0.1:{port}")
    async with AwsClients(engine_config) as aws:
        with pytest.raises(StoreUnavailable):
            await AwsAdapter(aws).put_log_item(batch_item(new_pk(), 1))
        assert aws.errors == Counter({"ConnectionError": 1})


class Headers(Wire):
    """Keeps the headers each request is sent with."""

    def __init__(self, http: Any) -> None:
        super().__init__(http)
        self.headers: list[dict[str, str]] = []

    async def post(self, headers: Mapping[str, str], body: bytes) -> Answer:
        self.headers.append(dict(headers))
        return await super().post(headers, body)


async def test_the_put_is_signed_for_dynamodb_in_the_clients_region_with_its_credentials(
        store: AwsAdapter) -> None:
    aws = store.aws
    seam = Headers(aws.lean.ddb.http)
    aws.lean.ddb.http = seam
    await store.put_log_item(batch_item(new_pk(), 1))
    [headers] = seam.headers
    key = (await aws.lean.ddb.credentials.get_frozen_credentials()).access_key
    authorization = headers["Authorization"]
    assert authorization.startswith(f"AWS4-HMAC-SHA256 Credential={key}/{headers['X-Amz-Date'][:8]}/"
                                    f"{aws.ddb.meta.region_name}/dynamodb/aws4_request, ")
    assert "x-amz-target" in authorization and headers["X-Amz-Target"] == "DynamoDB_20120810.PutItem"
    assert headers["User-Agent"] == aws.settings.user_agent


@pytest.mark.parametrize(("env", "url", "proxy"), [
    ({}, "http://127.0.0.1:8000", None),
    ({"HTTP_PROXY": "http://p:3128"}, "http://ddb.local:8000", "http://p:3128"),
    ({"HTTP_PROXY": "http://p:3128", "NO_PROXY": "ddb.local"}, "http://ddb.local:8000", None),
    ({"HTTPS_PROXY": "http://p:3128"}, "https://dynamodb.us-east-1.amazonaws.com", "http://p:3128"),
    ({"HTTPS_PROXY": "http://p:3128"}, "http://ddb.local:8000", None),  # a proxy for the other scheme
])
def test_the_proxy_is_the_one_the_environment_names_for_the_endpoint(
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str], url: str, proxy: str | None) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "ALL_PROXY",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert env_proxy(url) == proxy


async def test_through_a_proxy_the_put_goes_by_the_sdk(engine_config: FleetConfig,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The lean HTTP speaks no proxy: where the environment names one for the endpoint, the SDK's client, which
    does, sends the put (and it is stored, counted and billed as before)."""
    async with AwsClients(engine_config) as aws:
        assert isinstance(aws.lean.ddb, LeanDynamoDB)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there: only its choice is tested
    monkeypatch.setenv("NO_PROXY", "")
    async with AwsClients(engine_config) as aws:
        assert aws.lean.ddb is aws.ddb


@pytest.mark.parametrize("token", [None, "a-session-token"])
@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/", "https://dynamodb.eu-west-1.amazonaws.com/"])
def test_the_signature_is_botocores(monkeypatch: pytest.MonkeyPatch, token: str | None, url: str) -> None:
    """The lean signer computes SigV4 as botocore's ``SigV4Auth`` does, for the same request at the same time
    (a day's signing key is reused: the second request is signed right too)."""
    credentials = ReadOnlyCredentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    signer = Signer("eu-west-1", "dynamodb")
    headers = {"Content-Type": CONTENT_TYPE, "Host": host_header(url), "User-Agent": "wsfleet  x",
               "X-Amz-Target": TARGET}
    for now, body in [(datetime(2026, 12, 5, 13, 4, 5, tzinfo=UTC), b'{"TableName":"t","Item":{}}'),
                      (datetime(2026, 12, 5, 23, 59, 59, tzinfo=UTC), b'{"x": "\\u00e9  y"}')]:
        ours = signer.signed(credentials, headers, body, now)
        request = AWSRequest(method="POST", url=url, data=body,
                             headers={k: v for k, v in headers.items() if k != "Host"})
        monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda now=now: now)
        SigV4Auth(credentials, "dynamodb", "eu-west-1").add_auth(request)
        assert ours == {"Host": host_header(url), **dict(request.headers.items())}


def test_the_host_header_names_a_port_only_when_it_is_not_the_schemes() -> None:
    assert [host_header(u) for u in ("http://h:80/", "https://h:443/", "https://h/", "http://h:8000/",
                                     "http://[::1]:8000/")] == ["h", "h", "h", "h:8000", "[::1]:8000"]


def test_an_https_endpoint_is_checked_against_the_sdks_certificates(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """The bundle ``AWS_CA_BUNDLE`` names (a private CA in front of LocalStack, a corporate proxy), else
    botocore's default bundle, not the system's store: what the SDK's requests trust, the lean put trusts."""
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    bundle = Path(get_cert_path(True)).read_text()
    assert len(tls_context().get_ca_certs()) == bundle.count("-----BEGIN CERTIFICATE-----") > 1
    end = bundle.index("-----END CERTIFICATE-----") + len("-----END CERTIFICATE-----")
    (tmp_path / "ca.pem").write_text(bundle[bundle.index("-----BEGIN CERTIFICATE-----"):end] + "\n")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(tmp_path / "ca.pem"))
    assert len(tls_context().get_ca_certs()) == 1
