"""Conformance of the embedded Toxiproxy server's HTTP API: raw HTTP (status codes, JSON shapes, error
bodies) and the real ``toxiproxy-python`` client driving it."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from json import dumps
from pathlib import Path
from typing import Any

import pytest
import toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from harness import http_client
from harness.faults.network import start_embedded_toxiproxy

# Proxies point at a closed port: the API does not care whether the upstream answers.
UPSTREAM = "127.0.0.1:1"


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url, stop = start_embedded_toxiproxy(tmp_path_factory.mktemp("toxiproxy"), seed=1)
    yield url
    stop()


@pytest.fixture
def api(server_url: str) -> Iterator[Any]:
    """A session against the server (``json``: a body to encode, ``data``: raw bytes), with every proxy deleted
    after the test."""
    session = http_client.Session(timeout_s=5)

    def call(method: str, path: str, json: Any = None, data: bytes | None = None,
             headers: dict[str, str] | None = None) -> http_client.Answer:
        body = data if data is not None else None if json is None else dumps(json).encode()
        return session.request(method, server_url + path, body=body, headers=headers)

    yield call
    for name in call("GET", "/proxies").json():
        call("DELETE", f"/proxies/{name}")
    session.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def create(api: Any, name: str = "db", **fields: Any) -> dict[str, Any]:
    response = api("POST", "/proxies", json={"name": name, "upstream": UPSTREAM, **fields})
    assert response.status == 201, response.text
    return dict(response.json())


def assert_error(response: http_client.Answer, status: int, message: str) -> None:
    assert response.status == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {"error": message, "status": status}


def test_version(api: Any) -> None:
    response = api("GET", "/version")
    assert response.status == 200
    assert response.json()["version"].startswith("2.")


def test_create_proxy_binds_a_free_port_and_shows_it(api: Any) -> None:
    proxy = create(api, listen="127.0.0.1:0")
    assert proxy["name"] == "db" and proxy["upstream"] == UPSTREAM
    assert proxy["enabled"] is True and proxy["toxics"] == []
    host, port = proxy["listen"].rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    with socket.create_connection(("127.0.0.1", int(port)), timeout=2):
        pass  # it listens


def test_create_proxy_on_a_given_port_and_disabled(api: Any) -> None:
    port = free_port()
    proxy = create(api, listen=f"127.0.0.1:{port}", enabled=False)
    assert proxy["listen"] == f"127.0.0.1:{port}" and proxy["enabled"] is False
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)


def test_hostnames_are_resolved_to_one_address(api: Any) -> None:
    assert create(api, listen="localhost:0")["listen"].startswith("127.0.0.1:")


def test_changing_listen_moves_the_listener(api: Any) -> None:
    old_port = int(create(api)["listen"].rsplit(":", 1)[1])
    new_port = free_port()
    moved = api("PATCH", "/proxies/db", json={"listen": f"127.0.0.1:{new_port}"}).json()
    assert moved["listen"] == f"127.0.0.1:{new_port}" and moved["enabled"] is True
    with socket.create_connection(("127.0.0.1", new_port), timeout=2):
        pass
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", old_port), timeout=2)


def test_list_get_update_delete_proxy(api: Any) -> None:
    created = create(api)
    listing = api("GET", "/proxies").json()
    assert listing == {"db": created}
    assert api("GET", "/proxies/db").json() == created

    for method in ("POST", "PATCH"):
        response = api(method, "/proxies/db", json={"enabled": False})
        assert response.status == 200
        assert response.json() == {**created, "enabled": False}
        response = api(method, "/proxies/db", json={"enabled": True})
        assert response.json() == created  # listens again on the same address

    moved = api("PATCH", "/proxies/db", json={"upstream": "127.0.0.1:2"}).json()
    assert moved["upstream"] == "127.0.0.1:2" and moved["enabled"] is True

    response = api("DELETE", "/proxies/db")
    assert response.status == 204 and response.body == b""
    assert api("GET", "/proxies").json() == {}


def test_proxy_errors(api: Any) -> None:
    create(api)
    assert_error(
        api("POST", "/proxies", json={"name": "db", "upstream": UPSTREAM}), 409, "proxy already exists"
    )
    assert_error(api("GET", "/proxies/nope"), 404, "proxy not found")
    assert_error(api("PATCH", "/proxies/nope", json={}), 404, "proxy not found")
    assert_error(api("DELETE", "/proxies/nope"), 404, "proxy not found")
    assert_error(api("POST", "/proxies", json={"upstream": UPSTREAM}), 400, "missing required field: name")
    assert_error(api("POST", "/proxies", json={"name": "x"}), 400, "missing required field: upstream")
    response = api("POST", "/proxies", data=b"{not json")
    assert response.status == 400 and response.json()["error"].startswith("bad request body: ")
    assert_error(api("POST", "/proxies", data=b""), 400, "bad request body: EOF")
    response = api("POST", "/proxies", json={"name": "x", "upstream": UPSTREAM, "enabled": "yes"})
    assert response.status == 400 and "enabled" in response.json()["error"]
    response = api("POST", "/proxies", json={"name": "x", "upstream": "no-port"})
    assert response.status == 400 and "upstream" in response.json()["error"]


def test_listen_address_in_use_is_refused_and_nothing_is_created(api: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        response = api(
            "POST", "/proxies", json={"name": "x", "upstream": UPSTREAM, "listen": f"127.0.0.1:{port}"}
        )
    assert response.status == 500 and response.json()["status"] == 500
    assert "x" not in api("GET", "/proxies").json()


def test_toxics_crud(api: Any) -> None:
    create(api)
    response = api("POST", "/proxies/db/toxics", json={"type": "latency", "attributes": {"latency": 100}})
    assert response.status == 200
    latency = response.json()
    assert latency == {
        "attributes": {"latency": 100, "jitter": 0},
        "name": "latency_downstream",
        "type": "latency",
        "stream": "downstream",
        "toxicity": 1.0,
    }
    body = {
        "type": "timeout",
        "name": "cut",
        "stream": "upstream",
        "toxicity": 0.5,
        "attributes": {"timeout": 0},
    }
    cut = api("POST", "/proxies/db/toxics", json=body).json()
    assert cut["name"] == "cut" and cut["stream"] == "upstream" and cut["toxicity"] == 0.5

    # Listed upstream first, then downstream, as Toxiproxy does; the proxy shows them too.
    assert api("GET", "/proxies/db/toxics").json() == [cut, latency]
    assert api("GET", "/proxies/db").json()["toxics"] == [cut, latency]
    assert api("GET", "/proxies/db/toxics/cut").json() == cut

    # Updates merge attributes; name, type and stream stay.
    updated = api("PATCH", "/proxies/db/toxics/latency_downstream", json={"attributes": {"jitter": 5}}).json()
    assert updated["attributes"] == {"latency": 100, "jitter": 5} and updated["toxicity"] == 1.0
    updated = api("POST", "/proxies/db/toxics/cut", json={"toxicity": 0.25, "type": "latency"}).json()
    assert updated == {**cut, "toxicity": 0.25}

    response = api("DELETE", "/proxies/db/toxics/cut")
    assert response.status == 204
    assert [toxic["name"] for toxic in api("GET", "/proxies/db/toxics").json()] == ["latency_downstream"]


@pytest.mark.parametrize(
    ("toxic_type", "attributes"),
    [
        ("latency", {"latency": 10, "jitter": 2}),
        ("bandwidth", {"rate": 100}),
        ("slow_close", {"delay": 10}),
        ("timeout", {"timeout": 10}),
        ("reset_peer", {"timeout": 10}),
        ("slicer", {"average_size": 64, "size_variation": 32, "delay": 10}),
        ("limit_data", {"bytes": 10}),
    ],
)
def test_every_toxic_type_shows_its_attributes(api: Any, toxic_type: str, attributes: dict[str, int]) -> None:
    create(api)
    response = api("POST", "/proxies/db/toxics", json={"type": toxic_type, "attributes": attributes})
    assert response.status == 200, response.text
    assert response.json()["attributes"] == attributes


def test_toxic_errors(api: Any) -> None:
    create(api)
    api("POST", "/proxies/db/toxics", json={"type": "latency"})
    toxics = "/proxies/db/toxics"
    assert_error(api("POST", toxics, json={"type": "latency"}), 409, "toxic already exists")
    assert_error(api("POST", toxics, json={"type": "nope"}), 400, "invalid toxic type")
    assert_error(
        api("POST", toxics, json={"type": "latency", "stream": "sideways"}),
        400,
        "stream was invalid, can be either upstream or downstream",
    )
    response = api("POST", toxics, json={"type": "latency", "name": "x", "attributes": {"latency": "slow"}})
    assert response.status == 400 and "latency" in response.json()["error"]
    response = api("POST", toxics, json={"type": "latency", "name": "x", "toxicity": 2})
    assert response.status == 400 and "toxicity" in response.json()["error"]
    response = api("POST", toxics, json={"type": "slicer", "attributes": {"average_size": 0}})
    assert response.status == 400 and "average_size" in response.json()["error"]
    assert_error(api("GET", f"{toxics}/nope"), 404, "toxic not found")
    assert_error(api("PATCH", f"{toxics}/nope", json={}), 404, "toxic not found")
    assert_error(api("DELETE", f"{toxics}/nope"), 404, "toxic not found")
    assert_error(api("GET", "/proxies/nope/toxics"), 404, "proxy not found")
    assert_error(api("POST", "/proxies/nope/toxics", json={"type": "latency"}), 404, "proxy not found")


def test_populate_creates_keeps_and_replaces(api: Any) -> None:
    port = free_port()
    wanted: list[dict[str, Any]] = [
        {"name": "a", "listen": f"127.0.0.1:{port}", "upstream": UPSTREAM},
        {"name": "b", "listen": "127.0.0.1:0", "upstream": UPSTREAM, "enabled": False},
    ]
    response = api("POST", "/populate", json=wanted)
    assert response.status == 201
    first = {proxy["name"]: proxy for proxy in response.json()["proxies"]}
    assert first["a"]["listen"] == f"127.0.0.1:{port}" and first["a"]["enabled"] is True
    assert first["b"]["enabled"] is False

    # Same addresses: kept untouched, toxics and all.  A new upstream replaces the proxy.
    api("POST", "/proxies/a/toxics", json={"type": "latency"})
    wanted[1]["upstream"] = "127.0.0.1:2"
    second = {proxy["name"]: proxy for proxy in api("POST", "/populate", json=wanted).json()["proxies"]}
    assert [toxic["name"] for toxic in second["a"]["toxics"]] == ["latency_downstream"]
    assert second["b"]["upstream"] == "127.0.0.1:2"

    response = api("POST", "/populate", json=[{"name": "c"}])
    assert response.status == 400
    assert response.json()["error"] == "missing required field: upstream at proxy 1"
    assert "c" not in api("GET", "/proxies").json()
    assert api("POST", "/populate", json={"name": "c"}).status == 400


def test_reset_enables_proxies_and_removes_toxics(api: Any) -> None:
    create(api, name="a", enabled=False)
    create(api, name="b")
    api("POST", "/proxies/b/toxics", json={"type": "latency"})
    response = api("POST", "/reset")
    assert response.status == 204
    proxies = api("GET", "/proxies").json()
    assert all(proxy["enabled"] and proxy["toxics"] == [] for proxy in proxies.values())


def test_browsers_are_refused_and_unknown_routes_are_404(api: Any) -> None:
    assert api("GET", "/proxies", headers={"User-Agent": "Mozilla/5.0"}).status == 403
    assert api("GET", "/nope").status == 404
    assert api("PUT", "/proxies").status == 405


@pytest.fixture
def python_client(server_url: str, api: Any) -> Iterator[toxiproxy.Toxiproxy]:
    """toxiproxy-python's client: it keeps the server address on a class, so restore it afterwards."""
    saved = (APIConsumer.host, APIConsumer.port)
    host, port = server_url.removeprefix("http://").rsplit(":", 1)
    server = toxiproxy.Toxiproxy()
    server.update_api_consumer(host, int(port))
    yield server
    APIConsumer.host, APIConsumer.port = saved


