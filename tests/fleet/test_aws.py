"""The AWS adapter without a network: how errors are translated and counted by code, and what each
profile's client settings make of botocore's configuration."""

from __future__ import annotations

from collections import Counter
from typing import Any

import aiohttp
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from fleet.aws import AwsClients, ClientSettings, aws_errors
from fleet.config import FleetConfig
from fleet.errors import ConditionFailed, StoreError, StoreUnavailable
from fleet.store import LeaseStore


def cancelled(*codes: str) -> ClientError:
    response: Any = {
        "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
        "CancellationReasons": [{"Code": code} for code in codes],
        "ResponseMetadata": {"HTTPStatusCode": 400},
    }
    return ClientError(response, "TransactWriteItems")


@pytest.mark.parametrize(("codes", "expected"), [
    (("ConditionalCheckFailed", "None"), ConditionFailed),
    (("None", "TransactionConflict"), StoreUnavailable),
    (("ThrottlingError",), StoreUnavailable),
    (("ValidationError", "None"), StoreError),
])
async def test_a_cancelled_transaction_is_translated_by_its_reasons(codes: tuple[str, ...],
                                                                    expected: type[StoreError]) -> None:
    with pytest.raises(StoreError) as raised:
        async with aws_errors("transact write"):
            raise cancelled(*codes)
    assert type(raised.value) is expected


def test_hardened_settings_bound_every_request() -> None:
    config = FleetConfig(timescale=0.1, aws_timeout_ms=3_000)
    botocore_config = ClientSettings.bounded(config).client_config()
    assert botocore_config.retries == {"mode": "standard", "total_max_attempts": 1}
    assert botocore_config.read_timeout == pytest.approx(0.3)
    assert botocore_config.connect_timeout == pytest.approx(0.3)
    assert botocore_config.max_pool_connections == 64


def test_published_settings_keep_the_sdk_defaults() -> None:
    settings = ClientSettings.sdk_defaults()
    botocore_config = settings.client_config()
    assert botocore_config.retries == {"mode": "standard"}
    assert botocore_config.read_timeout == 60 and botocore_config.connect_timeout == 60
    assert botocore_config.max_pool_connections == 10
    assert settings.consistent_reads is False


def test_long_polls_get_their_wait_on_top_of_the_request_timeout() -> None:
    config = FleetConfig(timescale=0.1, aws_timeout_ms=3_000)
    assert ClientSettings.bounded(config).client_config(read_timeout_extra_s=5).read_timeout == pytest.approx(5.3)


def answered(code: str, status: int) -> ClientError:
    response: Any = {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "UpdateItem")


@pytest.mark.parametrize(("raised", "code", "expected"), [
    (answered("ProvisionedThroughputExceededException", 400), "ProvisionedThroughputExceededException",
     StoreUnavailable),
    (answered("ConditionalCheckFailedException", 400), "ConditionalCheckFailedException", ConditionFailed),
    (answered("", 503), "HTTP 503", StoreUnavailable),
    (ReadTimeoutError(endpoint_url="http://127.0.0.1:1"), "Timeout", StoreUnavailable),
    (TimeoutError(), "Timeout", StoreUnavailable),
    (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), "ConnectionError", StoreUnavailable),
    (aiohttp.ServerDisconnectedError(), "ConnectionError", StoreUnavailable),
])
async def test_every_translated_error_is_counted_by_its_code(raised: Exception, code: str,
                                                             expected: type[StoreError]) -> None:
    counts: Counter[str] = Counter()
    for _ in range(2):
        with pytest.raises(StoreError) as translated:
            async with aws_errors("update", counts):
                raise raised
        assert type(translated.value) is expected
    assert counts == {code: 2}


async def test_an_error_that_is_not_the_sdks_is_neither_translated_nor_counted() -> None:
    counts: Counter[str] = Counter()
    with pytest.raises(KeyError):
        async with aws_errors("update", counts):
            raise KeyError("ours")
    assert counts == {}


async def test_a_throttled_request_counts_in_the_clients_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the store and a real client: a throttle answer is counted on ``AwsClients.errors``, which the
    worker's ``requests`` events carry.  The answer is raised where botocore calls its handlers before
    sending, so nothing leaves the machine."""
    for name, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                        "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:9"}.items():
        monkeypatch.setenv(name, value)

    def throttle(**_: Any) -> None:
        raise answered("ThrottlingException", 400)

    async with AwsClients(FleetConfig(timescale=0.1)) as aws:
        aws.ddb.meta.events.register("before-call.dynamodb.GetItem", throttle)
        store = LeaseStore(aws)
        for _ in range(3):
            with pytest.raises(StoreUnavailable):
                await store.get_connection("CONN#throttled")
        assert aws.errors == {"ThrottlingException": 3}
        assert aws.requests == {"coordination": 3}
