"""The region gate: its decision without a network (``GateState``), and its read of a real HTTP authority
(``RegionGate``, against the harness's stand-in of ARC's data plane, SigV4 checked): On opens the region for a
lease from when the read was sent, Off closes it at once, no answer lets it lapse, each cluster endpoint is
tried, and without endpoints there is no gate."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from fleet.aws import AwsClients
from fleet.clock import monotonic_s
from fleet.config import FleetConfig
from fleet.errors import ConfigError
from fleet.region_gate import OFF, ON, GateState, RegionGate, activation_wait_s, gate_for, gate_lease_s
from harness.region.routing_control import HOLD, RoutingControls, control_arn


def test_closed_until_an_on_answer_then_open_for_a_lease_from_when_the_read_was_sent() -> None:
    state = GateState(lease_s=5.0)
    assert not state.open(0.0)
    state.answered(10.0, ON)
    assert state.open(14.9) and not state.open(15.0)


def test_off_closes_at_once_and_no_answer_lets_the_gate_lapse() -> None:
    state = GateState(lease_s=5.0)
    state.answered(10.0, ON)
    state.answered(12.0, None)  # unknown: nothing changes, the lease runs out at 15
    assert state.open(14.0) and not state.open(15.0)
    state.answered(16.0, ON)
    state.answered(17.0, OFF)
    assert not state.open(17.0)


def test_a_late_on_answer_does_not_reopen_past_its_own_lease() -> None:
    state = GateState(lease_s=5.0)
    state.answered(20.0, ON)
    state.answered(12.0, ON)  # an older read answered last: its lease ended at 17
    assert state.open_until == 25.0


SECRETS = {"test": "test"}  # the local credentials (harness.backends.base.LOCAL_CREDENTIALS)
GATED: dict[str, Any] = {"region_gate_endpoints": ("us-east-1=https://x/",),
                         "region_gate_control": control_arn("us-east-1")}


@pytest.fixture
def authority(monkeypatch: pytest.MonkeyPatch) -> Iterator[RoutingControls]:
    """The harness's stand-in of ARC's data plane: us-west-2 On, us-east-1 Off, three cluster endpoints."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    controls = RoutingControls(["us-east-1", "us-west-2"], "us-west-2", lambda *_, **__: None, SECRETS,
                               cluster=3).start()
    yield controls
    controls.stop()


@contextlib.asynccontextmanager
async def gate(authority: RoutingControls, region: str, endpoints: tuple[str, ...] | None = None,
               clock: Callable[[], float] = monotonic_s) -> AsyncIterator[RegionGate]:
    """``region``'s gate, its ARC clients opened by ``AwsClients`` as a worker's are (``endpoints``: the
    cluster's, by default)."""
    config = FleetConfig(profile="hardened", worker_id="w", region=region,
                         region_gate_endpoints=authority.endpoints if endpoints is None else endpoints,
                         region_gate_control=control_arn(region))
    async with AwsClients(config) as aws:
        yield RegionGate(aws.gate_clients, config.region_gate_control, lease_s=5.0, clock=clock)


def test_the_gate_reads_its_regions_control_through_the_clusters_data_plane(authority: RoutingControls) -> None:
    async def scenario() -> None:
        async with gate(authority, "us-west-2") as west, gate(authority, "us-east-1") as east:
            before = monotonic_s()
            assert await west.admits() and not await east.admits()
            assert before + 5.0 <= west.open_until <= monotonic_s() + 5.0
            authority.set({"us-west-2": OFF, HOLD: ON})
            assert not await west.admits()
    asyncio.run(scenario())


def test_the_gate_tries_each_endpoint_and_keeps_to_the_one_that_answered(authority: RoutingControls) -> None:
    async def scenario() -> None:
        authority.down(0)
        authority.down(1)
        async with gate(authority, "us-west-2") as west:
            assert await west.admits()
            assert west.endpoints[0][0] == authority.endpoints[2].partition("=")[2]
    asyncio.run(scenario())


