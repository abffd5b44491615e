"""HTTP-aware toxics for AWS JSON-protocol traffic: API errors, slow answers, swallowed requests.

Real Toxiproxy has no such toxics; they exist only in our server (a proxy created on the Go binary refuses
them as an unknown type).  They go on the ``upstream`` stream of a proxy in front of an AWS endpoint
speaking the JSON protocol over HTTP/1.1: DynamoDB (``X-Amz-Target: DynamoDB_20120810.<Operation>``) and
SQS (``AmazonSQS.<Operation>``; botocore >= 1.31 speaks JSON to SQS, and 1.40 does so to moto).  Requests
without such a target (CloudWatch, anything else) pass through untouched.

Each toxic frames the client's requests (``http.RequestFramer``) and, for every request it selects, draws
``toxicity`` afresh (per request, not per connection, unlike Toxiproxy's toxics).  String attributes:

- ``service``: ``dynamodb`` or ``sqs`` (empty: both);
- ``operation``: comma-separated operation names, e.g. ``ReceiveMessage`` (empty: every operation).

Types:

- ``aws_error`` (``code``): answers the request itself with the service's error, without forwarding it:
  DynamoDB ``ProvisionedThroughputExceededException`` / ``ThrottlingException`` / ``RequestLimitExceeded``
  (400), ``InternalServerError`` (500), ``ServiceUnavailable`` (503); SQS ``RequestThrottled`` /
  ``ThrottlingException`` (400), ``InternalFailure`` (500), ``ServiceUnavailable`` (503).  SQS answers
  carry the ``x-amzn-query-error`` header botocore reads for query-compatible codes.
- ``aws_slow`` (``latency`` ms): forwards the request, then holds the answer ``latency`` ms after it
  arrives (the server has acted; the client hears late, or times out).  On ``ReceiveMessage`` this is a
  late delivery.
- ``aws_swallow``: answers success without forwarding; only for SQS ``DeleteMessage``,
  ``DeleteMessageBatch``, ``ChangeMessageVisibility`` and ``ChangeMessageVisibilityBatch`` (answers that
  carry nothing but the entry ids).  A swallowed delete leaves the message in the queue: it is delivered
  again after its visibility timeout, a duplicate delivery.

Removing one of these toxics while it holds part of a request closes the connection (the client retries
on a new one), and releases any answer ``aws_slow`` is holding.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, ClassVar

from harness.faults.toxiproxy.http import HttpRequest, RequestFramer
from harness.faults.toxiproxy.toxics import UPSTREAM, Chunk, Emit, Toxic, ToxicContext, register

TARGET_PREFIXES = {"DynamoDB_20120810": "dynamodb", "AmazonSQS": "sqs"}
SERVICES = tuple(TARGET_PREFIXES.values())

# (service, code) -> (HTTP status, JSON __type)
ERRORS: dict[tuple[str, str], tuple[int, str]] = {
    ("dynamodb", "ProvisionedThroughputExceededException"):
        (400, "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"),
    ("dynamodb", "ThrottlingException"): (400, "com.amazon.coral.availability#ThrottlingException"),
    ("dynamodb", "RequestLimitExceeded"): (400, "com.amazonaws.dynamodb.v20120810#RequestLimitExceeded"),
    ("dynamodb", "InternalServerError"): (500, "com.amazonaws.dynamodb.v20120810#InternalServerError"),
    ("dynamodb", "ServiceUnavailable"): (503, "com.amazonaws.dynamodb.v20120810#ServiceUnavailable"),
    ("sqs", "RequestThrottled"): (400, "com.amazonaws.sqs#RequestThrottled"),
    ("sqs", "ThrottlingException"): (400, "com.amazon.coral.availability#ThrottlingException"),
    ("sqs", "InternalFailure"): (500, "com.amazonaws.sqs#InternalFailure"),
    ("sqs", "ServiceUnavailable"): (503, "com.amazonaws.sqs#ServiceUnavailable"),
}
SWALLOWABLE = ("DeleteMessage", "DeleteMessageBatch", "ChangeMessageVisibility", "ChangeMessageVisibilityBatch")


def aws_operation(request: HttpRequest) -> tuple[str, str] | None:
    """(service, operation) of an AWS JSON-protocol request, or None for anything else."""
    prefix, _, operation = request.headers.get("x-amz-target", "").partition(".")
    service = TARGET_PREFIXES.get(prefix)
    return (service, operation) if service and operation else None


def json_answer(status: int, body: dict[str, Any], extra_headers: dict[str, str] | None = None) -> bytes:
    """A complete HTTP/1.1 answer the way AWS JSON endpoints write it."""
    payload = json.dumps(body, separators=(",", ":")).encode()
    headers = {
        "x-amzn-RequestId": str(uuid.uuid4()),
        "Content-Type": "application/x-amz-json-1.0",
        "Content-Length": str(len(payload)),
        "Date": formatdate(usegmt=True),
        **(extra_headers or {}),
    }
    head = f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return (head + "\r\n").encode("latin-1") + payload


def error_answer(service: str, code: str) -> bytes:
    status, type_name = ERRORS[(service, code)]
    extra = {}
    if service == "sqs":
        extra["x-amzn-query-error"] = f"{code};{'Sender' if status < 500 else 'Receiver'}"
    return json_answer(status, {"__type": type_name, "message": f"injected by the aws_error toxic: {code}"}, extra)


def success_answer(request: HttpRequest) -> bytes:
    """200 with the ids of a batch request's entries as ``Successful`` (``{}`` for a single request)."""
    try:
        payload = json.loads(request.body or b"{}")
    except ValueError:
        payload = {}
    entries = payload.get("Entries") if isinstance(payload, dict) else None
    if not isinstance(entries, list):
        return json_answer(200, {})
    ids = [{"Id": entry["Id"]} for entry in entries if isinstance(entry, dict) and "Id" in entry]
    return json_answer(200, {"Successful": ids, "Failed": []})


