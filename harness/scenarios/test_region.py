"""The region failover scenario as a CI gate (``pytest harness/scenarios -k region``): the standby region
behind Route 53 failover and Global Tables (``harness.region.failover``), with the region activation gate
and without it, in one report.

* ``gate``: a replication pause makes no stream consumed in both regions; the primary's outage is detected
  by its health check, the name answers the standby after the TTL, the activation moves, and the standby
  consumes every stream again within the RTO bound, with nothing lost (what the primary had not replicated
  is re-delivered);
* ``no-gate``: the same pause makes the standby consume streams the primary still consumes: the split-brain
  measure flags it (and so can fail).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.history import read_history
from harness.region.failover import PHASES, VARIANTS, FailoverError, FailoverSetup, run_region_failover
from harness.region.regions import RegionsPool, RegionsSpec
from harness.region.routing_control import HOLD
from harness.report.region import write_region_report
from harness.scenarios.gate import progress_reporter

pytestmark = pytest.mark.e2e
CI_VARIANTS = ("gate", "no-gate")


@pytest.fixture(scope="module")
def region_failover(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict[str, Any]:
    """Both variants run once, and their report written, for the tests of this module."""
    out = tmp_path_factory.mktemp("region_failover")
    timescale = request.config.getoption("--scenario-timescale") or 0.1
    progress = progress_reporter(request)
    results: dict[str, Any] = {}
    # one pool for both (as a batch runs): the second variant runs on what the first left, with fresh state
    with RegionsPool(RegionsSpec(timescale=timescale, run_dir=out / "pool")) as pool:
        for name in CI_VARIANTS:
            setup = FailoverSetup(VARIANTS[name], out / name, timescale=timescale)
            setup.run_dir.mkdir()
            try:
                results[name] = run_region_failover(setup, progress, pool)
            except FailoverError as exc:  # this variant's test fails on it; the other variant still runs
                results[name] = exc
    report = write_region_report([r for r in results.values() if isinstance(r, dict)], out)
    return {"results": results, "report": report}


@pytest.mark.parametrize("variant", CI_VARIANTS, ids=lambda name: f"region_failover-{name}")
def test_region_failover(region_failover: dict[str, Any], variant: str) -> None:
    result = region_failover["results"][variant]
    if isinstance(result, FailoverError):
        raise result
    # the zone as Route 53 holds it: terraform's definitions (tests/deploy compares those with terraform/)
    assert sorted((r["failover"], r["set_identifier"], r["ttl_s"], r["check_interval_s"], r["failure_threshold"])
                  for r in result["route53"]) == [("PRIMARY", "primary", 30, 10, 3),
                                                  ("SECONDARY", "standby", 30, 10, 3)]
    history = read_history(Path(result["run_dir"]))
    # runs on one pool are independent: nothing of the gated run (before it) is in this one's history
    streams = {pk for pk in history["pk"].dropna() if str(pk).startswith("CONN#")}
    assert streams and all(pk.startswith(f"CONN#{variant}-") for pk in streams), streams
    if variant == "no-gate":
        assert result["split_brain"]["streams"] > 0 and result["split_brain"]["overlap_ms"] > 0
        assert result["outage"] is None
        return
    assert result["split_brain"] == {"streams": 0, "overlap_ms": 0, "pks": []}
    assert not any(result["activation"].values()), result["activation"]  # harness.region.checks over the run
    outage = result["outage"]
    assert outage["lost"] == 0
    assert outage["rto_s"] <= outage["rto_bound_s"], outage["phases"]
    phases = [outage["phases"][name]["last_s"] for name in PHASES]
    assert phases == sorted(phases), outage["phases"]
    # detection takes the failure threshold's probes: 3 intervals of 10 s, scaled
    assert outage["phases"]["detected"]["last_s"] >= 2 * 10 * result["timescale"]
    # a client keeps its cached answer (the TTL) after the zone changed it
    assert outage["client_s"] >= outage["phases"]["answer"]["last_s"]
    assert outage["client_s"] >= 3 * 10 * result["timescale"]
    # failback: the primary healthy again, answered, activated, its workers take over, no overlap, and its
    # tables (replicated from the standby's) hold every sequence
    failback = outage["failback"]
    assert failback["split_brain"] == 0 and failback["lost_in_primary"] == 0
    back = [failback["phases"][name]["last_s"] for name in PHASES]
    assert back == sorted(back), failback["phases"]
    # the activation moved: east Off first, west On a gate's lease later (never both On)
    gates = history[(history["src"] == "route53") & (history["type"] == "gate.state") & (history["region"] != HOLD)]
    moves = [(r.region, r.state, r.t) for r in gates.itertuples()][-4:-2]  # then back, in failback
    assert [(region, state) for region, state, _ in moves] == [("us-east-1", "Off"), ("us-west-2", "On")]
    assert moves[1][2] > moves[0][2]

def test_region_failover_report(region_failover: dict[str, Any]) -> None:
    html = region_failover["report"].read_text(encoding="utf-8")
    assert "Split brain under a replication pause" in html and "Recovery from the primary" in html
    assert all(name in html for name in CI_VARIANTS)
