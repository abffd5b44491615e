"""The ``make_simulator`` fixture: starts in-process simulators on free ports and stops them after the test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from harness.upstream_sim import UpstreamSimulator
from tests.harness.upstream_sim.sim_client import FAST, MakeSimulator, Started


@pytest.fixture
async def make_simulator() -> AsyncIterator[MakeSimulator]:
    simulators: list[UpstreamSimulator] = []

    async def make(**options: Any) -> Started:
        simulator = UpstreamSimulator(**{**FAST, **options})
        ws_url, control_url = await simulator.start("127.0.0.1", 0)
        simulators.append(simulator)
        return simulator, ws_url, control_url

    yield make
    for simulator in simulators:
        await simulator.stop()
