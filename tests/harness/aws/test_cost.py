"""Tests of harness.aws.cost: the ceiling of a run's load and its bill, line by line."""

from __future__ import annotations

import pytest

from fleet.config import FleetConfig
from harness.aws.cost import PRICES, SETUP_S, RunLoad, estimate, message_write_units, run_ceiling_s
from harness.scenarios.scenario_file import Op, Plan, Step

CONFIG = FleetConfig(profile="hardened", timescale=1.0, worker_id="harness")


def test_the_run_ceiling_is_every_phase_at_its_longest() -> None:
    plan = Plan([Step(3.0, "pause", "worker-1", 40.0)], [Op(50.0, "stop", "random")], {"pause": 23_000.0}, {})
    lease = CONFIG.lease_s
    assert run_ceiling_s(plan, CONFIG) == pytest.approx(SETUP_S + lease + 50.0 + 2 * 23.0 + 2 * lease + 5 * lease)


def bill(profile: str = "hardened", rate: float = 5.0, seconds: float = 600.0) -> dict[str, float]:
    config = FleetConfig(profile=profile, timescale=1.0, worker_id="harness")  # type: ignore[arg-type]
    load = RunLoad(seconds, workers=3, connections=30, rate=rate, operations=30, fis_action_minutes=2,
                   config=config)
    return {line.item: line.usd for line in estimate(load)}


def test_each_line_is_its_quantity_at_its_price_and_the_largest_comes_first() -> None:
    lines = estimate(RunLoad(3600.0, 3, 30, 5.0, 30, 2, CONFIG))
    assert [line.usd for line in lines] == sorted((line.usd for line in lines), reverse=True)
    fargate = next(line for line in lines if line.item == "fargate_vcpu")
    assert fargate.quantity == pytest.approx(4 * 0.5)  # three workers and the simulator, half a vCPU, an hour
    assert fargate.usd == pytest.approx(fargate.quantity * PRICES["fargate_vcpu"][0])
    assert next(line for line in lines if line.item == "fis").usd == pytest.approx(0.20)


def test_the_published_design_pays_a_unit_per_message_and_hardened_one_per_batch() -> None:
    assert bill("blog", rate=10.0)["dynamodb_write"] > 1.9 * bill("blog", rate=5.0)["dynamodb_write"]
    # 5 messages a second, flushed every second: one batch of 5 small messages is one unit
    assert message_write_units(600.0, 5.0, CONFIG.with_changes(flush_ms=1000)) == pytest.approx(600.0 / 5)
    assert message_write_units(600.0, 5.0, CONFIG.with_changes(flush_ms=200)) == pytest.approx(600.0)
    assert message_write_units(600.0, 5.0, FleetConfig(profile="blog", timescale=1.0, worker_id="h")) == 600.0
    # a batch over 1 KB costs a unit per KB started: 100 messages of 52 bytes are 5.08 KB, 6 units
    assert message_write_units(1000.0, 100.0, CONFIG.with_changes(flush_ms=1000)) == pytest.approx(10 * 6)
    assert bill("hardened")["dynamodb_write"] < bill("blog")["dynamodb_write"] / 2
