"""ActiveConnections: what a running worker publishes (``fleet.metrics``)."""

from __future__ import annotations

import pytest

from fleet.memstore import MemoryStore
from tests.fleet.memworker import add_stream, config, running, until

pytestmark = pytest.mark.looptime


async def test_a_worker_publishes_how_many_streams_it_holds() -> None:
    store = MemoryStore(config(metric_interval_ms=1000))  # every 50 ms at the tests' time scale
    add_stream(store, "CONN#a")
    add_stream(store, "CONN#b")
    async with running(store) as worker:
        await until(lambda: len(worker.held) == 2)
        await until(lambda: ("w1", 2) in store.metrics)
    assert store.metrics[0] == ("w1", 0)  # published from the start, before anything was taken up
