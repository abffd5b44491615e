"""The fleet's clocks: the fence clock keeps counting through a suspend, and the skew estimator bounds
(lease clock − server clock) from whole-second ``Date`` headers timed on the fence clock, without a network.
Here the answers are timed on a fence clock a constant ``offset_ms`` ahead of the server's; the lease clock
is ``lease_ahead`` ahead of the fence clock (0: they agree).  ``tests/fleet/test_aws.py`` feeds the
estimator through the client's hooks with the lease clock stepped between and during requests."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet import clock
from fleet.clock import LoopClock, SkewEstimator, monotonic_s


def test_fence_clock_is_boottime_where_the_platform_has_it() -> None:
    if not hasattr(time, "CLOCK_BOOTTIME"):
        pytest.skip("no CLOCK_BOOTTIME on this platform")
    before = time.clock_gettime(time.CLOCK_BOOTTIME)
    reading = monotonic_s()
    assert before <= reading <= time.clock_gettime(time.CLOCK_BOOTTIME)


def test_fence_clock_falls_back_to_monotonic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clock, "_BOOTTIME", None)
    before = time.monotonic()
    assert before <= monotonic_s() <= time.monotonic()


@pytest.mark.looptime
async def test_loop_clocks_follow_the_virtual_loop_time_together_and_a_stall_moves_one_alone() -> None:
    first, second = LoopClock(), LoopClock()
    lease_ms, fence_s = first.now_ms(), first.fence_s()
    assert (second.now_ms(), second.fence_s()) == (lease_ms, fence_s)  # one lease clock per loop
    real = time.monotonic()
    await asyncio.sleep(3600)  # an hour of the loop's time, none of the wall's
    assert time.monotonic() - real < 60
    assert (first.now_ms() - lease_ms, first.fence_s() - fence_s) == (3_600_000, pytest.approx(3600))
    first.stall(2.5)
    first.step_ms(-40)
    assert first.fence_s() - second.fence_s() == pytest.approx(2.5)
    assert first.now_ms() - second.now_ms() == 2_460
    with pytest.raises(ValueError):
        first.stall(-1)


def answers(offset_ms: float, count: int, seed: int, start_ms: float = 1_700_000_000_000.0,
            rtt_ms: float = 4.0) -> list[tuple[float, float, float]]:
    """``count`` simulated answers from server time ``start_ms`` on: (sent, received) on a fence clock
    ``offset_ms`` ahead of the server, each dated by the server in whole seconds at a random moment of the
    request."""
    rng = random.Random(seed)
    samples = []
    server_ms = start_ms
    for _ in range(count):
        server_ms += rng.uniform(10.0, 400.0)
        processed_at = server_ms + rng.uniform(0.0, rtt_ms)
        sent = server_ms + offset_ms
        received = server_ms + rtt_ms + offset_ms
        date = processed_at - processed_at % 1000.0
        samples.append((sent, received, date))
        server_ms += rtt_ms
    return samples


@given(offset_ms=st.floats(-5_000.0, 5_000.0), seed=st.integers(0, 1000))
def test_bounds_always_contain_the_true_offset(offset_ms: float, seed: int) -> None:
    estimator = SkewEstimator()
    for sent, received, date in answers(offset_ms, 40, seed):
        estimator.add(sent, received, date)
    bounds = estimator.bounds(0.0)
    assert bounds is not None
    lower, upper = bounds
    assert lower < offset_ms <= upper


def test_many_answers_narrow_the_bounds_far_below_the_header_resolution() -> None:
    estimator = SkewEstimator()
    for sent, received, date in answers(1_234.0, 200, seed=7):
        estimator.add(sent, received, date)
    bounds = estimator.bounds(0.0)
    assert bounds is not None
    assert bounds[1] - bounds[0] < 50.0


def test_no_bounds_until_enough_answers_agree() -> None:
    estimator = SkewEstimator(min_samples=4)
    for sent, received, date in answers(0.0, 3, seed=1):
        estimator.add(sent, received, date)
    assert estimator.bounds(0.0) is None


@given(offset_ms=st.floats(-5_000.0, 5_000.0), seed=st.integers(0, 1000),
       steps=st.lists(st.floats(-1_500.0, 1_500.0), min_size=1, max_size=4))
def test_bounds_follow_every_step_of_the_lease_clock_at_once(offset_ms: float, seed: int, steps: list[float]) -> None:
    """Steps of the lease clock, sub-second ones included, never reach the samples (timed on the fence
    clock): the bounds contain the lease clock's new offset as soon as it steps, with no answer since."""
    estimator = SkewEstimator()
    for sent, received, date in answers(offset_ms, 40, seed):
        estimator.add(sent, received, date)
    lease_ahead = 0.0
    for step in steps:
        lease_ahead += step
        bounds = estimator.bounds(lease_ahead)
        assert bounds is not None
        assert bounds[0] < offset_ms + lease_ahead <= bounds[1]


def test_a_step_of_the_servers_clock_replaces_the_old_estimate() -> None:
    """After the server's clock jumps 3 s behind, the estimate follows it instead of the older answers."""
    estimator = SkewEstimator(min_samples=4)
    before = answers(0.0, 50, seed=2)
    after = answers(3_000.0, 50, seed=3, start_ms=1_700_000_100_000.0)  # 100 s later on the server
    for sent, received, date in before:
        estimator.add(sent, received, date)
    first = estimator.bounds(0.0)
    assert first is not None and first[0] < 0.0 <= first[1]
    for sent, received, date in after:
        estimator.add(sent, received, date)
    stepped = estimator.bounds(0.0)
    assert stepped is not None and stepped[0] < 3_000.0 <= stepped[1]


def test_an_answer_received_before_it_was_sent_is_refused() -> None:
    with pytest.raises(ValueError, match="received before"):
        SkewEstimator().add(sent_ms=10.0, received_ms=9.0, server_date_ms=0.0)
