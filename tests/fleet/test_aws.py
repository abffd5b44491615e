"""The AWS adapter without a network: how a cancelled transaction is translated, and what each profile's
client settings make of botocore's configuration."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from fleet.aws import ClientSettings, aws_errors
from fleet.config import FleetConfig
from fleet.errors import ConditionFailed, StoreError, StoreUnavailable


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
