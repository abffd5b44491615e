"""harness.http_client: no redirect is followed (a 3xx is an error naming where it pointed), no answer is
one error naming the call, and every other status is an answer for the caller to judge."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from harness import http_client
from tests.harness.threaded import serving

calls: list[tuple[str, str]] = []


class Server(BaseHTTPRequestHandler):
    """``/status/N`` answers N (a 3xx pointing at ``/landing``); ``/landing`` answers 200; each call is recorded."""

    def _handle(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        calls.append((self.command, self.path))
        status = int(self.path.rsplit("/", 1)[1]) if self.path.startswith("/status/") else 200
        body = b'{"ok": true}'
        self.send_response(status)
        if 300 <= status < 400:
            self.send_header("Location", "/landing")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _handle

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    calls.clear()
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Server)) as address:
        yield f"http://{address}"


@pytest.mark.parametrize("status", [300, 301, 302, 303, 307, 308])
def test_a_redirect_is_an_error_naming_the_location_and_is_not_followed(server: str, status: int) -> None:
    with pytest.raises(http_client.Redirected, match=f"answered {status}, a redirect to /landing") as caught:
        http_client.request("POST", f"{server}/status/{status}", timeout_s=5, body=b"{}")
    assert (caught.value.status, caught.value.location) == (status, "/landing")
    with http_client.Session(timeout_s=5) as session, pytest.raises(http_client.Redirected):
        session.request("GET", f"{server}/status/{status}")
    with pytest.raises(http_client.Redirected):
        asyncio.run(http_client.request_async("GET", f"{server}/status/{status}", timeout_s=5))
    assert ("GET", "/landing") not in calls and len(calls) == 3


@pytest.mark.parametrize("status", [200, 404, 503])
def test_any_other_status_is_an_answer(server: str, status: int) -> None:
    answer = http_client.request("GET", f"{server}/status/{status}", timeout_s=5)
    assert answer.status == status
    assert answer.json() == {"ok": True}


def test_no_answer_names_the_call() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/x"
    with pytest.raises(http_client.NoAnswer, match=f"GET {url}: no answer"):
        http_client.request("GET", url, timeout_s=5)


def test_a_server_that_never_answers_times_out() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/x"
        with pytest.raises(http_client.NoAnswer, match="no answer"):
            http_client.request("GET", url, timeout_s=0.2)
