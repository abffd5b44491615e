"""API Gateway's IAM authorisation, locally: a proxy in front of the local router that lets through only the
requests SigV4-signed for ``execute-api`` with a known key, and refuses the rest as API Gateway does (403,
``{"message": ...}``).  With moto standing in for AWS, a local fleet's router is reached through it, so the
harness's signed router calls (``harness.router_client``) are checked end to end.

The signature is checked with our own implementation of the documented algorithm, not botocore's, so a bug
in the signer cannot pass its own check.  A signature older than five minutes is refused, as AWS does.
Requests with a query string are refused: the router takes none.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import quote, urlsplit

from harness import http_client
from harness.quiet_http import QuietHTTPServer

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "execute-api"
MAX_AGE_S = 300
MISSING = "Missing Authentication Token"
MISMATCH = ("The request signature we calculated does not match the signature you provided. Check your AWS "
            "Secret Access Key and signing method.")
EXPIRED = "Signature expired"
Forward = Callable[[str, str, bytes], tuple[int, bytes]]  # method, path, body -> status, body


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signature_problem(method: str, path: str, headers: Mapping[str, str], body: bytes,
                      secrets: Mapping[str, str], now_s: float | None = None) -> str | None:
    """Why API Gateway would refuse this request (``headers`` with lower-case names), or None if it is
    signed for ``execute-api`` by a key of ``secrets`` (key id -> secret) within the last five minutes."""
    auth = headers.get("authorization", "")
    if not auth.startswith(ALGORITHM + " "):
        return MISSING
    try:
        fields = dict(part.strip().split("=", 1) for part in auth[len(ALGORITHM) + 1:].split(","))
        key_id, day, region, service, terminal = fields["Credential"].split("/")
        signed = fields["SignedHeaders"].split(";")
        stamp = headers["x-amz-date"]
        signed_at = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
        canonical_headers = "".join(f"{name}:{' '.join(headers[name].split())}\n" for name in signed)
    except (KeyError, ValueError):
        return MISMATCH
    secret = secrets.get(key_id)
    if secret is None or service != SERVICE or terminal != "aws4_request" or "host" not in signed:
        return MISMATCH
    if abs((time.time() if now_s is None else now_s) - signed_at) > MAX_AGE_S:
        return EXPIRED
    canonical = "\n".join([method, quote(path, safe="/-_.~"), "", canonical_headers, ";".join(signed),
                           hashlib.sha256(body).hexdigest()])
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join([ALGORITHM, stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret}".encode(), day), region), service), "aws4_request")
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return None if hmac.compare_digest(expected, fields.get("Signature", "")) else MISMATCH


def forward_to(url: str) -> Forward:
    """Pass a checked request on to the router at ``url`` (no answer, or a redirect: ``HttpError``)."""
    base = url.rstrip("/")

    def forward(method: str, path: str, body: bytes) -> tuple[int, bytes]:
        answer = http_client.request(method, base + path, timeout_s=30, body=body,
                                     headers={"Content-Type": "application/json"})
        return answer.status, answer.body

    return forward


class Gateway(QuietHTTPServer):
    """The stand-in's server, with what it did: ``passed`` (checked and forwarded), and ``refused`` by reason."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.passed = 0
        self.refused: dict[str, int] = {}
        self.lock = threading.Lock()

    def count(self, problem: str | None) -> None:
        with self.lock:
            if problem is None:
                self.passed += 1
            else:
                self.refused[problem] = self.refused.get(problem, 0) + 1


def api_gateway(forward: Forward, secrets: Mapping[str, str]) -> Gateway:
    """A server (not yet serving) that checks each request's signature, then ``forward``s it."""

    class Handler(BaseHTTPRequestHandler):
        server: Gateway

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _handle(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            parts = urlsplit(self.path)
            headers = {name.lower(): value for name, value in self.headers.items()}
            problem = MISSING if parts.query else signature_problem(self.command, parts.path, headers, body, secrets)
            self.server.count(problem)
            if problem is not None:
                self._answer(403, json.dumps({"message": problem}).encode())
                return
            try:
                self._answer(*forward(self.command, parts.path, body))
            except http_client.HttpError:
                self._answer(502, json.dumps({"message": "Internal server error"}).encode())

        do_GET = do_POST = _handle

        def log_message(self, *args: Any) -> None:
            pass

    return Gateway(Handler)
