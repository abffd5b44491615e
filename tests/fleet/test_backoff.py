"""Tests of fleet.backoff: each policy's formula exactly (the bounds of every draw, the delays they give),
caps, resets, the exponent that cannot overflow, replay from a seed, and the upstream's Retry-After."""

from __future__ import annotations

import random

import pytest

from fleet.backoff import POLICIES, Backoff, Step, honour_retry_after
from fleet.errors import ConfigError

BASE, CAP = 0.5, 6.0


class Draws(random.Random):
    """Answers every ``uniform(a, b)`` with the point ``share`` of the way from a to b, recording (a, b)."""

    def __init__(self, share: float) -> None:
        super().__init__(0)
        self.share = share
        self.bounds: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.bounds.append((a, b))
        return a + self.share * (b - a)


def delays(name: str, rng: random.Random, count: int = 6) -> list[float]:
    backoff = Backoff(name, BASE, CAP, rng)
    return [backoff.next_delay() for _ in range(count)]


def test_none_waits_the_base_every_time_without_drawing() -> None:
    rng = Draws(0.5)
    assert delays("none", rng) == [0.5] * 6
    assert rng.bounds == []


def test_exponential_doubles_from_the_base_up_to_the_cap_without_drawing() -> None:
    rng = Draws(0.5)
    assert delays("exponential", rng) == [0.5, 1.0, 2.0, 4.0, 6.0, 6.0]
    assert rng.bounds == []


def test_full_jitter_draws_between_zero_and_the_exponential_ceiling() -> None:
    rng = Draws(0.5)
    assert delays("full", rng) == [0.25, 0.5, 1.0, 2.0, 3.0, 3.0]
    assert rng.bounds == [(0.0, 0.5), (0.0, 1.0), (0.0, 2.0), (0.0, 4.0), (0.0, 6.0), (0.0, 6.0)]


@pytest.mark.parametrize(("share", "expected"), [
    (0.0, [0.25, 0.5, 1.0, 2.0, 3.0, 3.0]),  # the least: half the ceiling
    (1.0, [0.5, 1.0, 2.0, 4.0, 6.0, 6.0]),  # the most: the ceiling
])
def test_equal_jitter_keeps_half_the_ceiling_and_draws_the_other_half(share: float, expected: list[float]) -> None:
    rng = Draws(share)
    assert delays("equal", rng) == expected
    assert rng.bounds == [(0.0, 0.25), (0.0, 0.5), (0.0, 1.0), (0.0, 2.0), (0.0, 3.0), (0.0, 3.0)]


def test_decorrelated_jitter_draws_from_the_base_to_three_times_its_previous_delay_capped() -> None:
    rng = Draws(1.0)
    assert delays("decorrelated", rng, 4) == [1.5, 4.5, 6.0, 6.0]
    assert rng.bounds == [(0.5, 1.5), (0.5, 4.5), (0.5, 13.5), (0.5, 18.0)]  # the previous delay is the capped one


def test_decorrelated_jitter_stays_at_the_base_when_every_draw_is_the_lowest() -> None:
    rng = Draws(0.0)
    assert delays("decorrelated", rng, 3) == [0.5, 0.5, 0.5]
    assert rng.bounds == [(0.5, 1.5)] * 3


@pytest.mark.parametrize(("name", "first_bounds"), [("full", (0.0, 0.5)), ("decorrelated", (0.5, 1.5))])
def test_a_reset_starts_again_from_the_first_step(name: str, first_bounds: tuple[float, float]) -> None:
    rng = Draws(1.0)
    backoff = Backoff(name, BASE, CAP, rng)
    for _ in range(5):
        backoff.next_delay()
    backoff.reset()
    rng.bounds.clear()
    backoff.next_delay()
    assert rng.bounds == [first_bounds]


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_a_seed_replays_the_same_delays_and_none_exceeds_the_cap_after_thousands_of_attempts(name: str) -> None:
    first = delays(name, random.Random(7), 5000)
    assert delays(name, random.Random(7), 5000) == first
    assert min(first) >= 0.0 and max(first) <= CAP


def test_the_exponent_stops_so_the_ceiling_never_overflows() -> None:
    assert Step(attempt=10**9, previous_s=BASE, base_s=BASE, cap_s=CAP).ceiling_s == CAP
    assert Step(attempt=10**9, previous_s=1.0, base_s=1e300, cap_s=CAP).ceiling_s == CAP
    backoff = Backoff("exponential", BASE, CAP, random.Random(1))
    backoff.attempt = 10**9
    assert backoff.next_delay() == CAP


def test_an_unknown_policy_is_refused_with_the_names() -> None:
    with pytest.raises(ConfigError, match="'fibonacci': one of none, exponential, full, equal, decorrelated"):
        Backoff("fibonacci", BASE, CAP, random.Random(1))


@pytest.mark.parametrize(("delay_s", "retry_after_s", "expected"), [
    (0.3, None, 0.3),  # nothing asked: the policy's delay
    (0.3, 2.0, 2.0),  # waits at least what the upstream asked for
    (0.3, 20.0, CAP),  # but no longer than the cap
    (5.0, 2.0, 5.0),  # and never less than the policy's delay
])
def test_retry_after_raises_the_delay_up_to_the_cap(delay_s: float, retry_after_s: float | None,
                                                    expected: float) -> None:
    assert honour_retry_after(delay_s, retry_after_s, CAP) == expected


def test_retry_after_does_not_move_the_policy_s_own_sequence() -> None:
    rng = Draws(1.0)
    backoff = Backoff("decorrelated", BASE, CAP, rng)
    assert backoff.next_delay(retry_after_s=4.0) == 4.0
    assert backoff.next_delay() == 4.5  # drawn from 3 × the policy's previous 1.5, not from the 4 s waited
    assert rng.bounds == [(0.5, 1.5), (0.5, 4.5)]