def test_the_gate_fails_closed_when_no_endpoint_answers(authority: RoutingControls) -> None:
    async def scenario() -> None:
        async with gate(authority, "us-west-2") as west:
            assert await west.admits()
            for index in range(3):
                authority.down(index)
            lapsed = west.open_until
            assert await west.admits()  # no answer: the lease read earlier runs on, and nothing extends it
            assert west.open_until == lapsed
        async with gate(authority, "us-west-2", ("us-east-1=http://127.0.0.1:9/",)) as unreachable:
            assert not await unreachable.admits() and unreachable.open_until == -math.inf
    asyncio.run(scenario())


def test_an_unsigned_or_wrongly_signed_read_is_refused(authority: RoutingControls,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")

    async def scenario() -> None:
        async with gate(authority, "us-west-2") as west:
            assert not await west.admits() and west.open_until == -math.inf
    asyncio.run(scenario())


def test_the_gate_keeps_its_times_on_the_clock_it_is_given(authority: RoutingControls) -> None:
    """On the worker's fence clock (here one at 1000 s, then 1004.9 s and 1005 s): the fence it bounds is."""
    now = [1000.0]

    async def scenario() -> None:
        async with gate(authority, "us-west-2", clock=lambda: now[0]) as west:
            assert await west.admits() and west.open_until == 1005.0
            for index in range(len(authority.endpoints)):  # no answer from now on: the region lapses with
                authority.down(index)                      # the gate's lease
            now[0] = 1004.9
            assert await west.admits()
            now[0] = 1005.0
            assert not await west.admits()
    asyncio.run(scenario())


def test_an_answer_that_is_no_state_counts_as_none(authority: RoutingControls) -> None:
    async def scenario() -> None:
        authority.set({"us-east-1": "maybe"})
        async with gate(authority, "us-east-1") as east, gate(authority, "eu-west-1") as missing:  # 404
            assert not await east.admits() and east.open_until == -math.inf
            assert not await missing.admits() and missing.open_until == -math.inf
    asyncio.run(scenario())


def test_without_endpoints_there_is_no_gate() -> None:
    async def scenario() -> None:
        config = FleetConfig(profile="hardened", worker_id="w")
        async with AwsClients(config) as aws:
            ungated = gate_for(config, aws.gate_clients)
            assert await ungated.admits() and ungated.open_until == math.inf
    asyncio.run(scenario())


@pytest.mark.parametrize(("endpoints", "control", "fragment"), [
    (("us-east-1=https://a.example/",), "", "set together"),
    ((), control_arn("us-east-1"), "set together"),
    (("https://a.example/",), control_arn("us-east-1"), "region=url"),
    (("us-east-1=a.example",), control_arn("us-east-1"), "region=url"),
])
def test_a_half_configured_gate_is_refused(endpoints: tuple[str, ...], control: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        FleetConfig(profile="hardened", worker_id="w", region_gate_endpoints=endpoints, region_gate_control=control)


def test_the_gates_lease_is_the_fence_time() -> None:
    config = FleetConfig(profile="hardened", worker_id="w", timescale=0.1, **GATED)
    assert gate_lease_s(config) == pytest.approx((20_000 - 2_000 - 3_000) / 1000 * 0.1)


def test_the_activation_wait_outlasts_the_gate_and_the_last_write_sent_under_it() -> None:
    """After the Off, a worker may consume until its last On read was sent plus the gate's lease, and a write
    it sent just before then lands up to a request's timeout later: the wait covers both, and the margin."""
    config = FleetConfig(profile="hardened", worker_id="w", timescale=1.0, **GATED)
    lease_s = gate_lease_s(config)
    assert activation_wait_s(config) == pytest.approx(lease_s + 3.0 + 2.0)
    slower = FleetConfig(profile="hardened", worker_id="w", timescale=1.0, **GATED,
                         lease_ms=40_000, aws_timeout_ms=5_000)
    assert activation_wait_s(slower) == pytest.approx(gate_lease_s(slower) + 5.0 + 2.0)
