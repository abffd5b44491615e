"""The AWS adapter without a network: how errors are translated and counted by code, and what each
profile's client settings make of botocore's configuration, and the skew read from
answers' ``Date`` headers through the client's own hooks."""

from __future__ import annotations

from collections import Counter
from email.utils import formatdate
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from hypothesis import given, settings
from hypothesis import strategies as st

import fleet.aws
from fleet.aws import AwsClients, ClientSettings, aws_errors, consistent_scan, pages
from fleet.clock import LeaseClock
from fleet.config import FleetConfig
from fleet.errors import ConditionFailed, StoreError, StoreUnavailable
from fleet.store import AwsAdapter


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
    assert botocore_config.parameter_validation is False
    assert botocore_config.user_agent == "wsfleet"


def test_published_settings_keep_the_sdk_defaults() -> None:
    settings = ClientSettings.sdk_defaults()
    botocore_config = settings.client_config()
    assert botocore_config.retries == {"mode": "standard"}
    assert botocore_config.read_timeout == 60 and botocore_config.connect_timeout == 60
    assert botocore_config.max_pool_connections == 10
    assert botocore_config.parameter_validation is True
    assert botocore_config.user_agent is None
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
        store = AwsAdapter(aws)
        for _ in range(3):
            with pytest.raises(StoreUnavailable):
                await store.get_connection("CONN#throttled")
        assert aws.errors == {"ThrottlingException": 3}
        assert aws.requests == {"coordination": 3}


async def test_a_paged_read_follows_every_page_counts_each_and_translates_its_errors(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``pages`` / ``consistent_scan`` through a real client whose Scan is answered where botocore calls its
    handlers before sending (nothing leaves the machine): every page is asked for from the last one's
    ``LastEvaluatedKey``, consistently, counted once, and an error on a later page is translated and counted
    by its code."""
    for name, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                        "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:9"}.items():
        monkeypatch.setenv(name, value)
    answers: list[dict[str, Any]] = [
        {"Items": [{"pk": {"S": "a"}}], "LastEvaluatedKey": {"pk": {"S": "a"}}},
        {"Items": [{"pk": {"S": "b"}, "n": {"N": "2"}}, {"pk": {"S": "c"}}], "LastEvaluatedKey": {"pk": {"S": "c"}}},
        {"Items": [{"pk": {"S": "d"}}]},
    ]
    asked: list[dict[str, Any]] = []

    def note(params: dict[str, Any], **_: Any) -> None:
        asked.append(dict(params))

    def answer(**_: Any) -> tuple[object, dict[str, Any]]:
        page = answers[len(asked) - 1]
        if page.get("throttled"):
            raise answered("ThrottlingException", 400)
        return SimpleNamespace(status_code=200), page

    async with AwsClients(FleetConfig(timescale=0.1)) as aws:
        aws.ddb.meta.events.register("before-parameter-build.dynamodb.Scan", note)
        aws.ddb.meta.events.register("before-call.dynamodb.Scan", answer)
        items = [item async for item in consistent_scan(aws, "t", "scan t")]
        assert items == [{"pk": "a"}, {"pk": "b", "n": 2}, {"pk": "c"}, {"pk": "d"}]
        assert [(p["TableName"], p["ConsistentRead"], p.get("ExclusiveStartKey")) for p in asked] == [
            ("t", True, None), ("t", True, {"pk": {"S": "a"}}), ("t", True, {"pk": {"S": "c"}})]
        assert aws.requests == {"coordination": 3}

        asked.clear()
        first_two = [item async for item in pages(aws, "scan t", lambda extra: aws.ddb.scan(TableName="t", **extra),
                                                  max_pages=2)]
        assert [item["pk"] for item in first_two] == ["a", "b", "c"] and len(asked) == 2

        asked.clear()
        answers[1] = {"throttled": True}
        with pytest.raises(StoreUnavailable, match="scan t"):
            [item async for item in consistent_scan(aws, "t", "scan t")]
        assert len(asked) == 2
        assert aws.errors == {"ThrottlingException": 1}


class SteppedClocks(LeaseClock):
    """The server's clock (integer ms), the fence clock a constant distance from it, and a lease clock
    ``offset_ms`` ahead of the server that the test steps."""

    def __init__(self, offset_ms: int) -> None:
        super().__init__()
        self.server_ms = 1_700_000_000_000
        self.offset_ms_now = offset_ms

    def now_ms(self) -> int:
        return self.server_ms + self.offset_ms_now

    def monotonic_s(self) -> float:
        return (self.server_ms - 1_699_999_000_000) / 1000.0  # a fence clock 1 000 s into its life


REQUESTS = 40


@settings(max_examples=300, deadline=None)
@given(offset_ms=st.integers(-300, 300),
       # per request: the idle time before it, its round trip and when in it the server answered (in 60ths)
       requests=st.lists(st.tuples(st.integers(10, 400), st.integers(1, 60), st.integers(0, 60)),
                         min_size=REQUESTS, max_size=REQUESTS),
       steps=st.lists(st.tuples(st.integers(0, REQUESTS - 1),
                                st.sampled_from([-700, -300, -50, 50, 300, 700, 1_300]), st.booleans()), max_size=3))
def test_the_skew_bounds_contain_the_lease_clocks_offset_after_sub_second_steps(
        offset_ms: int, requests: list[tuple[int, int, int]], steps: list[tuple[int, int, bool]]) -> None:
    """Hole 2: DynamoDB answers dated in whole seconds, fed through the client's own hooks, with the lease
    clock stepped by sub-second (and larger) amounts before a request or while it is in flight.  The bounds
    the store reports must contain the lease clock's true offset from the server's clock now.  The old
    estimator intersected answers from both sides of a step while they overlapped, so after a 700 ms step
    it could exclude the true offset (and say the clocks agree)."""
    clocks = SteppedClocks(offset_ms)
    aws = AwsClients(FleetConfig(timescale=0.1), clock=clocks)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fleet.aws, "monotonic_s", clocks.monotonic_s, raising=False)
        for request, (idle_ms, rtt_ms, answered_60ths) in enumerate(requests):
            clocks.server_ms += idle_ms
            for at, step_ms, in_flight in steps:
                if at == request and not in_flight:
                    clocks.offset_ms_now += step_ms
            context: dict[str, Any] = {}
            aws._note_sent(context)
            processed = clocks.server_ms + rtt_ms * answered_60ths // 60
            clocks.server_ms += rtt_ms
            for at, step_ms, in_flight in steps:
                if at == request and in_flight:
                    clocks.offset_ms_now += step_ms
            date = formatdate(processed // 1000, usegmt=True)  # whole seconds, as HTTP dates are
            aws._note_answer(parsed={"ResponseMetadata": {"HTTPHeaders": {"date": date}}}, context=context)
        bounds = AwsAdapter(aws).clock_skew_bounds()
    assert bounds is not None
    assert bounds[0] < clocks.offset_ms_now <= bounds[1]