@dataclass
class AwsRequestToxic(Toxic):
    """Base of the HTTP-aware toxics: frames requests, selects by service and operation, draws toxicity."""

    streams: ClassVar[tuple[str, ...]] = (UPSTREAM,)
    request_toxicity: ClassVar[bool] = True
    service: str = ""
    operation: str = ""

    def validate(self) -> None:
        if self.service not in ("", *SERVICES):
            raise ValueError(f"attribute 'service' of {self.type_name} must be one of {', '.join(SERVICES)}")

    @property
    def operations(self) -> set[str]:
        return {name.strip() for name in self.operation.split(",") if name.strip()}

    def selects(self, request: HttpRequest) -> bool:
        identified = aws_operation(request)
        if identified is None:
            return False
        service, operation = identified
        operations = self.operations
        return (not self.service or service == self.service) and (not operations or operation in operations)

    async def pipe(self, chunk: Chunk, out: Emit, ctx: ToxicContext) -> None:
        framer: RequestFramer = ctx.state.setdefault("framer", RequestFramer())
        for item in framer.feed(chunk.data):
            if isinstance(item, HttpRequest) and self.selects(item) and ctx.rng.random() < ctx.toxicity:
                await self.affect(item, chunk.t, out, ctx)
            else:
                await out(Chunk(item.raw if isinstance(item, HttpRequest) else item, chunk.t))

    async def affect(self, request: HttpRequest, t: float, out: Emit, ctx: ToxicContext) -> None:
        raise NotImplementedError

    async def answer(self, request: HttpRequest, data: bytes, ctx: ToxicContext) -> None:
        await ctx.reply(data)
        if request.closes:
            ctx.close()

    def removed(self, ctx: ToxicContext) -> None:
        ctx.release_replies()
        framer: RequestFramer | None = ctx.state.get("framer")
        if framer is not None and framer.holding:
            ctx.close()


@register
@dataclass
class AwsError(AwsRequestToxic):
    type_name: ClassVar[str] = "aws_error"
    code: str = ""

    def validate(self) -> None:
        super().validate()
        if not self.service:
            raise ValueError("attribute 'service' of aws_error is required (dynamodb or sqs)")
        if (self.service, self.code) not in ERRORS:
            codes = ", ".join(code for service, code in ERRORS if service == self.service)
            raise ValueError(f"attribute 'code' of aws_error for {self.service} must be one of {codes}")

    async def affect(self, request: HttpRequest, t: float, out: Emit, ctx: ToxicContext) -> None:
        await self.answer(request, error_answer(self.service, self.code), ctx)


@register
@dataclass
class AwsSlow(AwsRequestToxic):
    type_name: ClassVar[str] = "aws_slow"
    latency: int = 0

    async def affect(self, request: HttpRequest, t: float, out: Emit, ctx: ToxicContext) -> None:
        ctx.delay_reply(self.latency / 1000.0)
        await out(Chunk(request.raw, t))


@register
@dataclass
class AwsSwallow(AwsRequestToxic):
    type_name: ClassVar[str] = "aws_swallow"

    def validate(self) -> None:
        super().validate()
        if self.service != "sqs" or not self.operations or not self.operations <= set(SWALLOWABLE):
            raise ValueError(f"aws_swallow needs service 'sqs' and operations among {', '.join(SWALLOWABLE)}")

    async def affect(self, request: HttpRequest, t: float, out: Emit, ctx: ToxicContext) -> None:
        await self.answer(request, success_answer(request), ctx)
