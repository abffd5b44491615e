"""The worker's liveness on the in-memory store: what its periodic ``requests`` events report."""

from __future__ import annotations

from fleet.expr import Write
from fleet.memstore import MemoryStore
from tests.fleet.memworker import config, history, running, until

WORKERS = "wsfleet-workers"


async def test_requests_events_carry_the_error_answers_by_code_cumulatively() -> None:
    """The first registration's answer is lost (a ``Timeout``); every later ``requests`` event still counts
    it, beside the request counters, and nothing else failed."""
    store = MemoryStore(config())
    lost: list[Write] = []

    def lose_the_first_registration(table: str, write: Write) -> bool:
        if table == WORKERS and not lost:
            lost.append(write)
            return True
        return False

    store.lose_answer_for = lose_the_first_registration
    async with running(store) as worker:
        await until(lambda: len(history(worker).of("requests")) >= 3)
    events = history(worker).of("requests")
    assert [event["errors"] for event in events] == [{"Timeout": 1}] * len(events)
    assert all(event["coordination"] >= 2 for event in events)
    assert history(worker).of("worker.register", outcome="fail")
