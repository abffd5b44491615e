"""Tests of harness.region.failover's RTO budget: the timings terraform deploys (terraform/modules/failover's
timings.json) meet the 60 s target at scale 1, and the standard 30 s health checks would not."""

from __future__ import annotations

import pytest

from fleet.config import FleetConfig
from harness.region.failover import TARGET_RTO_S, rto_budget_s
from harness.region.route53 import DEPLOYED, HealthCheckSpec

HARDENED = FleetConfig(profile="hardened", worker_id="w", timescale=0.1)


def test_the_deployed_timings_meet_the_rto_target_at_scale_1() -> None:
    budget = rto_budget_s(HARDENED)
    assert budget["detected"] == DEPLOYED["failure_threshold"] * DEPLOYED["request_interval_s"] == 30
    assert budget["activated"] == pytest.approx(30 + 15 + 3 + 2)  # the old region's gate lease, timeout, margin
    assert budget["resumed"] <= TARGET_RTO_S
    assert budget["client"] == 30 + DEPLOYED["record_ttl_s"]


def test_standard_health_checks_would_miss_the_target() -> None:
    budget = rto_budget_s(HARDENED, HealthCheckSpec(request_interval_s=30))
    assert budget["detected"] == 90 and budget["resumed"] > TARGET_RTO_S