def test_toxiproxy_python_client(python_client: toxiproxy.Toxiproxy, tmp_path: Path) -> None:
    server = python_client
    assert server.running()
    assert b"2." in server.version()

    proxy = server.create(upstream=UPSTREAM, name="redis")
    assert proxy.name == "redis" and proxy.enabled is True and proxy.listen.startswith("127.0.0.1:")
    with pytest.raises(ProxyExists):
        server.create(upstream=UPSTREAM, name="redis")
    assert set(server.proxies()) == {"redis"}
    assert server.get_proxy("redis").listen == proxy.listen

    proxy.add_toxic(type="latency", attributes={"latency": 1000})
    proxy.add_toxic(type="timeout", stream="upstream", name="cut", toxicity=0.5, attributes={"timeout": 0})
    toxics = proxy.toxics()
    assert set(toxics) == {"latency_downstream", "cut"}
    assert toxics["latency_downstream"].attributes == {"latency": 1000, "jitter": 0}
    assert toxics["cut"].stream == "upstream" and toxics["cut"].toxicity == 0.5
    with pytest.raises(ProxyExists):
        proxy.add_toxic(type="latency")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="nope")
    assert proxy.destroy_toxic("cut")
    with pytest.raises(NotFound):
        proxy.destroy_toxic("cut")

    with proxy.down():
        assert server.get_proxy("redis").enabled is False
    assert server.get_proxy("redis").enabled is True

    assert server.reset()
    assert proxy.toxics() == {}

    populated = server.populate([{"name": "pg", "upstream": UPSTREAM, "listen": "127.0.0.1:0"}])
    assert [p.name for p in populated] == ["pg"]
    assert set(server.proxies()) == {"redis", "pg"}

    server.destroy_all()
    assert server.proxies() == {}
