"""Hypothesis fuzz of the router's three doors (``handle_event``, the HTTP adapter, the Lambda entry point)
against in-memory clients: every input gets a JSON answer with a 2xx or 4xx status, and a 4xx writes no
item and sends no message."""

from __future__ import annotations

import asyncio
import base64
import json
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any, NamedTuple, cast

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import fleet.router
import fleet.router_http
from fleet.aws import AwsClients
from fleet.config import ENV_VARS, FleetConfig
from fleet.history import HistoryWriter
from fleet.router import MAX_BODY_BYTES, LambdaRouter, handle_event
from fleet.router_http import make_app
from fleet.schema import conn_pk

ALLOWED = ("127.0.0.1:9000", "upstream.test", "[::1]:9000", "10.0.0.0/8")
QUEUE_URL = "http://queue.invalid/123456789012/wsfleet-notify"
KNOWN = ("c1", "c2")  # connections that exist before each example (c1 held by worker-9)


class FakeDdb:
    def __init__(self, backend: FakeClients) -> None:
        self.backend = backend

    async def put_item(self, TableName: str, Item: dict[str, Any]) -> dict[str, Any]:
        self.backend.write(TableName, Item["pk"]["S"])
        return {}

    async def update_item(self, TableName: str, Key: dict[str, Any], **request: Any) -> dict[str, Any]:
        pk = Key["pk"]["S"]
        if request.get("ConditionExpression") == "attribute_exists(pk)" and (TableName, pk) not in self.backend.items:
            error = {"Error": {"Code": "ConditionalCheckFailedException", "Message": "The conditional request failed"}}
            raise ClientError(error, "UpdateItem")  # type: ignore[arg-type]
        self.backend.write(TableName, pk)
        return {"Attributes": self.backend.items[(TableName, pk)]}


class FakeSqs:
    def __init__(self, backend: FakeClients) -> None:
        self.backend = backend

    async def send_message(self, QueueUrl: str, MessageBody: str) -> dict[str, Any]:
        assert QueueUrl == QUEUE_URL
        self.backend.messages.append(json.loads(MessageBody))
        return {"MessageId": str(len(self.backend.messages))}

    async def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, str]]) -> dict[str, Any]:
        """The router's notifications go out in batches (``fleet.router.Notifier``)."""
        return {"Successful": [await self.send_message(QueueUrl, entry["MessageBody"]) for entry in Entries],
                "Failed": []}


class FakeClients:
    """Stands in for ``AwsClients``: the connections c1 (owned by worker-9) and c2, worker-9's item, and a
    record of every write that succeeded and every message sent."""

    def __init__(self, config: FleetConfig | None = None) -> None:
        self.requests: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.gate_clients: tuple[tuple[str, Any], ...] = ()  # no region gate: always open
        self.ddb = FakeDdb(self)
        self.sqs = FakeSqs(self)
        self.reset()

    def reset(self) -> None:
        """Back to the connections and items of the start, nothing written or sent."""
        connections = FleetConfig(queue_url=QUEUE_URL).connections_table
        self.items: dict[tuple[str, str], dict[str, Any]] = {
            (connections, conn_pk("c1")): {"lease_owner": {"S": "worker-9"}},
            (connections, conn_pk("c2")): {"lease_owner": {"S": ""}},
            (FleetConfig(queue_url=QUEUE_URL).workers_table, "worker-9"): {},
        }
        self.writes: list[tuple[str, str]] = []
        self.messages: list[Any] = []

    def write(self, table: str, pk: str) -> None:
        self.items.setdefault((table, pk), {})
        self.writes.append((table, pk))

    async def __aenter__(self) -> FakeClients:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


def start_event() -> dict[str, str]:
    return {"event_type": "START", "connection_id": "c1", "ws_url": "ws://upstream.test/s"}


def huge_number_body(field: str, number: str) -> str:
    """A START body whose ``field`` is the JSON number ``number``."""
    others = {name: value for name, value in start_event().items() if name != field}
    return json.dumps(others)[:-1] + f', "{field}": {number}}}'


