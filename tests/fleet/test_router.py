"""Tests of fleet.router against the embedded backend: every refused input changes nothing, each profile's
START and STOP writes, notifications, history events, failures of the backend, and the Lambda entry point."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from fleet import router as router_module
from fleet.aws import AwsClients, send_messages
from fleet.config import ENV_VARS, FleetConfig
from fleet.errors import StoreUnavailable
from fleet.history import HistoryWriter
from fleet.lease import HardenedRules, Holder
from fleet.router import MAX_BODY_BYTES, NOTIFY_SENDS_IN_FLIGHT, LambdaRouter, Notifier, handle_event
from fleet.schema import conn_pk
from fleet.store import AwsAdapter
from harness.backends.resources import client
from harness.region.routing_control import RoutingControls, control_arn

# Opening AwsClients costs ~0.3 s, so the module's tests share one set, on one module-wide event loop.
pytestmark = pytest.mark.asyncio(loop_scope="module")

ALLOWED = "127.0.0.1:9000,upstream.test,[::1]:9000"
URL = "ws://127.0.0.1:9000/streams/c1"
PK = conn_pk("c1")


def start(connection_id: str = "c1", ws_url: str = URL) -> dict[str, str]:
    return {"event_type": "START", "connection_id": connection_id, "ws_url": ws_url}


def stop(connection_id: str = "c1") -> dict[str, str]:
    return {"event_type": "STOP", "connection_id": connection_id}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Observer:
    """Reads the backend behind the router's back (synchronous boto3, so Lambda tests can use it too)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.config = FleetConfig.from_env(env)
        self.ddb = client(env, "dynamodb")
        self.sqs = client(env, "sqs")
        self.history_path = Path(env[ENV_VARS["history_path"]])

    def items(self, table: str) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for page in self.ddb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
            for item in page["Items"]:
                plain = {k: TypeDeserializer().deserialize(v) for k, v in item.items()}
                found[f"{plain['pk']}/{plain.get('sk', '')}"] = plain
        return found

    def connection(self, pk: str = PK) -> dict[str, Any]:
        """The connection's item; fails the test when there is none."""
        item = self.items(self.config.connections_table).get(f"{pk}/")
        assert item is not None, f"no item {pk}"
        return item

    def worker(self, worker_id: str) -> dict[str, Any]:
        item = self.items(self.config.workers_table).get(f"{worker_id}/")
        assert item is not None, f"no worker item {worker_id}"
        return item

    def tables(self) -> dict[str, dict[str, dict[str, Any]]]:
        names = (self.config.connections_table, self.config.messages_table, self.config.workers_table)
        return {name: self.items(name) for name in names}

    def put(self, table: str, item: dict[str, Any]) -> None:
        self.ddb.put_item(TableName=table, Item={k: TypeSerializer().serialize(v) for k, v in item.items()})

    def notifications(self) -> list[dict[str, Any]]:
        """Every message now in the queue (received, so each test sees only its own)."""
        bodies: list[dict[str, Any]] = []
        while True:
            received = self.sqs.receive_message(
                QueueUrl=self.config.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
            ).get("Messages", [])
            if not received:
                return bodies
            bodies.extend(json.loads(message["Body"]) for message in received)

    def history(self) -> list[dict[str, Any]]:
        if not self.history_path.exists():
            return []
        return [json.loads(line) for line in self.history_path.read_text().splitlines()]

    def seed_owned(self, pk: str = PK, owner: str = "worker-9", with_worker_item: bool = True) -> None:
        """A started connection held by ``owner`` (epoch 7, checkpointed at 42), and that worker's item."""
        self.put(self.config.connections_table, {
            "pk": pk, "desired_state": "STARTED", "ws_url": URL, "lease_owner": owner,
            "lease_expires_at_ms": 9_999_999_999_999, "last_seq": 42, "epoch": 7, "updated_at_ms": 1,
        })
        if with_worker_item:
            worker = {"pk": owner, "gen": "g1", "expires_at_ms": 9_999_999_999_999}
            self.put(self.config.workers_table, worker)


