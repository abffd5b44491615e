"""Tests of harness.router_client and ``wsfleet start/stop`` against an API that requires SigV4: a local
server checks every request's signature with its own implementation of the algorithm (not botocore's), and
answers a bad one as API Gateway does (403, ``{"message": ...}``)."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import quote, urlsplit

import pytest

from harness.cli import main
from harness.cluster import http_json
from harness.router_client import SigningError, error_text, execute_api_region, signer_for
from tests.harness.threaded import serving

KEY_ID, SECRET, REGION = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "eu-west-1"


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signature_valid(method: str, path: str, headers: dict[str, str], body: bytes, secret: str = SECRET) -> bool:
    """SigV4 as the AWS documentation defines it, for a request without a query string."""
    auth = headers.get("authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return False
    fields = dict(part.strip().split("=", 1) for part in auth[len("AWS4-HMAC-SHA256 "):].split(","))
    key_id, day, region, service, terminal = fields["Credential"].split("/")
    signed = fields["SignedHeaders"].split(";")
    if key_id != KEY_ID or service != "execute-api" or terminal != "aws4_request" or "host" not in signed:
        return False
    canonical_headers = "".join(f"{name}:{' '.join(headers[name].split())}\n" for name in signed)
    canonical = "\n".join([method, quote(path, safe="/-_.~"), "", canonical_headers, ";".join(signed),
                           hashlib.sha256(body).hexdigest()])
    stamp = headers["x-amz-date"]
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret}".encode(), day), region), service), "aws4_request")
    return hmac.compare_digest(hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest(), fields["Signature"])


class SignedApi(BaseHTTPRequestHandler):
    """Answers 200 with the event to a request signed with ``KEY_ID``/``SECRET``, else 403 as API Gateway."""

    received: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        headers = {name.lower(): value for name, value in self.headers.items()}
        valid = signature_valid("POST", urlsplit(self.path).path, headers, body)
        self.received.append({"path": self.path, "headers": headers, "valid": valid})
        status, answer = (200, json.loads(body)) if valid else (403, {"message": "The request signature we "
                                                                              "calculated does not match"})
        raw = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[str]:
    SignedApi.received = []
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), SignedApi)) as address:
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
    assert http_json("POST", f"{api}/events", EVENT)[0] == 403
    [signed, unsigned] = SignedApi.received
    assert signed["valid"] and f"/{REGION}/execute-api/" in signed["headers"]["authorization"]
    assert not unsigned["valid"]
    # the checker can fail: the same signature over another body, or under another secret, is refused
    headers = signer.headers("POST", f"{api}/events", json.dumps(EVENT).encode(), {})
    lowered = {name.lower(): value for name, value in headers.items()}
    lowered["host"] = urlsplit(api).netloc
    assert signature_valid("POST", "/events", lowered, json.dumps(EVENT).encode())
    assert not signature_valid("POST", "/events", lowered, json.dumps({**EVENT, "connection_id": "c2"}).encode())
    assert not signature_valid("POST", "/events", lowered, json.dumps(EVENT).encode(), secret="other")


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
    assert "router answered 403: The request signature we calculated does not match" in err
    assert main(["stop", "c1", "--router", "https://api.example.com", "--sign"]) == 2
    assert "give --region" in capsys.readouterr().err