# -- inputs ---------------------------------------------------------------------------------------------
HOSTS = st.one_of(
    st.sampled_from([
        "127.0.0.1", "upstream.test", "UPSTREAM.test", "[::1]", "[0:0::1]", "[stream.example.com]", "[::1",
        "::1]", "[127.0.0.1]", "169.254.169.254", "10.0.0.5", "up_stream.test", "upstream.test.", "127.1",
        "*.upstream.test", "[fe80::1%25eth0]", "",
    ]),
    st.text(max_size=20),
)
PORTS = st.one_of(
    st.sampled_from(["", ":9000", ":80", ":443", ":0", ":", ":-1", ":+80", ":99999", ":9000:1"]),
    st.integers(0, 10**6).map(lambda n: f":{n}"),
    st.text(max_size=6).map(lambda text: ":" + text),
)
WS_URLS = st.one_of(
    st.builds(
        lambda scheme, userinfo, host, port, rest: f"{scheme}{userinfo}{host}{port}{rest}",
        st.sampled_from(["ws://", "wss://", "http://", "WS://", "", "ws:/"]),
        st.sampled_from(["", "u:p@", "@", "127.0.0.1:9000@"]),
        HOSTS,
        PORTS,
        st.one_of(st.sampled_from(["/s", "/s?token=x", "/s#f", "", "?", "/s?a=[::1]"]), st.text(max_size=30)),
    ),
    st.text(max_size=60),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)
EVENTS = st.fixed_dictionaries({}, optional={
    "event_type": st.one_of(st.sampled_from(["START", "STOP", "stop", ""]), JSON_VALUES),
    "connection_id": st.one_of(st.sampled_from([*KNOWN, "new-1", "a/b", "x" * 129]), JSON_VALUES),
    "ws_url": st.one_of(WS_URLS, JSON_VALUES),
    "priority": JSON_VALUES,
})
HUGE_NUMBERS = st.builds(
    lambda field, digits, sign: huge_number_body(field, sign + "9" * digits),
    st.sampled_from(["event_type", "connection_id", "ws_url"]),
    st.integers(4200, 5000),
    st.sampled_from(["", "-"]),
)
BODIES: st.SearchStrategy[bytes | str] = st.one_of(
    EVENTS.map(json.dumps),
    EVENTS.map(lambda event: json.dumps(event).encode()),
    HUGE_NUMBERS,
    st.binary(max_size=200),
    st.text(max_size=200),
    JSON_VALUES.map(json.dumps),
)
PROFILES = st.sampled_from(["blog", "hardened", "unsafe"])


def assert_answer(status: int, payload: object, clients: FakeClients) -> None:
    """A 2xx or 4xx JSON object; a 4xx wrote nothing and sent nothing."""
    assert 200 <= status < 300 or 400 <= status < 500, (status, payload)
    assert isinstance(payload, dict)
    json.dumps(payload)
    if status >= 400:
        assert isinstance(payload.get("error"), str)
        assert clients.writes == []
        assert clients.messages == []


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    running = asyncio.new_event_loop()
    yield running
    running.close()


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=BODIES, profile=PROFILES)
@example(body='{"event_type": ' + "1" * 4301 + "}", profile="hardened")
@example(body=json.dumps({"event_type": "START", "connection_id": "c1", "ws_url": "ws://[stream.example.com]/"}),
         profile="hardened")
@example(body=json.dumps({"event_type": "START", "connection_id": "c1", "ws_url": "ws://[::1/"}), profile="blog")
@example(body=b" " * (MAX_BODY_BYTES + 1), profile="blog")
@example(body=json.dumps({"event_type": "START", "connection_id": "new-1", "ws_url": "ws://upstream.test/s"}),
         profile="hardened")  # written and notified: the fake queue must take the router's batches
def test_handle_event_answers_every_input_with_2xx_or_4xx(
    loop: asyncio.AbstractEventLoop, body: bytes | str, profile: str
) -> None:
    clients = FakeClients()
    config = FleetConfig(profile=profile, queue_url=QUEUE_URL, allowed_ws_hosts=ALLOWED)  # type: ignore[arg-type]
    history = HistoryWriter("", "router")

    status, payload = loop.run_until_complete(handle_event(body, cast(AwsClients, clients), config, history))

    assert_answer(status, payload, clients)


