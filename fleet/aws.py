"""AWS clients for fleet processes, and the one place botocore errors become fleet errors.

``AwsClients`` opens the DynamoDB, SQS and CloudWatch clients of one aioboto3 session with bounded
timeouts and retries (a request that cannot finish inside ``aws_timeout_ms`` is abandoned and its outcome
is unknown).  Endpoints come from the SDK's standard ``AWS_ENDPOINT_URL_<SERVICE>`` variables, so the same
code talks to real AWS, LocalStack or the embedded backend.  ``aws_errors`` translates botocore and
aiohttp exceptions into ``fleet.errors`` (httpx style: callers catch one tree).

Operation names called on ``AwsClients.ddb`` / ``.sqs`` / ``.cloudwatch`` anywhere in ``fleet/`` are what the
terraform IAM policies must grant; the deployment tests derive that set from the code, so always call AWS
through these attribute names.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

import aioboto3
from aiobotocore.config import AioConfig
from botocore.exceptions import BotoCoreError, ClientError

from fleet.config import FleetConfig
from fleet.errors import ConditionFailed, StoreError, StoreUnavailable

if TYPE_CHECKING:
    from types_aiobotocore_cloudwatch import CloudWatchClient
    from types_aiobotocore_dynamodb import DynamoDBClient
    from types_aiobotocore_sqs import SQSClient

_UNAVAILABLE_CODES = {
    "ThrottlingException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "InternalServerError",
    "ServiceUnavailable",
    "InternalFailure",
}


class AwsClients:
    """The three clients a fleet process uses, opened together and closed together.

    ``requests`` counts every DynamoDB request by purpose (``coordination`` or ``messages``) so benchmarks
    can compare profiles' coordination cost from the adapter's own count.
    """

    def __init__(self, config: FleetConfig) -> None:
        self.config = config
        self.requests: Counter[str] = Counter()
        self._stack = AsyncExitStack()
        self.ddb: DynamoDBClient
        self.sqs: SQSClient
        self.cloudwatch: CloudWatchClient

    async def __aenter__(self) -> AwsClients:
        timeout_s = max(0.2, self.config.scaled_s(self.config.aws_timeout_ms))
        client_config = AioConfig(
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            retries={"total_max_attempts": 1, "mode": "standard"},
            max_pool_connections=64,
        )
        # SQS long polls outlive the request timeout on purpose.
        sqs_config = AioConfig(
            connect_timeout=timeout_s,
            read_timeout=self.config.notify_wait_s + timeout_s,
            retries={"total_max_attempts": 1, "mode": "standard"},
        )
        session = aioboto3.Session(region_name=self.config.region)
        self.ddb = await self._stack.enter_async_context(session.client("dynamodb", config=client_config))
        self.sqs = await self._stack.enter_async_context(session.client("sqs", config=sqs_config))
        self.cloudwatch = await self._stack.enter_async_context(
            session.client("cloudwatch", config=client_config)
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()


@asynccontextmanager
async def aws_errors(what: str) -> AsyncIterator[None]:
    """Translate whatever the SDK raises inside the block into ``fleet.errors``.

    ``ConditionFailed``: the condition was evaluated and refused (definite).  ``StoreUnavailable``: the
    request may or may not have been applied (timeout, connection error, throttling, 5xx).
    ``StoreError``: refused for another reason (a missing table, a malformed request).
    """
    try:
        yield
    except ClientError as exc:
        error: Any = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        message = str(error.get("Message", "")) or code
        if code == "ConditionalCheckFailedException":
            raise ConditionFailed(f"{what}: condition not met") from exc
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code in _UNAVAILABLE_CODES or status >= 500:
            raise StoreUnavailable(f"{what}: {code}: {message}") from exc
        raise StoreError(f"{what}: {code}: {message}") from exc
    except (TimeoutError, BotoCoreError, OSError) as exc:
        raise StoreUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        # aiohttp raises its own client errors beneath botocore on some paths.
        if type(exc).__module__.startswith("aiohttp"):
            raise StoreUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc
        raise
