"""Tests of harness.router_client and ``wsfleet start/stop`` against an API that requires SigV4: the API
Gateway stand-in (``harness.backends.apigw_local``) checks every request's signature with its own
implementation of the algorithm (not botocore's), answers a bad one as API Gateway does (403,
``{"message": ...}``), and passes a good one to the router (here, one that echoes the event)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

from harness.backends.apigw_local import api_gateway, forward_to, signature_problem
from harness.cli import main
from harness.cluster import ClusterError, http_json
from harness.router_client import SigningError, error_text, execute_api_region, signer_for
from tests.harness.threaded import serving

KEY_ID, SECRET, REGION = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "eu-west-1"


def signature_valid(method: str, path: str, headers: dict[str, str], body: bytes, secret: str = SECRET) -> bool:
    return signature_problem(method, path, headers, body, {KEY_ID: secret}) is None


def echo(method: str, path: str, body: bytes) -> tuple[int, bytes]:
    """The router behind the stand-in: answers with the event it got."""
    received.append(json.loads(body))
    return 200, body


received: list[dict[str, Any]] = []


@pytest.fixture
def api() -> Iterator[str]:
    received.clear()
    with serving(api_gateway(echo, {KEY_ID: SECRET})) as address:
        yield f"http://{address}"


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)


EVENT = {"event_type": "STOP", "connection_id": "c1"}


def test_a_signed_request_passes_the_check_and_an_unsigned_or_altered_one_does_not(api: str, credentials: None) -> None:
    signer = signer_for(api, sign=True, region=REGION)
    assert signer is not None
    assert http_json("POST", f"{api}/events", EVENT, signer=signer) == (200, EVENT)
    assert http_json("POST", f"{api}/events", EVENT) == (403, {"message": "Missing Authentication Token"})
    assert http_json("POST", f"{api}/events?x=1", EVENT, signer=signer)[0] == 403
    assert received == [EVENT]  # only the signed request reached the router
    # the checker can fail: the same signature over another body, or under another secret, is refused
    headers = signer.headers("POST", f"{api}/events", json.dumps(EVENT).encode(), {})
    lowered = {name.lower(): value for name, value in headers.items()}
    lowered["host"] = urlsplit(api).netloc
    assert signature_valid("POST", "/events", lowered, json.dumps(EVENT).encode())
    assert not signature_valid("POST", "/events", lowered, json.dumps({**EVENT, "connection_id": "c2"}).encode())
    assert not signature_valid("POST", "/events", lowered, json.dumps(EVENT).encode(), secret="other")
    assert signature_problem("POST", "/events", lowered, json.dumps(EVENT).encode(), {KEY_ID: SECRET},
                             now_s=time.time() + 301) == "Signature expired"


@pytest.mark.parametrize(("url", "region"), [
    ("https://abc123.execute-api.eu-west-1.amazonaws.com/prod", "eu-west-1"),
    ("https://ABC123.execute-api.us-east-2.amazonaws.com", "us-east-2"),
    ("http://127.0.0.1:8080", None),
    ("https://api.example.com/prod", None),
    ("https://abc.execute-api.eu-west-1.amazonaws.com.evil.test/", None),
])
def test_the_region_is_read_only_from_an_api_gateway_host(url: str, region: str | None) -> None:
    assert execute_api_region(url) == region


def test_an_api_gateway_url_is_signed_by_default_and_a_local_one_is_not(credentials: None) -> None:
    signer = signer_for("https://abc123.execute-api.eu-west-1.amazonaws.com/prod")
    assert signer is not None and signer.region == "eu-west-1"
    assert signer_for("http://127.0.0.1:8080") is None
    assert signer_for("https://abc123.execute-api.eu-west-1.amazonaws.com/prod", sign=False) is None


def test_signing_without_a_region_or_credentials_says_what_to_give(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Any) -> None:
    with pytest.raises(SigningError, match="give --region"):
        signer_for("https://api.example.com/prod", sign=True)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SigningError, match="no AWS credentials found"):
        signer_for("https://api.example.com/prod", sign=True, region=REGION)
    with pytest.raises(SigningError, match="missing"):
        signer_for("https://api.example.com/prod", sign=True, region=REGION, profile="missing")


@pytest.mark.parametrize(("payload", "text"), [
    ({"error": "connection_id is missing"}, "connection_id is missing"),
    ({"message": "Missing Authentication Token"}, "Missing Authentication Token"),
    ({"Message": "User is not authorized"}, "User is not authorized"),
    (None, "no reason given"),
    ("Bad Gateway", "Bad Gateway"),
])
def test_the_error_text_reads_the_router_or_api_gateway(payload: Any, text: str) -> None:
    assert error_text(payload) == text


def test_the_cli_signs_its_event_and_prints_api_gateways_refusal(api: str, credentials: None,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stop", "c1", "--router", api, "--sign", "--region", REGION]) == 0
    assert json.loads(capsys.readouterr().out) == EVENT
    assert main(["stop", "c1", "--router", api]) == 2  # not signed: refused
    err = capsys.readouterr().err
    assert "router answered 403: Missing Authentication Token" in err
    assert main(["stop", "c1", "--router", "https://api.example.com", "--sign"]) == 2
    assert "give --region" in capsys.readouterr().err



class Router(BaseHTTPRequestHandler):
    """A router answering 202 with the event it got."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(202)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_the_stand_in_forwards_a_signed_request_to_the_router_and_says_502_when_it_is_down(
        credentials: None) -> None:
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Router)) as router, \
            serving(api_gateway(forward_to(f"http://{router}"), {KEY_ID: SECRET})) as api:
        signer = signer_for(f"http://{api}", sign=True, region=REGION)
        assert http_json("POST", f"http://{api}/events", EVENT, signer=signer) == (202, EVENT)
    with serving(api_gateway(forward_to("http://127.0.0.1:9"), {KEY_ID: SECRET})) as down:
        signer = signer_for(f"http://{down}", sign=True, region=REGION)
        assert http_json("POST", f"http://{down}/events", EVENT, signer=signer)[0] == 502


reached_elsewhere: list[dict[str, str]] = []


class Elsewhere(BaseHTTPRequestHandler):
    """Another host: answers 200 to anything and records the headers that reached it."""

    def _handle(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        reached_elsewhere.append({name.lower(): value for name, value in self.headers.items()})
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = _handle

    def log_message(self, *args: Any) -> None:
        pass


def redirecting_to(code: int, location: str) -> type[BaseHTTPRequestHandler]:
    class Redirecting(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(code)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = _handle

        def log_message(self, *args: Any) -> None:
            pass

    return Redirecting


@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_call_answered_with_a_redirect_is_an_error_naming_the_location_and_nothing_goes_there(
        code: int, signed: bool, credentials: None) -> None:
    reached_elsewhere.clear()
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)) as elsewhere:
        location = f"http://{elsewhere}/collect"
        with serving(ThreadingHTTPServer(("127.0.0.1", 0), redirecting_to(code, location))) as router:
            signer = signer_for(f"http://{router}", sign=True, region=REGION) if signed else None
            with pytest.raises(ClusterError, match=f"{code}.*{location}"):
                http_json("POST", f"http://{router}/events", EVENT, signer=signer)
    assert reached_elsewhere == []  # neither the call nor its Authorization / X-Amz-* headers went anywhere else