@pytest.fixture
def fake_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both adapters open FakeClients, configured from these variables."""
    monkeypatch.setattr(fleet.router, "AwsClients", FakeClients)
    monkeypatch.setattr(fleet.router_http, "AwsClients", FakeClients)
    monkeypatch.setenv(ENV_VARS["queue_url"], QUEUE_URL)
    monkeypatch.setenv(ENV_VARS["allowed_ws_hosts"], ",".join(ALLOWED))
    monkeypatch.setenv(ENV_VARS["profile"], "hardened")
    monkeypatch.delenv(ENV_VARS["history_path"], raising=False)


def proxy_events() -> st.SearchStrategy[object]:
    bodies = st.one_of(st.none(), BODIES.map(lambda b: b if isinstance(b, str) else b.decode("latin-1")), JSON_VALUES)
    methods = st.one_of(st.sampled_from(["POST", "GET", "PUT", "DELETE", "post"]), JSON_VALUES)
    v1 = st.fixed_dictionaries({"httpMethod": methods, "body": bodies},
                               optional={"isBase64Encoded": st.one_of(st.booleans(), JSON_VALUES)})
    v2 = st.fixed_dictionaries({"requestContext": st.one_of(
        st.fixed_dictionaries({"http": st.one_of(st.fixed_dictionaries({"method": methods}), JSON_VALUES)}),
        JSON_VALUES,
    ), "body": bodies}, optional={"isBase64Encoded": st.booleans()})
    encoded = BODIES.map(lambda b: {"httpMethod": "POST", "isBase64Encoded": True, "body": base64.b64encode(
        b if isinstance(b, bytes) else b.encode("utf-8", "surrogatepass")).decode()})
    return st.one_of(v1, v2, encoded, JSON_VALUES)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(event=proxy_events())
def test_the_lambda_entry_point_answers_every_event_with_2xx_or_4xx(fake_environment: None, event: object) -> None:
    router = LambdaRouter()
    try:
        response = router(event, object())
        assert response["headers"] == {"Content-Type": "application/json"}
        assert router._opened is not None
        clients = cast(FakeClients, router._opened[1])
        assert_answer(response["statusCode"], json.loads(response["body"]), clients)
    finally:
        router.close()


@pytest.fixture
def http_router(fake_environment: None, loop: asyncio.AbstractEventLoop) -> Iterator[HttpRouter]:
    """One HTTP adapter and one client session for every example (its fake clients reset before each)."""
    async def serving() -> AsyncIterator[HttpRouter]:
        app = make_app(FleetConfig.from_env())
        async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession() as session:
            yield HttpRouter(server, session, cast(FakeClients, app[fleet.router_http._CLIENTS]))

    running = serving()
    yield loop.run_until_complete(anext(running))
    loop.run_until_complete(running.aclose())


class HttpRouter(NamedTuple):
    server: TestServer
    session: aiohttp.ClientSession
    clients: FakeClients


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    method=st.sampled_from(["POST", "GET", "PUT", "DELETE", "PATCH", "OPTIONS"]),
    path=st.one_of(st.sampled_from(["/events", "/health", "/", "/events/", "/EVENTS"]),
                   st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7e, exclude_characters="?#%"),
                           max_size=20).map(lambda text: "/" + text.lstrip("/"))),  # "//x" would be a URL
    body=BODIES,
)
def test_the_http_adapter_answers_every_request_with_2xx_or_4xx(
    http_router: HttpRouter, loop: asyncio.AbstractEventLoop, method: str, path: str, body: bytes | str
) -> None:
    async def exchange() -> tuple[int, object]:
        data = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
        async with http_router.session.request(method, http_router.server.make_url(path), data=data) as response:
            assert response.content_type == "application/json"
            return response.status, await response.json()

    http_router.clients.reset()
    status, payload = loop.run_until_complete(exchange())
    assert_answer(status, payload, http_router.clients)
