"""The worker's liveness on the in-memory store: what its periodic ``requests`` events report, and a fence
that never reopens once closed."""

from __future__ import annotations

import pytest

from fleet.clock import LoopClock
from fleet.errors import StoreUnavailable
from fleet.expr import Write
from fleet.memstore import MemoryStore
from tests.fleet.memworker import add_stream, config, history, running, until

pytestmark = pytest.mark.looptime

PK = "CONN#c1"
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


async def test_a_renewal_answered_after_the_fence_closed_does_not_reopen_it() -> None:
    """Renewals fail until the fence is 0.1 s from closing; the next one is answered 30 ms after it closed,
    within the request timeout, while the event loop is starved (the hook blocks it, as a loaded machine
    does), so the watchdog cannot run first.  A stream may have stopped on the closed fence meanwhile (a
    message write checks it), so the fence must stay closed and the incarnation be abandoned, its stream
    taken up again; reopening it left such a stream held by a live incarnation that no longer consumed it."""
    store = MemoryStore(config())
    add_stream(store, PK)
    async with running(store) as worker:
        await until(lambda: PK in worker.held)
        first_gen = worker.me.gen
        late: list[float] = []
        assert isinstance(worker.clock, LoopClock)
        clock = worker.clock

        async def refuse_until_the_fence_is_near(table: str, write: Write) -> None:
            if table == WORKERS and not late and worker.me.gen == first_gen:
                remaining = worker.fence.deadline - clock.fence_s()
                if remaining > 0.1:
                    raise StoreUnavailable("throttled")
                late.append(remaining)

        async def answer_after_the_deadline_on_a_starved_loop(table: str, write: Write) -> None:
            if table == WORKERS and len(late) == 1:
                late.append(worker.fence.deadline - clock.fence_s() + 0.03)
                clock.stall(late[-1])  # the loop starved: nothing else runs until the answer is handled

        store.before_write = refuse_until_the_fence_is_near
        store.after_write = answer_after_the_deadline_on_a_starved_loop
        await until(lambda: bool(history(worker).of("lease.lost")))
        assert 0 < late[1] < worker.config.scaled_s(worker.config.aws_timeout_ms)  # answered on time
        assert "answered after the fence closed" in [e.get("note") for e in history(worker).of("lease.renew")]
        [lost] = history(worker).of("lease.lost")
        assert lost["gen"] == first_gen and "self-fenced" in lost["reason"]
        await until(lambda: PK in worker.held and worker.me.gen != first_gen)  # taken up again, new incarnation
