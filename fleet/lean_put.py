"""The one hot DynamoDB request sent lean: the PutItem that stores each batch of a stream's message log
(``fleet.store.AwsAdapter.put_log_item``, ``hardened``).

Through the SDK a request goes through parameter building, endpoint rules, a dozen event hooks and response
parsing, about half of its client CPU (issue 26, py-spy on a worker storing 2,000 messages a second).  Here
its JSON body is built by hand, signed as botocore's ``SigV4Auth`` signs it (``Signer``), and sent on a few
kept-alive connections (``fleet.lean_http``) to the DynamoDB client's own endpoint with the same credentials,
timeout and User-Agent, checking an HTTPS endpoint against the certificates the SDK trusts (``tls_context``).
What the SDK's hooks do for every answered request is done here too: the request asks for
``ReturnConsumedCapacity``, and the answer is counted, billed and fed to the skew estimator by
``fleet.aws.AwsClients.answered``; an answer whose ``x-amz-crc32`` is not its body's CRC32 is taken as the
SDK's retry handler takes it, an outcome unknown (``check_crc32``).  Through a proxy the environment names for
the endpoint (``env_proxy``) the put goes by the SDK instead (``fleet.aws``): the lean HTTP speaks no proxy.

Errors come out as the SDK's would, so ``fleet.aws.aws_errors`` translates them in its one place: an error
answer as botocore's ``ClientError`` (its code, message and HTTP status), a timeout as ``TimeoutError``, a
broken connection as an ``OSError``.

The call reads ``<clients>.ddb.put_item(TableName=..., ...)`` as an SDK call does, so the deployment tests,
which derive the IAM policies from such calls in the source, still see it.
"""

from __future__ import annotations

import hmac
import json
import os
import ssl
import urllib.request
import zlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from hashlib import sha256
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from botocore.auth import SIGNED_HEADERS_BLACKLIST
from botocore.exceptions import ClientError, NoCredentialsError
from botocore.httpsession import get_cert_path

from fleet.clock import monotonic_s
from fleet.lean_http import DEFAULT_PORTS, Answer, HttpPool

if TYPE_CHECKING:
    from types_aiobotocore_dynamodb import DynamoDBClient

TARGET = "DynamoDB_20120810.PutItem"
CRC32_HEADER = "x-amz-crc32"
CONTENT_TYPE = "application/x-amz-json-1.0"
UNSIGNED_HEADERS = frozenset(SIGNED_HEADERS_BLACKLIST)  # botocore's: User-Agent and the like
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode  # one encoder for every body
# What the answer of one request does to the clients' counts: (operation, params, parsed answer, when it
# was sent on the fence clock in ms, the answer's Date header).
Answered = Callable[[str, Mapping[str, Any], Mapping[str, Any], float, str | None], None]


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTPS_PROXY`` or ``HTTP_PROXY`` by its scheme, unless
    ``NO_PROXY`` covers its host), as the SDK would use it; None: connect directly."""
    parts = urlsplit(url)
    if urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def tls_context() -> ssl.SSLContext:
    """What an HTTPS endpoint's certificate is checked against, as the SDK checks it: the bundle
    ``AWS_CA_BUNDLE`` names, else botocore's default (certifi's), not the system's store."""
    return ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE") or get_cert_path(True))


def check_crc32(answer: Answer) -> None:
    """DynamoDB's ``x-amz-crc32`` (the CRC32 of the answer's body), checked as the SDK checks it: an answer
    whose body does not match was damaged on the way, so the request's outcome is unknown
    (``ConnectionError``: ``fleet.aws`` counts it so and the log writer sends the put again).  An answer
    without one is taken as it is."""
    expected = answer.headers.get(CRC32_HEADER)
    if expected is not None and expected.strip() != (actual := str(zlib.crc32(answer.body))):
        raise ConnectionError(f"the answer's {CRC32_HEADER} {expected.strip()} is not its body's {actual}")


def error_answer(status: int, body: bytes) -> dict[str, Any]:
    """An error answer as botocore parses it: ``Error`` {``Code``, ``Message``} from DynamoDB's JSON
    (``__type`` ``...#Code``, ``message``), and the HTTP status; no code when the body is not that JSON (a
    proxy's 502 page: the status says enough)."""
    try:
        fields = json.loads(body)
    except ValueError:
        fields = {}
    fields = fields if isinstance(fields, dict) else {}
    code = str(fields.get("__type", "")).rpartition("#")[2]
    message = str(fields.get("message", fields.get("Message", "")))
    return {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}