@pytest.fixture
def env(clean_backend: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """The backend's variables plus an allowlist and a history path, also set in os.environ (the SDK
    reads its endpoints from there)."""
    values = {
        **clean_backend.env(),
        ENV_VARS["allowed_ws_hosts"]: ALLOWED,
        ENV_VARS["history_path"]: str(tmp_path / "history" / "router.jsonl"),
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


@pytest.fixture
def observer(env: dict[str, str]) -> Observer:
    return Observer(env)


class Router:
    """Calls handle_event with one set of clients; ``profile`` and other settings vary per call.  A 503 (the
    outcome is unknown and the event safe to repeat) is repeated once, as every client does: the hardened
    client makes one attempt per request, and the local servers fail one now and then under the suite's load
    (a fresh clone: a START answered 503 in 1.6 ms).  The tests of 503 call ``handle_event`` themselves."""

    def __init__(self, clients: AwsClients, config: FleetConfig, history: HistoryWriter) -> None:
        self.clients, self.config, self.history = clients, config, history

    async def send(self, event: object, raw: bytes | str | None = None, **changes: Any) -> tuple[int, Any]:
        body = raw if raw is not None else json.dumps(event)
        config = self.config.with_changes(**changes)
        answer = await handle_event(body, self.clients, config, self.history)
        return answer if answer[0] != 503 else await handle_event(body, self.clients, config, self.history)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_clients(backend: Any) -> AsyncIterator[AwsClients]:
    """Clients on the module's loop; the SDK reads the backend's endpoints from os.environ as they open."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in backend.env().items():
            patch.setenv(name, value)
        clients = await AwsClients(FleetConfig.from_env()).__aenter__()
    try:
        yield clients
    finally:
        await clients.__aexit__(None, None, None)


@pytest.fixture
def router(env: dict[str, str], shared_clients: AwsClients) -> Iterator[Router]:
    config = FleetConfig.from_env()
    history = HistoryWriter(config.history_path, "router")
    yield Router(shared_clients, config, history)
    history.close()


def oversized_body() -> bytes:
    return json.dumps(start()).encode() + b" " * MAX_BODY_BYTES


BAD_INPUTS: list[tuple[str, bytes | str, str, str]] = [
    # (case, body, expected error fragment, history kind)
    ("malformed json", b'{"event_type": "START",', "not valid JSON", "INVALID"),
    ("empty body", b"", "not valid JSON", "INVALID"),
    ("not utf-8", b'{"event_type": "\xff"}', "not UTF-8", "INVALID"),
    ("lone surrogate", '{"event_type": "\ud800"}', "not UTF-8", "INVALID"),
    ("deeply nested", b"[" * 8000 + b"]" * 8000, "nested too deeply", "INVALID"),
    ("array", b"[]", "must be a JSON object, not list", "INVALID"),
    ("string", b'"START"', "must be a JSON object, not str", "INVALID"),
    ("oversized", oversized_body(), f"larger than {MAX_BODY_BYTES} bytes", "INVALID"),
    ("duplicate key", b'{"event_type": "STOP", "event_type": "START", "connection_id": "c1"}',
     "duplicate key 'event_type'", "INVALID"),
    ("no event_type", json.dumps({"connection_id": "c1"}), "event_type is missing", "INVALID"),
    ("event_type number", json.dumps({**stop(), "event_type": 1}), "event_type must be a string", "INVALID"),
    ("unknown event_type", json.dumps({**stop(), "event_type": "RESTART"}), "START or STOP", "INVALID"),
    ("lower-case event_type", json.dumps({**stop(), "event_type": "stop"}), "START or STOP", "INVALID"),
    ("no connection_id", json.dumps({"event_type": "STOP"}), "connection_id is missing", "STOP"),
    ("connection_id number", json.dumps({**stop(), "connection_id": 7}), "must be a string, not int", "STOP"),
    ("connection_id null", json.dumps({**start(), "connection_id": None}), "must be a string", "START"),
    ("empty connection_id", json.dumps(stop("")), "connection_id must match", "STOP"),
    ("connection_id slash", json.dumps(stop("a/b")), "connection_id must match", "STOP"),
    ("connection_id space", json.dumps(stop("a b")), "connection_id must match", "STOP"),
    ("connection_id newline", json.dumps(stop("abc\n")), "connection_id must match", "STOP"),
    ("connection_id non-ascii", json.dumps(stop("café")), "connection_id must match", "STOP"),
    ("connection_id 129 chars", json.dumps(stop("x" * 129)), "connection_id must match", "STOP"),
    ("unknown field", json.dumps({**start(), "priority": 1}), "unexpected field(s) 'priority'", "START"),
    ("ws_url with STOP", json.dumps({**stop(), "ws_url": URL}), "only accepted with START", "STOP"),
    ("no ws_url", json.dumps({"event_type": "START", "connection_id": "c1"}), "ws_url is missing", "START"),
    ("ws_url null", json.dumps({**start(), "ws_url": None}), "ws_url must be a string", "START"),
    ("http scheme", json.dumps(start(ws_url="http://127.0.0.1:9000/")), "ws:// or wss://", "START"),
    ("upper-case scheme", json.dumps(start(ws_url="WS://127.0.0.1:9000/")), "ws:// or wss://", "START"),
    ("no scheme", json.dumps(start(ws_url="127.0.0.1:9000")), "ws:// or wss://", "START"),
    ("host not allowed", json.dumps(start(ws_url="ws://evil.test/")), "not in the allowlist", "START"),
    ("metadata service", json.dumps(start(ws_url="ws://169.254.169.254/latest/meta-data/")),
     "'169.254.169.254' port 80 is not in the allowlist", "START"),
    ("port not allowed", json.dumps(start(ws_url="ws://127.0.0.1:9001/")), "port 9001 is not in", "START"),
    ("default port not allowed", json.dumps(start(ws_url="wss://127.0.0.1/")), "port 443 is not in", "START"),
    ("host in user info", json.dumps(start(ws_url="ws://127.0.0.1:9000@169.254.169.254/")),
     "must not carry user information", "START"),
    ("credentials", json.dumps(start(ws_url="ws://u:p@127.0.0.1:9000/")), "user information", "START"),
    ("fragment", json.dumps(start(ws_url=URL + "#x")), "must not have a fragment", "START"),
    ("bad port", json.dumps(start(ws_url="ws://127.0.0.1:99999/")), "invalid port", "START"),
    ("no host", json.dumps(start(ws_url="ws:///streams/c1")), "has no host", "START"),
    ("space in ws_url", json.dumps(start(ws_url=URL + " x")), "printable ASCII", "START"),
    ("tab in host", json.dumps(start(ws_url="ws://evil\t.test/")), "printable ASCII", "START"),
    ("long ws_url", json.dumps(start(ws_url=URL + "x" * 2048)), "longer than 2048", "START"),
    ("bare host, other port", json.dumps(start(ws_url="ws://upstream.test:22/")), "port 22 is not in", "START"),
    ("bare host, wss port on ws", json.dumps(start(ws_url="ws://upstream.test:443/")), "port 443", "START"),
    ("bracketed name", json.dumps(start(ws_url="ws://[stream.example.com]/")), "ws_url is malformed", "START"),
    ("unclosed bracket", json.dumps(start(ws_url="ws://[::1/")), "ws_url is malformed", "START"),
    ("bracketed ipv4", json.dumps(start(ws_url="ws://[127.0.0.1]:9000/")), "ws_url is malformed", "START"),
    ("host with underscore", json.dumps(start(ws_url="ws://up_stream.test/")), "is not a host name", "START"),
    ("host with trailing dot", json.dumps(start(ws_url="ws://upstream.test./")), "trailing dot", "START"),
    ("short ipv4", json.dumps(start(ws_url="ws://127.1:9000/")), "incomplete IP address", "START"),
    ("port 0", json.dumps(start(ws_url="ws://127.0.0.1:0/")), "invalid port", "START"),
    ("huge integer event_type", '{"event_type": ' + "9" * 5000 + "}", "4300 digits", "INVALID"),
]


@pytest.mark.parametrize(("body", "fragment", "kind"), [case[1:] for case in BAD_INPUTS],
                         ids=[case[0] for case in BAD_INPUTS])
async def test_bad_input_answers_400_and_changes_nothing(
    router: Router, observer: Observer, body: bytes | str, fragment: str, kind: str
) -> None:
    observer.seed_owned()
    before = observer.tables()

    status, payload = await router.send(None, raw=body, profile="hardened")

    assert status == 400
    assert fragment in payload["error"]
    assert set(payload) == {"error"}
    assert observer.tables() == before
    assert observer.notifications() == []
    assert observer.history()[-1]["type"] == "event"
    assert observer.history()[-1]["kind"] == kind
    assert observer.history()[-1]["status"] == 400


async def test_connection_id_characters_and_length_limit_are_accepted(
    router: Router, observer: Observer
) -> None:
    connection_id = "Az09._:-" + "x" * 120
    status, payload = await router.send(start(connection_id))

    assert (status, payload["connection_id"]) == (200, connection_id)
    assert observer.connection(conn_pk(connection_id))["desired_state"] == "STARTED"


async def test_body_of_exactly_the_limit_is_accepted(router: Router, observer: Observer) -> None:
    body = json.dumps(start()).encode()
    body += b" " * (MAX_BODY_BYTES - len(body))
    assert len(body) == MAX_BODY_BYTES

    status, _ = await router.send(None, raw=body)

    assert status == 200
    assert observer.connection()["desired_state"] == "STARTED"


async def test_empty_allowlist_admits_no_host(router: Router, observer: Observer) -> None:
    status, payload = await router.send(start(), allowed_ws_hosts=())

    assert status == 400
    assert "allowlist (WSFLEET_ALLOWED_WS_HOSTS) is empty" in payload["error"]
    assert observer.tables()[observer.config.connections_table] == {}
    assert observer.notifications() == []


@pytest.mark.parametrize("ws_url", [
    "ws://UPSTREAM.test/s?x=1",  # a bare host entry admits the scheme's default port; any case
    "wss://upstream.test/s",
    "ws://upstream.test:80/s",
    "ws://[::1]:9000/s",
    "ws://[0:0::1]:9000/s",  # addresses compare canonically
])
async def test_allowlist_entries(router: Router, observer: Observer, ws_url: str) -> None:
    status, _ = await router.send(start(ws_url=ws_url))

    assert status == 200
    assert observer.connection()["ws_url"] == ws_url


async def test_misconfigured_router_answers_500_and_changes_nothing(
    router: Router, observer: Observer
) -> None:
    status, payload = await router.send(start(), queue_url="")

    assert status == 500
    assert payload["error"] == "router misconfigured: WSFLEET_QUEUE_URL is not set"
    assert observer.tables()[observer.config.connections_table] == {}
    assert observer.notifications() == []


@pytest.mark.parametrize("profile", ["blog", "unsafe", "hardened"])
async def test_start_writes_the_item_and_one_notification(
    router: Router, observer: Observer, profile: str
) -> None:
    status, payload = await router.send(start(), profile=profile)

    assert status == 200
    assert payload == {"ok": True, "connection_id": "c1", "desired_state": "STARTED"}
    item = observer.connection()
    updated = item.pop("updated_at_ms")
    assert updated > 0
    expected: dict[str, Any] = {
        "pk": PK, "desired_state": "STARTED", "ws_url": URL, "lease_owner": "", "lease_expires_at_ms": 0,
        "last_seq": 0,
    }
    if profile == "hardened":
        expected["epoch"] = 0
    assert item == expected
    assert observer.notifications() == [{"pk": PK}]
    event = observer.history()[-1]
    assert (event["src"], event["type"], event["kind"], event["pk"], event["status"]) == (
        "router", "event", "START", PK, 200
    )
    # when the write was answered: after the item's own time, before the event (logged after the notification)
    assert int(event["sent_ms"]) <= updated <= event["written_ms"] <= event["t"]  # the item keeps whole ms


@pytest.mark.parametrize("profile", ["blog", "unsafe"])
async def test_published_start_clobbers_a_live_lease(
    router: Router, observer: Observer, profile: str
) -> None:
    """The baseline flaw, kept on purpose: a repeated START overwrites the owner, expiry and checkpoint."""
    observer.seed_owned()

    status, _ = await router.send(start(ws_url="ws://127.0.0.1:9000/other"), profile=profile)

    assert status == 200
    item = observer.connection()
    assert (item["lease_owner"], item["lease_expires_at_ms"], item["last_seq"]) == ("", 0, 0)
    assert "epoch" not in item
    assert item["ws_url"] == "ws://127.0.0.1:9000/other"
    assert observer.notifications() == [{"pk": PK}]


async def test_hardened_repeated_start_keeps_the_live_lease(router: Router, observer: Observer) -> None:
    observer.seed_owned()
    observer.put(observer.config.connections_table, {**observer.connection(), "desired_state": "STOPPED"})

    status, _ = await router.send(start(ws_url="ws://127.0.0.1:9000/other"), profile="hardened")
    assert status == 200
    status, _ = await router.send(start(ws_url="ws://127.0.0.1:9000/other"), profile="hardened")
    assert status == 200

    item = observer.connection()
    assert (item["lease_owner"], item["epoch"], item["last_seq"]) == ("worker-9", 7, 42)
    assert item["lease_expires_at_ms"] == 9_999_999_999_999
    assert (item["desired_state"], item["ws_url"]) == ("STARTED", "ws://127.0.0.1:9000/other")
    assert item["updated_at_ms"] > 1
    assert observer.notifications() == [{"pk": PK}, {"pk": PK}]


@pytest.mark.parametrize("profile", ["blog", "hardened"])
async def test_stop_of_an_unknown_connection_answers_404_and_changes_nothing(
    router: Router, observer: Observer, profile: str
) -> None:
    observer.seed_owned(pk=conn_pk("other"))
    before = observer.tables()

    status, payload = await router.send(stop(), profile=profile)

    assert status == 404
    assert "unknown connection c1" in payload["error"]
    assert observer.tables() == before
    assert observer.notifications() == []
    assert observer.history()[-1]["kind"] == "STOP"
    assert observer.history()[-1]["status"] == 404


@pytest.mark.parametrize("profile", ["blog", "hardened"])
async def test_stop_of_a_free_connection(router: Router, observer: Observer, profile: str) -> None:
    await router.send(start(), profile=profile)
    observer.notifications()

    status, payload = await router.send(stop(), profile=profile)

    assert status == 200
    assert payload == {"ok": True, "connection_id": "c1", "desired_state": "STOPPED"}
    item = observer.connection()
    assert (item["desired_state"], item["ws_url"], item["lease_owner"]) == ("STOPPED", URL, "")
    # The published design notifies no STOP: its workers read desired state on their own.
    assert observer.notifications() == ([{"pk": PK}] if profile == "hardened" else [])
    assert observer.tables()[observer.config.workers_table] == {}


async def test_blog_stop_of_an_owned_connection_posts_no_mailbox(router: Router, observer: Observer) -> None:
    observer.seed_owned()

    status, _ = await router.send(stop(), profile="blog")

    assert status == 200
    item = observer.connection()
    assert (item["desired_state"], item["lease_owner"], item["epoch"]) == ("STOPPED", "worker-9", 7)
    assert "stop_requests" not in observer.worker("worker-9")
    assert observer.notifications() == []


async def test_hardened_stop_of_an_owned_connection_posts_to_the_owner_mailbox(
    router: Router, observer: Observer
) -> None:
    observer.seed_owned()
    observer.seed_owned(pk=conn_pk("c2"))

    assert (await router.send(stop(), profile="hardened"))[0] == 200
    assert (await router.send(stop("c2"), profile="hardened"))[0] == 200

    worker = observer.worker("worker-9")
    item, other = observer.connection(), observer.connection(conn_pk("c2"))
    # each names the lease it stops and when it stopped
    assert worker["stop_requests"] == {f"{PK}@7:{item['stopped_at_ms']}", f"{conn_pk('c2')}@7:{other['stopped_at_ms']}"}
    assert (worker["gen"], worker["expires_at_ms"]) == ("g1", 9_999_999_999_999)
    assert (item["desired_state"], item["lease_owner"], item["epoch"], item["last_seq"]) == (
        "STOPPED", "worker-9", 7, 42
    )
    assert observer.notifications() == [{"pk": PK}, {"pk": conn_pk("c2")}]


async def test_hardened_stop_start_stop_posts_a_second_entry_that_deleting_the_first_leaves(
    router: Router, observer: Observer
) -> None:
    """Issue 10: STOP, START, the owner re-acquires (epoch 8), STOP again.  While entries were bare pks, the
    second post was a no-op on the set, and the owner's renewal deleting the first as handled emptied it."""
    observer.seed_owned()
    assert (await router.send(stop(), profile="hardened"))[0] == 200
    first = f"{PK}@7:{observer.connection()['stopped_at_ms']}"
    assert (await router.send(start(), profile="hardened"))[0] == 200
    observer.put(observer.config.connections_table, {**observer.connection(), "epoch": 8})  # re-acquired
    assert (await router.send(stop(), profile="hardened"))[0] == 200
    second = f"{PK}@8:{observer.connection()['stopped_at_ms']}"

    assert observer.worker("worker-9")["stop_requests"] == {first, second}
    rules = HardenedRules(observer.config)
    expires = observer.worker("worker-9")["expires_at_ms"]
    renewal = rules.renew_worker(Holder("worker-9", "g1"), int(expires) - int(rules.lease_ms), frozenset({first}))
    renewed = await AwsAdapter(router.clients).execute(observer.config.workers_table, renewal)
    assert renewed["stop_requests"] == {second}  # what the owner settles: the restarted lease is STOPPED


async def test_hardened_stop_of_an_item_without_an_epoch_posts_the_bare_pk(
    router: Router, observer: Observer
) -> None:
    observer.seed_owned()
    item = observer.connection()
    del item["epoch"]
    observer.put(observer.config.connections_table, item)

    assert (await router.send(stop(), profile="hardened"))[0] == 200
    assert observer.worker("worker-9")["stop_requests"] == {PK}  # any epoch (``StopRequest``)


async def test_hardened_stop_when_the_owner_is_gone(router: Router, observer: Observer) -> None:
    observer.seed_owned(with_worker_item=False)

    status, _ = await router.send(stop(), profile="hardened")

    assert status == 200
    assert observer.connection()["desired_state"] == "STOPPED"
    assert observer.tables()[observer.config.workers_table] == {}
    assert observer.notifications() == [{"pk": PK}]


async def test_missing_table_answers_502(router: Router, observer: Observer) -> None:
    status, payload = await router.send(start(), connections_table="no-such-table")

    assert status == 502
    assert "backend refused the request" in payload["error"]
    assert observer.notifications() == []
    assert observer.history()[-1]["status"] == 502


async def test_dynamodb_down_answers_503(
    env: dict[str, str], observer: Observer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", f"http://127.0.0.1:{free_port()}")
    config = FleetConfig.from_env()
    history = HistoryWriter(config.history_path, "router")
    async with AwsClients(config) as clients:
        for event in (start(), stop()):
            status, payload = await handle_event(json.dumps(event), clients, config, history)
            assert status == 503
            assert "backend unavailable, outcome unknown" in payload["error"]
    history.close()
    assert observer.notifications() == []
    events = observer.history()
    assert [e["status"] for e in events] == [503, 503]
    # outcome unknown: no written_ms, but when the write was sent (the earliest it can have landed)
    assert all("written_ms" not in e and 0 < e["sent_ms"] <= e["t"] for e in events), events


async def test_a_router_in_a_region_gated_off_refuses_writes_with_a_503_naming_its_region(
    env: dict[str, str], observer: Observer
) -> None:
    """Its table is a replica the active region's conditions cannot see: nothing is written there.  Once
    its control is On, the same event is applied."""
    controls = RoutingControls(["us-east-1", "us-west-2"], "us-west-2", lambda *_, **__: None,
                               {"test": "test"}, cluster=1).start()
    config = FleetConfig.from_env().with_changes(region="us-east-1", region_gate_endpoints=controls.endpoints,
                                                 region_gate_control=control_arn("us-east-1"))
    history = HistoryWriter(config.history_path, "router")
    try:
        async with AwsClients(config) as clients:
            for event in (start(), stop()):
                status, payload = await handle_event(json.dumps(event), clients, config, history)
                assert status == 503
                assert "region us-east-1 is not the active region" in payload["error"]
            assert observer.tables()[observer.config.connections_table] == {}
            assert observer.notifications() == []
            controls.set({"us-east-1": "On", "us-west-2": "Off"})
            assert (await handle_event(json.dumps(start()), clients, config, history))[0] == 200
        assert observer.connection()["desired_state"] == "STARTED"
        events = observer.history()
        assert [e["status"] for e in events] == [503, 503, 200]
        assert ["sent_ms" in e for e in events] == [False, False, True]  # nothing was sent while gated off
    finally:
        history.close()
        controls.stop()


async def test_sqs_down_after_the_write_is_accepted_202_not_notified_saying_the_state_was_recorded(
    env: dict[str, str], observer: Observer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", f"http://127.0.0.1:{free_port()}")
    config = FleetConfig.from_env()
    history = HistoryWriter(config.history_path, "router")
    async with AwsClients(config) as clients:
        status, payload = await handle_event(json.dumps(start()), clients, config, history)
    history.close()

    assert status == 202
    assert payload["notified"] is False
    assert "desired state STARTED was recorded, but the fleet was not told" in payload["note"]
    assert (payload["connection_id"], payload["desired_state"]) == ("c1", "STARTED")
    assert observer.connection()["desired_state"] == "STARTED"


async def test_notifications_of_events_handled_at_once_share_requests_and_each_waits_for_its_own(
    env: dict[str, str], observer: Observer, shared_clients: AwsClients
) -> None:
    """A burst of 25 notifications: the first eight go alone (fewer than ``NOTIFY_SENDS_IN_FLIGHT`` were in
    flight), the other 17 in the next two requests (10, 7) as those are answered; every one lands, once.  On
    ae2d36d's router each event sent its own SendMessage: 25 requests."""
    notifier = Notifier(shared_clients, observer.config.queue_url)
    pks = [conn_pk(f"burst{i}") for i in range(25)]
    await asyncio.gather(*(notifier.notify(pk) for pk in pks))
    assert NOTIFY_SENDS_IN_FLIGHT == 8 and notifier.requests == 10
    assert notifier.in_flight == 0 and notifier.waiting == []
    assert sorted(body["pk"] for body in observer.notifications()) == sorted(pks)


def fail_first_send(monkeypatch: pytest.MonkeyPatch, failure: Exception) -> None:
    """The router's first notification request raises ``failure``; the later ones are sent."""
    sent: list[int] = []

    async def failing_first(clients: AwsClients, queue_url: str, bodies: Any) -> None:
        sent.append(len(bodies))
        if len(sent) == 1:
            raise failure
        await send_messages(clients, queue_url, bodies)

    monkeypatch.setattr(router_module, "send_messages", failing_first)


async def test_a_refused_notification_request_fails_only_the_events_it_carried(
    env: dict[str, str], observer: Observer, shared_clients: AwsClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue refuses the first request (the one carrying c0 alone); the others still land."""
    fail_first_send(monkeypatch, StoreUnavailable("send notifications: the queue timed out"))
    notifier = Notifier(shared_clients, observer.config.queue_url)
    outcomes = await asyncio.gather(*(notifier.notify(conn_pk(f"c{i}")) for i in range(12)), return_exceptions=True)
    assert [i for i, outcome in enumerate(outcomes) if isinstance(outcome, StoreUnavailable)] == [0]
    assert sorted(body["pk"] for body in observer.notifications()) == sorted(conn_pk(f"c{i}") for i in range(1, 12))


async def test_a_notification_request_that_fails_unexpectedly_fails_its_events_instead_of_leaving_them_waiting(
    env: dict[str, str], observer: Observer, shared_clients: AwsClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a ``StoreError`` (a bug, or a client library's own exception): each event it carried gets that
    exception, and the next events are still sent.  On 2534a0b's router the events waited for ever."""
    fail_first_send(monkeypatch, AttributeError("send_message_batch"))
    notifier = Notifier(shared_clients, observer.config.queue_url)
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(notifier.notify(conn_pk(f"c{i}")) for i in range(3)), return_exceptions=True), 5.0)
    assert [type(outcome).__name__ for outcome in outcomes] == ["AttributeError", "NoneType", "NoneType"]
    assert notifier.in_flight == 0 and notifier.waiting == []


# --- the Lambda entry point ---


def v1_event(body: str | None, method: str = "POST", base64_encoded: bool = False) -> dict[str, Any]:
    return {
        "resource": "/events", "path": "/events", "httpMethod": method, "headers": {},
        "requestContext": {"resourcePath": "/events", "httpMethod": method, "stage": "prod"},
        "body": body, "isBase64Encoded": base64_encoded,
    }


def v2_event(body: str | None, method: str = "POST", base64_encoded: bool = False) -> dict[str, Any]:
    return {
        "version": "2.0", "routeKey": f"{method} /events", "rawPath": "/events", "headers": {},
        "requestContext": {"http": {"method": method, "path": "/events"}, "stage": "$default"},
        "body": body, "isBase64Encoded": base64_encoded,
    }


@pytest.fixture
def lambda_router(env: dict[str, str]) -> Iterator[LambdaRouter]:
    router = LambdaRouter()
    yield router
    router.close()


async def invoke(entry: Callable[[object, object], dict[str, Any]], event: object) -> tuple[int, Any]:
    """Call a Lambda entry point as the runtime does: synchronously, in a thread with no running loop."""
    result = await asyncio.to_thread(entry, event, object())
    assert result["headers"] == {"Content-Type": "application/json"}
    assert result["isBase64Encoded"] is False
    return result["statusCode"], json.loads(result["body"])


@pytest.mark.parametrize("make_event", [v1_event, v2_event], ids=["rest-v1", "http-v2"])
async def test_lambda_start_and_stop(
    lambda_router: LambdaRouter, observer: Observer, make_event: Any
) -> None:
    status, payload = await invoke(lambda_router, make_event(json.dumps(start())))
    assert (status, payload["desired_state"]) == (200, "STARTED")
    # A second (warm) invocation reuses the loop and clients.
    status, payload = await invoke(lambda_router, make_event(json.dumps(stop())))
    assert (status, payload["desired_state"]) == (200, "STOPPED")

    assert observer.connection()["desired_state"] == "STOPPED"
    assert observer.notifications() == [{"pk": PK}]  # blog (the default profile) notifies START only
    assert [(e["kind"], e["status"]) for e in observer.history()] == [("START", 200), ("STOP", 200)]


@pytest.mark.parametrize("make_event", [v1_event, v2_event], ids=["rest-v1", "http-v2"])
async def test_lambda_base64_body(lambda_router: LambdaRouter, observer: Observer, make_event: Any) -> None:
    body = base64.b64encode(json.dumps(start()).encode()).decode()

    status, _ = await invoke(lambda_router, make_event(body, base64_encoded=True))

    assert status == 200
    assert observer.connection()["ws_url"] == URL


@pytest.mark.parametrize(("event", "status", "fragment"), [
    (v2_event("not base64!", base64_encoded=True), 400, "not valid base64"),
    (v1_event(base64.b64encode(b" " * (MAX_BODY_BYTES + 10)).decode(), base64_encoded=True), 400,
     "larger than"),
    (v2_event(base64.b64encode(b"[1]").decode(), base64_encoded=True), 400, "JSON object"),
    (v1_event(None), 400, "not valid JSON"),
    (v1_event(json.dumps(start()), method="DELETE"), 405, "use POST"),
    (v2_event(json.dumps(start()), method="PUT"), 405, "use POST"),
    (["not", "a", "proxy", "event"], 400, "not an API Gateway proxy event"),
], ids=["bad-base64", "base64-oversized", "base64-array", "no-body", "v1-delete", "v2-put", "not-a-dict"])
async def test_lambda_refusals_change_nothing(
    lambda_router: LambdaRouter, observer: Observer, event: object, status: int, fragment: str
) -> None:
    answered, payload = await invoke(lambda_router, event)

    assert answered == status
    assert fragment in payload["error"]
    assert observer.tables()[observer.config.connections_table] == {}
    assert observer.notifications() == []
    assert observer.history()[-1]["status"] == status


@pytest.mark.parametrize("make_event", [v1_event, v2_event], ids=["rest-v1", "http-v2"])
async def test_lambda_get_answers_the_health_check(
    lambda_router: LambdaRouter, observer: Observer, make_event: Any
) -> None:
    """Route 53 probes a GET route (its path is a terraform variable) that invokes this same function."""
    status, payload = await invoke(lambda_router, make_event(None, method="GET"))

    assert (status, payload) == (200, {"ok": True, "profile": "blog"})
    assert observer.tables()[observer.config.connections_table] == {}
    assert observer.notifications() == []
    assert observer.history() == []


async def test_lambda_backend_down_answers_503_json(
    env: dict[str, str], observer: Observer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", f"http://127.0.0.1:{free_port()}")
    router = LambdaRouter()
    try:
        status, payload = await invoke(router, v2_event(json.dumps(start())))
    finally:
        await asyncio.to_thread(router.close)
    assert status == 503
    assert "backend unavailable" in payload["error"]


async def test_lambda_misconfigured_answers_500_json(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VARS["profile"], "bogus")
    status, payload = await invoke(LambdaRouter(), v2_event(json.dumps(start())))
    assert status == 500
    assert "WSFLEET_PROFILE must be one of" in payload["error"]


@pytest.mark.parametrize("entry", ["*.example.com", "a b", "stream.example.com.", "host:1:2", "user@host"])
async def test_lambda_with_a_malformed_allowlist_answers_500_json_naming_the_entry(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    monkeypatch.setenv(ENV_VARS["allowed_ws_hosts"], f"127.0.0.1:9000,{entry}")
    status, payload = await invoke(LambdaRouter(), v2_event(json.dumps(start())))
    assert status == 500
    assert payload["error"].startswith(f"router misconfigured: WSFLEET_ALLOWED_WS_HOSTS: {entry!r}")


async def test_module_handler_is_the_lambda_entry_point(
    env: dict[str, str], observer: Observer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fleet.router

    router = LambdaRouter()
    monkeypatch.setattr(fleet.router, "_lambda_router", router)
    try:
        status, _ = await invoke(fleet.router.handler, v1_event(json.dumps(start())))
    finally:
        await asyncio.to_thread(router.close)
    assert status == 200
    assert observer.connection()["desired_state"] == "STARTED"


@pytest.mark.parametrize("profile", ["hardened", "blog"])
async def test_a_stop_ending_a_start_nobody_took_up_marks_the_stream_for_a_drain(
    router: Router, observer: Observer, profile: str
) -> None:
    """START, then STOP before any worker acquired it: what the stream emitted between them is nobody's, so
    hardened marks it (expiry 1: listed with the unreleased STOPPED streams, ``HardenedRules.drainable``).
    A repeated STOP does not mark again; blog marks nothing."""
    assert (await router.send(start(), profile=profile))[0] == 200
    assert (await router.send(stop(), profile=profile))[0] == 200
    item = observer.connection()
    assert (item["desired_state"], item["lease_owner"]) == ("STOPPED", "")
    assert item["lease_expires_at_ms"] == (1 if profile == "hardened" else 0)
    drained = {**item, "lease_expires_at_ms": 0, "drained_epoch": item.get("epoch", 0)}
    observer.put(observer.config.connections_table, drained)  # drained since
    assert (await router.send(stop(), profile=profile))[0] == 200
    assert observer.connection()["lease_expires_at_ms"] == 0


@pytest.mark.parametrize(("drained_epoch", "marked"), [(None, True), (3, True), (4, False)])
async def test_a_repeated_stop_marks_a_stream_nobody_stored_before_it(
    router: Router, observer: Observer, drained_epoch: int | None, marked: bool
) -> None:
    """A STOP that ended a STARTED period nobody held recorded STOPPED, then its answer was lost before its
    mark was written (a 503); the client repeats it.  The repeat marks the stream unless its epoch was
    drained, or released for this STOP (which records the same), since."""
    observer.seed_owned()
    item = {**observer.connection(), "desired_state": "STOPPED", "stopped_at_ms": 61_000, "lease_owner": "",
            "owner_gen": "", "lease_expires_at_ms": 0, "epoch": 4}
    if drained_epoch is not None:
        item["drained_epoch"] = drained_epoch
    observer.put(observer.config.connections_table, item)

    assert (await router.send(stop(), profile="hardened"))[0] == 200

    after = observer.connection()
    assert (after["lease_expires_at_ms"], after["stopped_at_ms"]) == (1 if marked else 0, 61_000)


JOURNAL = {"profile": "hardened", "control_journal": "on"}


async def test_a_stop_reverted_by_replication_is_re_applied_from_the_journal(
    router: Router, observer: Observer
) -> None:
    """Issue 28 (region-batch seed 6): a STOP the primary acknowledged just before a cut, overwritten by the
    standby's later image of the item (still STARTED, its own lease) through last-writer-wins, stays reverted
    unless the activated region's router re-applies it from the journal, which no worker writes."""
    observer.seed_owned()
    assert (await router.send(stop(), **JOURNAL))[0] == 200
    assert observer.items(observer.config.connections_table)["CTL#c1/"]["event_type"] == "STOP"
    journal = observer.items(observer.config.connections_table)["CTL#c1/"]
    assert observer.connection()["desired_at_ms"] == journal["journal_ms"]
    reverted = {**observer.connection(), "desired_state": "STARTED", "lease_owner": "west-worker-1", "epoch": 8,
                "desired_at_ms": 1}  # the standby's image: the START before, its lease
    del reverted["stopped_at_ms"]
    observer.put(observer.config.connections_table, reverted)
    standby_worker = {"pk": "west-worker-1", "gen": "g1", "expires_at_ms": 9_999_999_999_999}
    observer.put(observer.config.workers_table, standby_worker)
    observer.notifications()
    config = router.config.with_changes(**JOURNAL)

    answer = await router_module.reapply_journal(router.clients, config, router.history)

    assert answer == (200, {"reapplied": 1, "failed": 0})
    item = observer.connection()
    assert item["desired_state"] == "STOPPED"
    assert observer.worker("west-worker-1")["stop_requests"] == {f"{PK}@8:{item['stopped_at_ms']}"}
    # re-applied as of its date, the journal untouched: a new date, or a new journal write (last-writer-wins
    # on the write's time), would supersede a later event's entry still on its way from the other region
    assert item["desired_at_ms"] == journal["journal_ms"]
    assert observer.items(observer.config.connections_table)["CTL#c1/"] == journal
    assert observer.notifications() == [{"pk": PK}]
    assert [(e["kind"], e["pk"], e["status"]) for e in observer.history() if e["type"] == "control.reapply"] == [
        ("STOP", PK, 200)]
    # the table now agrees with its journal: nothing more to re-apply
    assert await router_module.reapply_journal(router.clients, config, router.history) == (
        200, {"reapplied": 0, "failed": 0})


async def test_a_start_lost_from_the_table_is_re_applied_and_without_the_journal_nothing_is_written(
    router: Router, observer: Observer
) -> None:
    assert (await router.send(start(), profile="hardened"))[0] == 200
    assert "CTL#c1/" not in observer.items(observer.config.connections_table)  # off by default: one region
    assert (await router_module.reapply_journal(router.clients, router.config, router.history))[0] == 409

    assert (await router.send(start("c2", "ws://127.0.0.1:9000/streams/c2"), **JOURNAL))[0] == 200
    observer.ddb.delete_item(TableName=observer.config.connections_table, Key={"pk": {"S": conn_pk("c2")}})
    config = router.config.with_changes(**JOURNAL)

    assert await router_module.reapply_journal(router.clients, config, router.history) == (
        200, {"reapplied": 1, "failed": 0})
    item = observer.connection(conn_pk("c2"))
    assert (item["desired_state"], item["ws_url"]) == ("STARTED", "ws://127.0.0.1:9000/streams/c2")


async def test_lambda_direct_invocation_re_applies_the_journal(
    env: dict[str, str], observer: Observer, monkeypatch: pytest.MonkeyPatch, lambda_router: LambdaRouter
) -> None:
    monkeypatch.setenv(ENV_VARS["control_journal"], "on")
    assert (await invoke(lambda_router, v2_event(json.dumps(start()))))[0] == 200
    observer.ddb.delete_item(TableName=observer.config.connections_table, Key={"pk": {"S": PK}})

    assert await invoke(lambda_router, {"wsfleet": "reapply-control"}) == (200, {"reapplied": 1, "failed": 0})
    assert observer.connection()["desired_state"] == "STARTED"
