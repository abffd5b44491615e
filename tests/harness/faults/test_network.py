"""The harness's side of the network fault plane: ``ToxiproxyClient`` and ``ensure_toxiproxy``."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest

from harness.faults.network import (
    TOXIPROXY_URL_ENV,
    Proxy,
    Toxic,
    ToxiproxyClient,
    ToxiproxyError,
    ensure_toxiproxy,
)

UPSTREAM = "127.0.0.1:1"


def embedded_servers() -> list[psutil.Process]:
    """Our toxiproxy server processes among this test process's descendants."""
    found = []
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if "harness.faults.toxiproxy" in " ".join(child.cmdline()) and child.status() != "zombie":
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.fixture
def started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ToxiproxyClient]:
    """A client of an embedded server that ensure_toxiproxy started (no TOXIPROXY_URL)."""
    monkeypatch.delenv(TOXIPROXY_URL_ENV, raising=False)
    client, stop = ensure_toxiproxy(tmp_path, seed=3)
    assert stop is not None
    yield client
    stop()


def test_ensure_starts_our_server_and_stop_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOXIPROXY_URL_ENV, raising=False)
    client, stop = ensure_toxiproxy(tmp_path)
    assert stop is not None
    assert client.version().startswith("2.")
    assert client.base_url.startswith("http://127.0.0.1:")
    assert (tmp_path / "logs" / "toxiproxy.log").exists()
    assert len(embedded_servers()) == 1
    stop()
    assert embedded_servers() == []
    with pytest.raises(ToxiproxyError) as raised:
        ToxiproxyClient(client.base_url, timeout_s=2).version()
    assert raised.value.status is None


def test_ensure_uses_a_running_toxiproxy_named_by_the_environment(
    started: ToxiproxyClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started.create_proxy("shared", UPSTREAM)
    monkeypatch.setenv(TOXIPROXY_URL_ENV, started.base_url)
    client, stop = ensure_toxiproxy(tmp_path / "other")
    assert stop is None
    assert set(client.get_proxies()) == {"shared"}
    assert len(embedded_servers()) == 1  # the one from the fixture, nothing new
    client.close()


def test_ensure_fails_clearly_when_the_environment_names_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    monkeypatch.setenv(TOXIPROXY_URL_ENV, f"http://127.0.0.1:{closed_port}")
    with pytest.raises(
        ToxiproxyError, match=f"{TOXIPROXY_URL_ENV}=http://127.0.0.1:{closed_port} is set but"
    ):
        ensure_toxiproxy(tmp_path)


def test_client_typed_methods(started: ToxiproxyClient) -> None:
    client = started
    proxy = client.create_proxy("db", UPSTREAM)
    assert isinstance(proxy, Proxy)
    assert proxy.name == "db" and proxy.upstream == UPSTREAM and proxy.enabled and proxy.toxics == ()
    assert proxy.port > 0 and proxy.listen == f"127.0.0.1:{proxy.port}"
    assert client.get_proxies() == {"db": proxy}
    assert client.get_proxy("db") == proxy

    toxic = client.add_toxic("db", "latency", attributes={"latency": 50})
    assert toxic == Toxic("latency_downstream", "latency", "downstream", 1.0, {"latency": 50, "jitter": 0})
    cut = client.add_toxic("db", "timeout", stream="upstream", name="cut", toxicity=0.5)
    assert cut.name == "cut" and cut.stream == "upstream" and cut.toxicity == 0.5
    assert client.get_toxics("db") == [cut, toxic]
    assert client.get_proxy("db").toxics == (cut, toxic)

    updated = client.update_toxic("db", "latency_downstream", attributes={"jitter": 5}, toxicity=0.75)
    assert updated.attributes == {"latency": 50, "jitter": 5} and updated.toxicity == 0.75
    client.remove_toxic("db", "cut")
    assert [t.name for t in client.get_toxics("db")] == ["latency_downstream"]

    assert client.update_proxy("db", enabled=False).enabled is False
    assert client.update_proxy("db", enabled=True).listen == proxy.listen
    assert client.update_proxy("db", upstream="127.0.0.1:2").upstream == "127.0.0.1:2"

    client.update_proxy("db", enabled=False)
    client.reset()
    reset = client.get_proxy("db")
    assert reset.enabled and reset.toxics == ()

    populated = client.populate(
        [
            {"name": "db", "listen": reset.listen, "upstream": reset.upstream},
            {"name": "queue", "upstream": UPSTREAM, "listen": "127.0.0.1:0"},
        ]
    )
    assert [p.name for p in populated] == ["db", "queue"]

    client.delete_proxy("db")
    assert set(client.get_proxies()) == {"queue"}


def test_client_raises_one_error_type_with_the_status(started: ToxiproxyClient) -> None:
    client = started
    client.create_proxy("db", UPSTREAM)
    cases: list[tuple[Callable[[], object], int, str]] = [
        (lambda: client.get_proxy("nope"), 404, "proxy not found"),
        (lambda: client.create_proxy("db", UPSTREAM), 409, "proxy already exists"),
        (lambda: client.add_toxic("db", "nope"), 400, "invalid toxic type"),
        (lambda: client.remove_toxic("db", "nope"), 404, "toxic not found"),
        (lambda: client.update_proxy("nope", enabled=True), 404, "proxy not found"),
    ]
    for call, status, message in cases:
        with pytest.raises(ToxiproxyError) as raised:
            call()
        assert raised.value.status == status
        assert message in str(raised.value)
