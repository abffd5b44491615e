"""The scenario catalog: schedules are a function of the seed, bounds follow the profile and scale."""

from __future__ import annotations

import pytest

from fleet.config import FleetConfig
from harness.faults.plane import REGISTRY
from harness.scenarios.catalog import HANDOFF_BOUND_MS, SCENARIOS, WORK_ALLOWANCE_MS, schedule


def config(profile: str = "hardened", timescale: float = 0.1) -> FleetConfig:
    return FleetConfig(profile=profile, timescale=timescale, worker_id="t")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_same_seed_gives_the_same_schedule(name: str) -> None:
    first = [s.to_json() for s in schedule(name, 7, config(), 3)]
    again = [s.to_json() for s in schedule(name, 7, config(), 3)]
    assert first == again
    assert all(step["kind"] in REGISTRY for step in first)


def test_different_seeds_move_the_faults() -> None:
    timings = {tuple(s.at_s for s in schedule("crash", seed, config(), 3)) for seed in range(10)}
    assert len(timings) == 10


def test_bounds_follow_profile_and_scale() -> None:
    assert SCENARIOS["crash"].bound(config("blog")) == pytest.approx(8_000)          # (20 s + 60 s) x 0.1
    assert SCENARIOS["crash"].bound(config("blog", 1.0)) == pytest.approx(80_000)
    assert SCENARIOS["crash"].bound(config()) == pytest.approx(2_200 + WORK_ALLOWANCE_MS)
    assert SCENARIOS["graceful"].bound(config()) == HANDOFF_BOUND_MS
    assert SCENARIOS["clock_skew"].bound(config()) is None


def test_clock_skew_stays_within_the_configured_tolerance() -> None:
    for seed in range(20):
        (step,) = schedule("clock_skew", seed, config(), 3)
        assert abs(step.params["offset_ms"]) <= config().scaled_ms(config().clock_tolerance_ms)
