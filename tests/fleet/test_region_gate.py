"""The region gate: its decision without a network (``GateState``), and its read of a real HTTP authority
(``RegionGate``, against the harness's routing controls): On opens the region for a lease from when the read
was sent, Off closes it at once, no answer lets it lapse, and without a URL there is no gate."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

import pytest

from fleet.clock import monotonic_s
from fleet.config import FleetConfig
from fleet.region_gate import OFF, ON, GateState, RegionGate, gate_for
from harness.region.routing_control import RoutingControls


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


@pytest.fixture
def authority() -> Iterator[RoutingControls]:
    """The harness's routing controls: us-west-2 On, us-east-1 Off."""
    controls = RoutingControls(["us-east-1", "us-west-2"], "us-west-2", lambda *_, **__: None).start()
    yield controls
    controls.stop()


def test_the_gate_reads_its_regions_control(authority: RoutingControls) -> None:
    west = RegionGate(authority.url, "us-west-2", lease_s=5.0, timeout_s=1.0)
    east = RegionGate(authority.url, "us-east-1", lease_s=5.0, timeout_s=1.0)
    before = monotonic_s()
    assert asyncio.run(west.admits()) and not asyncio.run(east.admits())
    assert before + 5.0 <= west.open_until <= monotonic_s() + 5.0
    authority.set("us-west-2", OFF)
    assert not asyncio.run(west.admits())


def test_the_gate_keeps_its_times_on_the_clock_it_is_given(authority: RoutingControls) -> None:
    """On the worker's fence clock (here one at 1000 s, then 1004.9 s and 1005 s): the fence it bounds is."""
    now = [1000.0]
    gate = RegionGate(authority.url, "us-west-2", lease_s=5.0, timeout_s=1.0, clock=lambda: now[0])
    assert asyncio.run(gate.admits()) and gate.open_until == 1005.0
    authority.set("us-west-2", "maybe")  # no answer from now on: the region lapses with the gate's lease
    now[0] = 1004.9
    assert asyncio.run(gate.admits())
    now[0] = 1005.0
    assert not asyncio.run(gate.admits())


def test_an_answer_that_is_no_state_counts_as_none(authority: RoutingControls) -> None:
    authority.set("us-east-1", "maybe")
    gate = RegionGate(authority.url, "us-east-1", lease_s=5.0, timeout_s=1.0)
    assert not asyncio.run(gate.admits()) and gate.open_until == -math.inf
    missing = RegionGate(authority.url, "eu-west-1", lease_s=5.0, timeout_s=1.0)  # 404
    unreachable = RegionGate("http://127.0.0.1:9/controls", "us-east-1", lease_s=5.0, timeout_s=1.0)
    assert not asyncio.run(missing.admits()) and not asyncio.run(unreachable.admits())


def test_without_a_url_there_is_no_gate() -> None:
    gate = gate_for(FleetConfig(profile="hardened", worker_id="w"))
    assert asyncio.run(gate.admits()) and gate.open_until == math.inf


def test_the_gates_lease_is_the_fence_time() -> None:
    config = FleetConfig(profile="hardened", worker_id="w", timescale=0.1, region_gate_url="http://x")
    assert gate_for(config).state.lease_s == pytest.approx((20_000 - 2_000 - 3_000) / 1000 * 0.1)
