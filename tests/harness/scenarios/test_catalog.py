"""The catalog as scenario files: schedules are a function of the seed, bounds are computed per profile and
scale (the scale-1 value too), and every scenario has a bound."""

from __future__ import annotations

import pytest

from fleet.config import FleetConfig
from harness.faults.plane import REGISTRY
from harness.scenarios.catalog import CATALOG_DIR, SCENARIOS, schedule


def config(profile: str = "hardened", timescale: float = 0.1) -> FleetConfig:
    return FleetConfig(profile=profile, timescale=timescale, worker_id="t")  # type: ignore[arg-type]


def test_the_catalog_is_its_files_in_order() -> None:
    assert list(SCENARIOS) == ["crash", "crash_notice", "graceful", "pause", "partition_aws", "partition_upstream",
                               "mid_op_drop", "clock_skew", "aws_5xx", "aws_slow", "aws_throttle", "reconnect_storm",
                               "scale_out", "sqs_faults"]
    assert {spec.path for spec in SCENARIOS.values()} == {str(p) for p in CATALOG_DIR.glob("*.yaml")}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_same_seed_gives_the_same_schedule(name: str) -> None:
    first = [s.to_json() for s in schedule(name, 7, config(), 3)]
    again = [s.to_json() for s in schedule(name, 7, config(), 3)]
    assert first == again
    assert all(step["kind"] in REGISTRY for step in first)


def test_different_seeds_move_the_faults() -> None:
    timings = {tuple(s.at_s for s in schedule("crash", seed, config(), 3)) for seed in range(10)}
    assert len(timings) == 10
    assert all(0 <= s.at_s <= config().heartbeat_s for seed in range(10) for s in schedule("crash", seed, config(), 3))


def bound(name: str, profile: str = "hardened", timescale: float = 0.1) -> dict[str, float]:
    return SCENARIOS[name].expand(profile, 1, config(profile, timescale), 3).bound_ms


def test_bounds_follow_profile_and_scale() -> None:
    assert bound("crash", "blog") == {"kill": pytest.approx(8_000)}          # (20 s + 60 s) x 0.1
    assert bound("crash", "blog", 1.0) == {"kill": pytest.approx(80_000)}
    assert bound("crash") == {"kill": pytest.approx(2_200 + 1_000)}          # lease + 10 %, 1 s of work
    assert bound("graceful") == {"term": 2_000, "restart": 2_000}           # a latency: not scaled
    assert bound("graceful", timescale=1.0) == {"term": 2_000, "restart": 2_000}
    assert bound("partition_upstream") == {"partition_upstream": pytest.approx(2_000 + 1_000 + 200 + 500)}
    assert bound("mid_op_drop") == dict.fromkeys(("aws_reset", "aws_timeout", "reset_upstream"), pytest.approx(1_200))


def test_the_scale_one_bound_is_computed_not_scaled() -> None:
    plan = SCENARIOS["crash"].expand("hardened", 1, config(), 3)
    assert plan.bound_scale1_ms == {"kill": pytest.approx(22_000 + 1_000)}  # not 3_200 / 0.1 = 32_000


@pytest.mark.parametrize("profile", ["hardened", "blog"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_fault_kind_has_a_bound(name: str, profile: str) -> None:
    plan = SCENARIOS[name].expand(profile, 3, config(profile), 3)
    assert set(plan.bound_ms) == {s.kind for s in plan.steps}


def test_clock_skew_stays_within_the_configured_tolerance() -> None:
    offsets = set()
    for seed in range(20):
        (step,) = schedule("clock_skew", seed, config(), 3)
        assert abs(step.params["offset_ms"]) == config().scaled_ms(config().clock_tolerance_ms)
        offsets.add(step.params["offset_ms"])
    assert offsets == {100, -100}


def test_mid_op_drop_hits_two_different_workers() -> None:
    for seed in range(20):
        steps = schedule("mid_op_drop", seed, config(), 3)
        assert steps[1].target != steps[2].target


def test_clock_skew_is_bounded_by_its_length_plus_the_takeover_bound() -> None:
    assert bound("clock_skew") == {"clock_skew": pytest.approx(6_000 + 2_200 + 1_000)}


def test_a_partial_throttle_is_bounded_by_its_length_plus_the_takeover_bound() -> None:
    # the throttled worker's streams ride it out; a renewal refused past the fence would mean a takeover
    expected = pytest.approx(3_000 + 2_200 + 1_000)
    assert bound("aws_throttle") == dict.fromkeys(("aws_throttle", "sqs_throttle"), expected)
    (dynamodb, sqs) = schedule("aws_throttle", 1, config(), 3)
    assert (dynamodb.target, sqs.target) == ("busiest", "busiest")  # one worker, resolved when the steps run
    assert 0 < dynamodb.params["fraction"] < 1 and dynamodb.duration_s == sqs.duration_s == pytest.approx(3.0)

