"""AWS clients for fleet processes, and the one place botocore errors become fleet errors.

``AwsClients`` opens the DynamoDB, SQS, CloudWatch and ECS clients of one aioboto3 session with the profile's
``ClientSettings``: ``hardened`` bounds every request (no SDK retries, a request that cannot finish
inside ``aws_timeout_ms`` is abandoned and its outcome is unknown); the published design keeps the SDK's
own retries and timeouts.  Endpoints come from the SDK's standard ``AWS_ENDPOINT_URL_<SERVICE>``
variables, so the same code talks to real AWS, LocalStack or the embedded backend.  ``aws_errors``
translates botocore and aiohttp exceptions into ``fleet.errors`` (httpx style: callers catch one tree) and
counts each error it translates by its code in ``AwsClients.errors`` (``error_code``).

Every DynamoDB answer's ``Date`` header is fed, with the request's send and receive times on the fence
clock, to ``AwsClients.skew`` (``fleet.clock.SkewEstimator``); ``AwsClients.skew_bounds`` says from it how
far the lease clock is from the server's now, whatever steps the lease clock took meanwhile.

Operation names called on ``AwsClients.ddb`` / ``.sqs`` / ``.cloudwatch`` / ``.ecs`` anywhere in ``fleet/`` are what the
terraform IAM policies must grant; the deployment tests derive that set from the code, so always call AWS
through these attribute names.

``pages`` is the one page loop of every paginated DynamoDB read (a Scan or a Query), and ``consistent_scan``
a whole table read with it, consistently.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from itertools import count
from typing import TYPE_CHECKING, Any

import aioboto3
from aiobotocore.config import AioConfig
from botocore.endpoint import DEFAULT_TIMEOUT
from botocore.exceptions import BotoCoreError, ClientError, ConnectTimeoutError, HTTPClientError, ReadTimeoutError
from botocore.exceptions import ConnectionError as BotoConnectionError

from fleet.billing import OPERATIONS, billed_request, index_keys, purpose_of, units
from fleet.clock import LeaseClock, SkewEstimator, monotonic_s
from fleet.config import FleetConfig
from fleet.errors import ConditionFailed, StoreError, StoreUnavailable
from fleet.lean_put import LeanClients, LeanDynamoDB, env_proxy
from fleet.schema import connections_table
from fleet.typed import from_typed

if TYPE_CHECKING:
    from types_aiobotocore_cloudwatch import CloudWatchClient
    from types_aiobotocore_dynamodb import DynamoDBClient
    from types_aiobotocore_ecs import ECSClient
    from types_aiobotocore_sqs import SQSClient
    from types_aiobotocore_sqs.type_defs import SendMessageBatchRequestEntryTypeDef

_UNAVAILABLE_CODES = {
    "ThrottlingException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "RequestThrottled",  # SQS
    "InternalServerError",
    "ServiceUnavailable",
    "InternalFailure",
}
# Reasons a transaction was cancelled although its conditions held: nothing was written, try again.
_RETRYABLE_CANCELLATIONS = {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
_SENT_AT = "wsfleet_sent_ms"
USER_AGENT = "wsfleet"  # hardened's clients' User-Agent (``ClientSettings.user_agent``)
_PARAMS = "wsfleet_params"


@dataclass(frozen=True)
class ClientSettings:
    """How the SDK clients behave: retries, timeouts, connection pool, read consistency.

    ``max_attempts`` counts the first attempt (1: no SDK retries); ``timeout_s`` None keeps botocore's
    defaults (60 s connect and read); ``consistent_reads`` applies to the desired-state read of a
    connection (``AwsAdapter.get_connection``); ``validates_parameters`` False skips botocore's client-side
    check of every request's parameters against the API model, which walks each attribute of a stored batch
    and costs more CPU than the rest of the request's building (a malformed request is still refused, by the
    service: ``ValidationException``, a ``StoreError``); ``user_agent`` (None: botocore's) is sent as it is,
    where botocore's own is rebuilt for every request from a dozen sanitised parts (about a sixth of a small
    request's client CPU).
    """

    max_attempts: int | None
    timeout_s: float | None
    max_pool_connections: int
    consistent_reads: bool
    validates_parameters: bool = True
    user_agent: str | None = None

    @classmethod
    def bounded(cls, config: FleetConfig) -> ClientSettings:
        """``hardened``: one attempt per request, abandoned after the request timeout; consistent reads; no
        client-side parameter validation; a fixed User-Agent."""
        return cls(max_attempts=1, timeout_s=max(0.2, config.scaled_s(config.aws_timeout_ms)),
                   max_pool_connections=64, consistent_reads=True, validates_parameters=False,
                   user_agent=USER_AGENT)

    @classmethod
    def sdk_defaults(cls) -> ClientSettings:
        """The published design: botocore's standard retry mode, timeouts and pool; eventual reads."""
        return cls(max_attempts=None, timeout_s=None, max_pool_connections=10, consistent_reads=False)

    def client_config(self, read_timeout_extra_s: float = 0.0) -> AioConfig:
        retries: dict[str, Any] = {"mode": "standard"}
        if self.max_attempts is not None:
            retries["total_max_attempts"] = self.max_attempts
        timeouts: dict[str, Any] = {}
        if self.timeout_s is not None:
            timeouts = {"connect_timeout": self.timeout_s, "read_timeout": self.timeout_s + read_timeout_extra_s}
        return AioConfig(retries=retries, max_pool_connections=self.max_pool_connections,
                         parameter_validation=self.validates_parameters, user_agent=self.user_agent, **timeouts)


class AwsClients:
    """The four clients a fleet process uses, opened together and closed together (ECS: only to confirm a
    death notice, ``fleet.deathnotice``), and with a region gate one Route 53 ARC data-plane client per
    cluster endpoint (``gate_clients``).

    ``requests`` counts every DynamoDB request by purpose (``coordination`` or ``messages``) so benchmarks
    can compare profiles' coordination cost from the adapter's own count; ``errors`` counts every error
    answer of any of the four services by its code (``error_code``), as ``aws_errors`` translates it.
    Every answered DynamoDB data request (``fleet.billing.OPERATIONS``) is also counted in ``operations``
    under ``"<Operation> <purpose>"`` (the purpose from ``fleet.billing.purpose_of``), and the units AWS
    bills it (``fleet.billing.units``) added to ``units`` under ``"<read|write> <purpose>"``; every such
    request asks for ``ReturnConsumedCapacity``, and what the backend reports lands under
    ``"reported <read|write> <purpose>"`` (moto reports fixed figures, dynalite size-based ones without
    transactions; a backend that reports nothing leaves them out); a call the rules cannot size counts under
    ``"unbillable <purpose>"`` (it is never failed for it).  All are cumulative over the process's
    life (the worker's ``requests`` history events carry them).
    Under the SDK's own retries (``ClientSettings.sdk_defaults``) an error counts only when the last
    attempt fails: the attempts the SDK retried away are not seen here.  ``settings`` defaults to
    ``ClientSettings.bounded(config)``; ``clock`` (the lease clock the skew is measured on) to one built
    from the config's clock offset.
    """

    def __init__(self, config: FleetConfig, settings: ClientSettings | None = None,
                 clock: LeaseClock | None = None) -> None:
        self.config = config
        self.settings = settings or ClientSettings.bounded(config)
        self.clock = clock or LeaseClock(config.clock_offset_ms, config.clock_offset_file)
        self.skew = SkewEstimator()
        self.requests: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.operations: Counter[str] = Counter()
        self.units: defaultdict[str, float] = defaultdict(float)
        self._date = ("", 0.0)  # the last answer's Date header, read (server ms)
        # the table -> key attributes of its all-projecting index, for the index writes a write is billed
        self.indexes = index_keys(connections_table(config.connections_table))
        self._stack = AsyncExitStack()
        self.ddb: DynamoDBClient
        self.sqs: SQSClient
        self.cloudwatch: CloudWatchClient
        self.ecs: ECSClient
        self.lean: LeanClients
        # the region gate's (fleet.region_gate): one Route 53 ARC data-plane client per cluster endpoint, by
        # URL, each request bounded whatever the profile
        self.gate_clients: list[tuple[str, Any]] = []

    async def __aenter__(self) -> AwsClients:
        client_config = self.settings.client_config()
        # SQS long polls outlive the request timeout on purpose.
        sqs_config = self.settings.client_config(read_timeout_extra_s=self.config.notify_wait_s)
        session = aioboto3.Session(region_name=self.config.region)
        self.ddb = await self._stack.enter_async_context(session.client("dynamodb", config=client_config))
        self.ddb.meta.events.register("before-parameter-build.dynamodb", self._note_params)
        self.ddb.meta.events.register("before-call.dynamodb", self._note_sent)
        self.ddb.meta.events.register("after-call.dynamodb", self._note_answer)
        # the one hot request, PutItem of a message-log batch, goes lean (``fleet.lean_put``), but through a
        # proxy by the SDK
        if env_proxy(self.ddb.meta.endpoint_url) is None:
            lean = LeanDynamoDB(self.ddb.meta.endpoint_url, self.ddb.meta.region_name,
                                await session.get_credentials(), self.settings.timeout_s or DEFAULT_TIMEOUT,
                                self.settings.user_agent, self.answered)
            self._stack.push_async_callback(lean.close)
            self.lean = LeanClients(lean)
        else:
            self.lean = LeanClients(self.ddb)
        self.sqs = await self._stack.enter_async_context(session.client("sqs", config=sqs_config))
        self.cloudwatch = await self._stack.enter_async_context(
            session.client("cloudwatch", config=client_config)
        )
        self.ecs = await self._stack.enter_async_context(session.client("ecs", config=client_config))
        gate_config = ClientSettings.bounded(self.config).client_config()
        for region, url in self.config.region_gate_cluster:
            client = session.client("route53-recovery-cluster", region_name=region, endpoint_url=url,
                                    config=gate_config)
            self.gate_clients.append((url, await self._stack.enter_async_context(client)))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    def skew_bounds(self) -> tuple[float, float] | None:
        """``(lower, upper)`` ms: the lease clock is ahead of DynamoDB's clock by more than ``lower`` and at
        most ``upper`` now (negative: behind); None until enough answers agree."""
        return self.skew.bounds(self.clock.now_ms() - monotonic_s() * 1000.0)

    def _note_params(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        if model.name in OPERATIONS:
            params.setdefault("ReturnConsumedCapacity", "TOTAL")
            context[_PARAMS] = dict(params)

    def _note_answer(self, parsed: Mapping[str, Any], context: Mapping[str, Any], model: Any = None,
                     **_: Any) -> None:
        date = parsed.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        self.answered(str(getattr(model, "name", "")), context.get(_PARAMS), parsed, context.get(_SENT_AT), date)

    def answered(self, operation: str, params: Mapping[str, Any] | None, parsed: Mapping[str, Any],
                 sent_ms: float | None, date: str | None) -> None:
        """What one answered DynamoDB request counts: the units it is billed, if a data request (``params``:
        what it was sent with), and its ``Date`` against when it was sent (``sent_ms``, fence clock) for the
        skew.  Every answer goes through here, the SDK's (its ``after-call`` hook) and ``fleet.lean_put``'s."""
        if params is not None:
            self._bill(operation, params, parsed)
        if sent_ms is None or not date:
            return
        if date != self._date[0]:  # answers of one second share their Date: it is read once
            try:
                self._date = (date, parsedate_to_datetime(date).timestamp() * 1000.0)
            except (TypeError, ValueError):
                return  # a malformed Date says nothing
        self.skew.add(sent_ms, monotonic_s() * 1000.0, self._date[1])  # the fence clock never goes back

    def _bill(self, operation: str, params: Mapping[str, Any], parsed: Mapping[str, Any]) -> None:
        """Count one answered data request and add the units it is billed, computed and reported."""
        purpose = purpose_of(operation, params, self.config.messages_table)
        self.operations[f"{operation} {purpose}"] += 1
        try:
            request = billed_request(operation, params, parsed, self.indexes)
            billed = None if request is None else units(request)
        except (ValueError, KeyError, TypeError, AttributeError):
            # an answer or request of a shape the rules do not know: counted, never failing the request
            self.units[f"unbillable {purpose}"] += 1
            return
        if billed is None:
            return
        kind = "write" if billed.write else "read"
        self.units[f"{kind} {purpose}"] += billed.write or billed.read
        consumed = parsed.get("ConsumedCapacity")
        reports = consumed if isinstance(consumed, list) else [consumed] if consumed else []
        for report in reports:
            self.units[f"reported {kind} {purpose}"] += float(report.get("CapacityUnits", 0.0))

    def _note_sent(self, context: dict[str, Any], **_: Any) -> None:
        context[_SENT_AT] = monotonic_s() * 1000.0  # returns None: botocore goes on to send the request


async def send_messages(aws: AwsClients, queue_url: str, bodies: Sequence[Mapping[str, Any]]) -> None:
    """Up to ten JSON bodies on the queue in one SendMessageBatch.  A message the queue refused inside an
    answered request (``Failed``) is counted in ``aws.errors`` by its code and fails the call as the request's
    own failure would: ``StoreError`` when the sender is at fault, else ``StoreUnavailable``."""
    entries: list[SendMessageBatchRequestEntryTypeDef] = [
        {"Id": str(i), "MessageBody": json.dumps(body)} for i, body in enumerate(bodies)]
    async with aws_errors("send notifications", aws.errors):
        answer = await aws.sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
    refused = answer.get("Failed", [])
    for entry in refused:
        aws.errors[entry.get("Code") or "SendMessageBatch Failed"] += 1
    if refused:
        error = StoreError if refused[0].get("SenderFault") else StoreUnavailable
        raise error(f"send notifications: {len(refused)} of {len(entries)} refused: "
                    f"{refused[0].get('Code')}: {refused[0].get('Message', '')}")


# One page's request: sends the read with the keyword arguments it is given (``ExclusiveStartKey`` after the
# first page), e.g. ``lambda extra: aws.ddb.query(TableName=..., **extra)``.
PageRequest = Callable[[dict[str, Any]], Awaitable[Mapping[str, Any]]]


async def pages(aws: AwsClients, what: str, request: PageRequest,
                max_pages: int | None = None) -> AsyncIterator[dict[str, Any]]:
    """Every item of a paginated read, untyped, page after page (following ``LastEvaluatedKey``) until the
    last or ``max_pages`` (None: every page).  Each page is one coordination request in ``aws.requests``;
    its errors are translated (``aws_errors``, named ``what``) and counted in ``aws.errors``."""
    extra: dict[str, Any] = {}
    for _ in count() if max_pages is None else range(max_pages):
        aws.requests["coordination"] += 1
        async with aws_errors(what, aws.errors):
            page = await request(extra)
        for item in page.get("Items", []):
            yield from_typed(item)
        if not page.get("LastEvaluatedKey"):
            return
        extra = {"ExclusiveStartKey": page["LastEvaluatedKey"]}


def consistent_scan(aws: AwsClients, table: str, what: str) -> AsyncIterator[dict[str, Any]]:
    """Every item of ``table``, untyped, from a strongly consistent Scan of every page (``pages``)."""
    return pages(aws, what, lambda extra: aws.ddb.scan(TableName=table, ConsistentRead=True, **extra))


def _cancellation_codes(response: Mapping[str, Any]) -> set[str]:
    reasons = response.get("CancellationReasons") or []
    return {str(reason.get("Code", "")) for reason in reasons if isinstance(reason, Mapping)}


def _is_transport_error(exc: BaseException) -> bool:
    """A timeout or a broken connection below the SDK (aiohttp raises its own client errors on some paths)."""
    return (isinstance(exc, (OSError, BotoConnectionError, HTTPClientError))
            or type(exc).__module__.startswith("aiohttp"))


def error_code(exc: BaseException) -> str:
    """The name an error is counted under: an AWS error answer's code (``HTTP <status>`` without one),
    ``Timeout`` for a request that timed out, ``ConnectionError`` for one whose connection failed, else the
    SDK exception's class name."""
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        return code or f"HTTP {exc.response.get('ResponseMetadata', {}).get('HTTPStatusCode', '?')}"
    if isinstance(exc, (TimeoutError, ReadTimeoutError, ConnectTimeoutError)):
        return "Timeout"
    if _is_transport_error(exc):
        return "ConnectionError"
    return type(exc).__name__


@asynccontextmanager
async def aws_errors(what: str, counts: Counter[str] | None = None) -> AsyncIterator[None]:
    """Translate whatever the SDK raises inside the block into ``fleet.errors``, counting it in ``counts``
    (``AwsClients.errors``) under its ``error_code``.

    ``ConditionFailed``: the condition was evaluated and refused (definite; for a transaction, one of its
    conditions).  ``StoreUnavailable``: the request may or may not have been applied (timeout, connection
    error, throttling, 5xx), or a transaction was cancelled for a reason worth retrying (a conflicting
    transaction, throttling).  ``StoreError``: refused for another reason (a missing table, a malformed
    request, an operation the backend does not have).
    """
    try:
        yield
    except Exception as exc:
        if not isinstance(exc, (ClientError, BotoCoreError)) and not _is_transport_error(exc):
            raise
        if counts is not None:
            counts[error_code(exc)] += 1
        raise _translated(what, exc) from exc


def _translated(what: str, exc: Exception) -> StoreError:
    if not isinstance(exc, ClientError):
        return StoreUnavailable(f"{what}: {type(exc).__name__}: {exc}")
    error: Any = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    message = str(error.get("Message", "")) or code
    if code == "ConditionalCheckFailedException":
        return ConditionFailed(f"{what}: condition not met")
    if code == "TransactionCanceledException":
        reasons = _cancellation_codes(exc.response)
        if "ConditionalCheckFailed" in reasons:
            return ConditionFailed(f"{what}: condition not met")
        if reasons & _RETRYABLE_CANCELLATIONS:
            return StoreUnavailable(f"{what}: {code}: {message}")
        return StoreError(f"{what}: {code}: {message}")
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    if code in _UNAVAILABLE_CODES or status >= 500:
        return StoreUnavailable(f"{what}: {code}: {message}")
    return StoreError(f"{what}: {code}: {message}")