def host_header(url: str) -> str:
    """The Host header of ``url`` as the SDK signs it: the port only when it is not the scheme's default."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return host if parts.port in (None, DEFAULT_PORTS.get(parts.scheme)) else f"{host}:{parts.port}"


class Signer:
    """Signature Version 4 of the lean put's one request shape (``POST /``, no query, a body signed by its
    SHA-256), computed as botocore's ``SigV4Auth`` computes it (``tests/fleet/test_lean_put.py`` holds the two
    equal), the day's signing key kept instead of derived again for every request: botocore's generic
    signer cost about a third of the lean request's client CPU."""

    def __init__(self, region: str, service: str) -> None:
        self.region, self.service = region, service
        self._key: tuple[str, str, bytes] | None = None  # (secret, day, signing key)

    def _signing_key(self, secret: str, day: str) -> bytes:
        if self._key is None or self._key[:2] != (secret, day):
            key = f"AWS4{secret}".encode()
            for part in (day, self.region, self.service, "aws4_request"):
                key = hmac.new(key, part.encode(), sha256).digest()
            self._key = (secret, day, key)
        return self._key[2]

    def signed(self, credentials: Any, headers: Mapping[str, str], body: bytes, now: datetime) -> dict[str, str]:
        """``headers`` (``Host`` among them) with ``X-Amz-Date``, the session token if any, and
        ``Authorization``: every header but those SigV4 leaves out (``User-Agent``) signed."""
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        out = {**headers, "X-Amz-Date": amz_date}
        if credentials.token:
            out["X-Amz-Security-Token"] = credentials.token
        signed = {name.lower(): " ".join(value.split()) for name, value in out.items()
                  if name.lower() not in UNSIGNED_HEADERS}
        names = sorted(signed)
        canonical = "\n".join(["POST", "/", "", "".join(f"{name}:{signed[name]}\n" for name in names),
                               ";".join(names), sha256(body).hexdigest()])
        scope = f"{amz_date[:8]}/{self.region}/{self.service}/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(credentials.secret_key, amz_date[:8]), to_sign.encode(),
                             sha256).hexdigest()
        out["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
                                f"SignedHeaders={';'.join(names)}, Signature={signature}")
        return out


class LeanDynamoDB:
    """``put_item`` of DynamoDB's API, and only it, without the SDK's per-request machinery."""

    def __init__(self, endpoint_url: str, region: str, credentials: Any, timeout_s: float | None,
                 user_agent: str | None, answered: Answered) -> None:
        """``credentials``: the SDK session's (botocore's, refreshed as the SDK refreshes them)."""
        self.url = endpoint_url.rstrip("/") + "/"
        self.credentials = credentials
        self.headers = {"Content-Type": CONTENT_TYPE, "Host": host_header(self.url),
                        "User-Agent": user_agent or "wsfleet", "X-Amz-Target": TARGET}
        self.signer = Signer(region, "dynamodb")
        self.answered = answered
        self.http = HttpPool(self.url, tls_context() if self.url.startswith("https:") else None, timeout_s,
                             kept=("date", CRC32_HEADER))

    async def close(self) -> None:
        await self.http.close()

    async def put_item(self, *, TableName: str, Item: Mapping[str, Any],
                       ConditionExpression: str) -> dict[str, Any]:
        """One PutItem of ``Item`` (typed, the wire format) under ``ConditionExpression``; the parsed answer.
        Raises ``ClientError`` for an error answer, else what ``fleet.lean_http`` raises."""
        params = {"TableName": TableName, "Item": Item, "ConditionExpression": ConditionExpression,
                  "ReturnConsumedCapacity": "TOTAL"}
        body = _ENCODE(params).encode()
        if self.credentials is None:
            raise NoCredentialsError()
        headers = self.signer.signed(await self.credentials.get_frozen_credentials(), self.headers, body,
                                     datetime.now(UTC))
        sent_ms = monotonic_s() * 1000.0
        answer = await self.http.post(headers, body)
        check_crc32(answer)
        status = answer.status
        parsed: dict[str, Any] = json.loads(answer.body) if status == 200 else error_answer(status, answer.body)
        self.answered("PutItem", params, parsed, sent_ms, answer.headers.get("date"))
        if status != 200:
            raise ClientError(parsed, "PutItem")  # type: ignore[arg-type]  # botocore's own parsed shape
        return parsed


class LeanClients:
    """The lean requests of one fleet process, named as the SDK clients are (``ddb``): the SDK's own client
    where the lean one cannot go (a proxy)."""

    def __init__(self, ddb: LeanDynamoDB | DynamoDBClient) -> None:
        self.ddb = ddb
