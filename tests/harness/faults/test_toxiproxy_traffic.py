"""Real TCP traffic through the embedded Toxiproxy server to an echo server on loopback: every toxic, live
toxic changes on open connections, disabling proxies, and seeded toxicity."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.faults.network import Proxy, ToxiproxyClient, start_embedded_toxiproxy
from tests.harness.threaded import serving

SEED = 1234


class EchoHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        try:
            while data := sock.recv(65536):
                sock.sendall(data)
        except OSError:
            pass


class EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture(scope="module")
def echo_address() -> Iterator[str]:
    with serving(EchoServer(("127.0.0.1", 0), EchoHandler)) as address:
        yield address


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url, stop = start_embedded_toxiproxy(tmp_path_factory.mktemp("toxiproxy"), seed=SEED)
    yield url
    stop()


@pytest.fixture
def client(server_url: str) -> Iterator[ToxiproxyClient]:
    client = ToxiproxyClient(server_url)
    yield client
    for name in client.get_proxies():
        client.delete_proxy(name)
    client.close()


@pytest.fixture
def proxy(client: ToxiproxyClient, echo_address: str) -> Proxy:
    return client.create_proxy("echo", echo_address)


def connect(proxy: Proxy, timeout_s: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout_s)


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    received = b""
    while len(received) < size:
        data = sock.recv(size - len(received))
        if not data:
            raise EOFError(f"closed after {len(received)} of {size} bytes")
        received += data
    return received


def roundtrip(sock: socket.socket, data: bytes = b"ping") -> float:
    """Seconds for ``data`` to come back through the proxy."""
    start = time.monotonic()
    sock.sendall(data)
    assert recv_exactly(sock, len(data)) == data
    return time.monotonic() - start


def read_until_closed(sock: socket.socket) -> bytes:
    received = b""
    while data := sock.recv(65536):
        received += data
    return received


def assert_closed_within(sock: socket.socket, seconds: float) -> None:
    """The proxy closes (FIN or RST) the connection within ``seconds``, with no data."""
    sock.settimeout(seconds)
    with contextlib.suppress(ConnectionResetError):
        assert sock.recv(100) == b""


def test_plain_traffic_is_copied_both_ways(proxy: Proxy) -> None:
    with connect(proxy) as sock:
        assert roundtrip(sock) < 0.5
        payload = bytes(range(256)) * 4096  # 1 MiB
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        assert recv_exactly(sock, len(payload)) == payload
        sender.join()
        started = time.monotonic()
        for _ in range(200):
            roundtrip(sock, b"x" * 100)
        assert time.monotonic() - started < 5.0


def test_latency_delays_each_direction(client: ToxiproxyClient, proxy: Proxy) -> None:
    client.add_toxic("echo", "latency", attributes={"latency": 300})
    with connect(proxy) as sock:
        assert 0.28 <= roundtrip(sock) < 1.3
    client.add_toxic("echo", "latency", stream="upstream", attributes={"latency": 200})
    with connect(proxy) as sock:
        assert 0.48 <= roundtrip(sock) < 1.5


def test_latency_is_pipelined_not_accumulated(client: ToxiproxyClient, proxy: Proxy) -> None:
    client.add_toxic("echo", "latency", attributes={"latency": 300})
    with connect(proxy) as sock:
        started = time.monotonic()
        for index in range(5):
            sock.sendall(b"%d" % index)
            time.sleep(0.05)  # pacing, so each message is its own chunk
        assert recv_exactly(sock, 5) == b"01234"
        assert 0.5 <= time.monotonic() - started < 1.2  # the last one sent at ~0.2 s, back at ~0.5 s


def test_toxics_added_updated_and_removed_on_a_live_connection(client: ToxiproxyClient, proxy: Proxy) -> None:
    with connect(proxy) as sock:
        assert roundtrip(sock) < 0.4
        client.add_toxic("echo", "latency", attributes={"latency": 500})
        assert 0.48 <= roundtrip(sock) < 1.5
        client.update_toxic("echo", "latency_downstream", attributes={"latency": 800})
        assert 0.78 <= roundtrip(sock) < 1.8
        client.remove_toxic("echo", "latency_downstream")
        assert roundtrip(sock) < 0.4


def test_timeout_zero_black_holes_a_live_connection_until_removed(
    client: ToxiproxyClient, proxy: Proxy
) -> None:
    with connect(proxy) as sock:
        assert roundtrip(sock) < 0.5
        client.add_toxic("echo", "timeout", stream="upstream", attributes={"timeout": 0})
        client.add_toxic("echo", "timeout", stream="downstream", attributes={"timeout": 0})
        sock.sendall(b"lost")
        sock.settimeout(0.5)  # measuring an absence: nothing may arrive, and the connection stays open
        with pytest.raises(TimeoutError):
            sock.recv(100)
        client.remove_toxic("echo", "timeout_upstream")
        client.remove_toxic("echo", "timeout_downstream")
        # As Toxiproxy: the bytes it dropped are gone, so the connection it held is closed on removal...
        assert_closed_within(sock, 2.0)
    # ...and new connections flow again.
    with connect(proxy) as sock:
        assert roundtrip(sock) < 0.5


def test_timeout_closes_after_its_delay_dropping_data(client: ToxiproxyClient, proxy: Proxy) -> None:
    client.add_toxic("echo", "timeout", attributes={"timeout": 300})
    with connect(proxy) as sock:
        started = time.monotonic()
        sock.sendall(b"dropped")
        assert_closed_within(sock, 3.0)
        assert 0.25 <= time.monotonic() - started < 2.0


def test_reset_peer_resets_the_connection(client: ToxiproxyClient, proxy: Proxy) -> None:
    client.add_toxic("echo", "reset_peer", attributes={"timeout": 0})
    with connect(proxy) as sock:
        sock.sendall(b"hello")
        with pytest.raises(ConnectionResetError):
            read_until_closed(sock)
    client.update_toxic("echo", "reset_peer_downstream", attributes={"timeout": 300})
    with connect(proxy) as sock:
        started = time.monotonic()
        sock.sendall(b"hello")
        with pytest.raises(ConnectionResetError):
            read_until_closed(sock)
        assert time.monotonic() - started >= 0.25


def test_limit_data_closes_after_n_bytes(client: ToxiproxyClient, proxy: Proxy) -> None:
    client.add_toxic("echo", "limit_data", attributes={"bytes": 10})
    with connect(proxy) as sock:
        sock.sendall(b"0123456789abcdefghij")
        assert read_until_closed(sock) == b"0123456789"


def test_bandwidth_limits_the_rate(client: ToxiproxyClient, proxy: Proxy) -> None:
    client.add_toxic("echo", "bandwidth", attributes={"rate": 50})  # 50 KB/s
    with connect(proxy) as sock:
        payload = b"b" * 20_000
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        started = time.monotonic()
        sender.start()
        assert recv_exactly(sock, len(payload)) == payload
        sender.join()
        assert 0.35 <= time.monotonic() - started < 2.0


def test_slicer_slices_and_delays_without_changing_bytes(client: ToxiproxyClient, proxy: Proxy) -> None:
    attributes = {"average_size": 100, "size_variation": 20, "delay": 20_000}  # ~10 pieces, 20 ms apart
    client.add_toxic("echo", "slicer", attributes=attributes)
    with connect(proxy) as sock:
        payload = bytes(range(250)) * 4
        assert 0.15 <= roundtrip(sock, payload) < 2.0


def test_slow_close_holds_the_close(client: ToxiproxyClient, proxy: Proxy) -> None:
    client.add_toxic("echo", "slow_close", attributes={"delay": 400})
    with connect(proxy) as sock:
        assert roundtrip(sock) < 0.5
        started = time.monotonic()
        sock.shutdown(socket.SHUT_WR)  # the proxy closes the upstream; the echo server closes back
        assert read_until_closed(sock) == b""
        assert 0.35 <= time.monotonic() - started < 2.0


def test_disabling_closes_live_connections_and_refuses_new_ones(
    client: ToxiproxyClient, proxy: Proxy
) -> None:
    with connect(proxy) as sock:
        assert roundtrip(sock) < 0.5
        assert client.update_proxy("echo", enabled=False).enabled is False
        assert_closed_within(sock, 2.0)
    with pytest.raises(ConnectionRefusedError):
        connect(proxy)
    assert client.update_proxy("echo", enabled=True).listen == proxy.listen
    with connect(proxy) as sock:
        assert roundtrip(sock) < 0.5


def test_deleting_closes_live_connections(client: ToxiproxyClient, proxy: Proxy) -> None:
    with connect(proxy) as sock:
        assert roundtrip(sock) < 0.5
        client.delete_proxy("echo")
        assert_closed_within(sock, 2.0)
    with pytest.raises(ConnectionRefusedError):
        connect(proxy)


def test_reset_heals_a_partition_for_new_connections(client: ToxiproxyClient, proxy: Proxy) -> None:
    client.add_toxic("echo", "timeout", attributes={"timeout": 0})
    client.update_proxy("echo", enabled=False)
    client.reset()
    with connect(proxy) as sock:
        assert roundtrip(sock) < 0.5


def toxicity_pattern(client: ToxiproxyClient, echo_address: str, connections: int = 16) -> list[bool]:
    """Which of ``connections`` fresh connections a 50% limit_data toxic hits (1 byte of 5 comes back)."""
    proxy = client.create_proxy("coin", echo_address)
    client.add_toxic("coin", "limit_data", toxicity=0.5, attributes={"bytes": 1})
    pattern = []
    for _ in range(connections):
        with connect(proxy) as sock:
            sock.sendall(b"hello")
            received = b""
            while len(received) < 5 and (data := sock.recv(5 - len(received))):
                received += data
            pattern.append(received == b"h")
    client.delete_proxy("coin")
    return pattern


def test_seeded_toxicity_is_reproducible(client: ToxiproxyClient, echo_address: str, tmp_path: Path) -> None:
    first = toxicity_pattern(client, echo_address)
    assert True in first and False in first
    assert toxicity_pattern(client, echo_address) == first  # the same proxy made again: same draws
    url, stop = start_embedded_toxiproxy(tmp_path, seed=SEED)
    other = ToxiproxyClient(url)
    try:
        assert toxicity_pattern(other, echo_address) == first  # another server, same seed: same draws
    finally:
        other.close()
        stop()
