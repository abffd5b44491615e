"""The region failover report from results alone (no regions run): the gated variant's claims decide its
status, so a split brain, a lost sequence or a slow recovery each make it fail; every variant's split
brain is in one table, the phases and the data in theirs."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from harness.region.failover import rto_bound_s
from harness.report.region import gated_holds, region_document, write_region_report
from harness.report.render import Headline, Table, to_markdown

PHASES = {"detected": 3.0, "answer": 3.0, "activated": 4.7, "claimed": 5.1, "connected": 5.2, "resumed": 6.5}


def gated(**outage: Any) -> dict[str, Any]:
    return {"variant": "gate", "description": "hardened with the gate", "profile": "hardened", "gate": True,
            "timescale": 0.1, "streams": 6, "pause_s": 12.0, "conflicts": 0, "route53": [
                {"failover": "PRIMARY", "set_identifier": "primary", "ttl_s": 30, "check_interval_s": 10,
                 "failure_threshold": 3}],
            "split_brain": {"streams": 0, "overlap_ms": 0, "pks": []},
            "outage": {"kind": "region", "phases": {n: {"p50_s": t - 0.2, "last_s": t} for n, t in PHASES.items()},
                       "client_s": 6.1, "rto_s": 6.5, "rto_bound_s": rto_bound_s(0.1),
                       "target_rto_s_at_scale_1": 60.0, "replication_backlog_at_cut": 3, "redelivered": 3,
                       "lost": 0, "rpo": {"messages": {"lost": 0}, "control": {"starts": 1, "stops": 0}},
                       **outage}}


def ungated() -> dict[str, Any]:
    return {"variant": "no-gate", "description": "hardened without the gate", "profile": "hardened",
            "gate": False, "timescale": 0.1, "streams": 6, "pause_s": 12.0, "conflicts": 6,
            "split_brain": {"streams": 6, "overlap_ms": 61234.5, "pks": ["c000"]}, "outage": None}


def status(results: list[dict[str, Any]]) -> str:
    headline = region_document(results).sections[0].blocks[0]
    assert isinstance(headline, Headline)
    return headline.status


def test_the_bound_scales_the_timers_not_the_work() -> None:
    assert rto_bound_s(1.0) == 60.0
    assert rto_bound_s(0.1) == pytest.approx(57 * 0.1 + 3)


def test_the_gated_variant_holding_passes_beside_an_ungated_split_brain() -> None:
    assert status([gated(), ungated()]) == "pass"
    clean = {"both_on": 0, "early_failbacks": 0, "activated_unhealthy": 0, "flapping": 0}
    assert status([{**gated(), "activation": clean}, ungated()]) == "pass"


def split_brain(result: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(result)
    result["split_brain"] = {"streams": 1, "overlap_ms": 40.0, "pks": ["c003"]}
    return result


FAILBACK_PHASES = {n: {"p50_s": t, "last_s": t} for n, t in PHASES.items()}


@pytest.mark.parametrize("result", [
    gated(lost=2), gated(rto_s=9.0), split_brain(gated()),
    gated(rpo={"messages": {"lost": 2}, "control": {"starts": 0, "stops": 0}}),
    gated(split_brain={"streams": 1, "overlap_ms": 30.0}),
    gated(failback={"phases": FAILBACK_PHASES, "rto_s": 6.5, "split_brain": 1, "lost_in_primary": 0}),
    gated(failback={"phases": FAILBACK_PHASES, "rto_s": 6.5, "split_brain": 0, "lost_in_primary": 3}),
    {**gated(), "activation": {"both_on": 0, "early_failbacks": 1, "activated_unhealthy": 0, "flapping": 0}},
    {**gated(), "activation": {"both_on": 1, "early_failbacks": 0, "activated_unhealthy": 0, "flapping": 0}},
    {**gated(), "activation": {"both_on": 0, "early_failbacks": 0, "activated_unhealthy": 0, "flapping": 0,
                               "missing_writes": 1}},
], ids=["lost", "slow", "split-brain", "acknowledged-lost", "outage-split-brain", "failback-split-brain",
        "failback-replica-lacks", "early-failback", "both-regions-on", "activated-lacking"])
def test_each_broken_claim_fails_the_report(result: dict[str, Any]) -> None:
    assert not gated_holds(result)
    assert status([result, ungated()]) == "fail"


def test_a_dynamodb_outage_has_no_bound_and_says_the_operator_moved_the_activation() -> None:
    dynamodb = gated(kind="dynamodb", rto_bound_s=None, rto_s=9.5, client_s=None, zone_answer="east",
                     operator_s=7.2, consumed_at_operator=0)
    dynamodb["variant"] = "dynamodb"
    assert gated_holds(dynamodb) and status([gated(), dynamodb]) == "pass"
    page = to_markdown(region_document([gated(), dynamodb]))
    assert "7.2 s of it waiting for the operator" in page and "the zone still answered east" in page
    assert "0.1 (health checks every 1 s x 3, TTL 3 s)" in page
    assert status([gated(), {**dynamodb, "outage": {**dynamodb["outage"], "lost": 1}}]) == "fail"


def test_without_a_gated_outage_nothing_is_claimed() -> None:
    assert status([ungated()]) == "unknown"


def test_tables_and_files(tmp_path: Path) -> None:
    document = region_document([gated(failback={"phases": FAILBACK_PHASES, "rto_s": 6.5, "split_brain": 0,
                                                 "lost_in_primary": 0}), ungated()])
    tables = {b.title: b.frame for s in document.sections for b in s.blocks if isinstance(b, Table)}
    assert tables["split brain"][["variant", "streams_in_both_regions", "conflicts_resolved"]].values.tolist() == [
        ["gate", 0, 0], ["no-gate", 6, 6]]
    assert tables["phases"]["last_stream_s"].tolist() == list(PHASES.values())
    assert tables["data"].iloc[0].tolist() == [0, 1, 0, 3, 3, 0]
    assert tables["failback phases"]["last_stream_s"].tolist() == list(PHASES.values())
    report = write_region_report([gated(), ungated()], tmp_path)
    assert report.exists() and (tmp_path / "report.md").exists()
    assert (tmp_path / "figures" / "region_phases_gate.png").exists()


def test_what_each_activated_region_lacked_is_tabled_per_variant() -> None:
    lacking = {**gated(), "activation_gaps": {"activations": 2, "findings": 0, "answering": {"liveness": 2},
                                              "unreplicated": {"checkpoint": 1},
                                              "other_out": {"log": 3, "lease_epoch": 1}}}
    unsafe = {**gated(), "variant": "no-wait",
              "activation_gaps": {"activations": 2, "findings": 1, "answering": {"log": 2}, "other_out": {}}}
    document = region_document([lacking, unsafe, ungated()])
    tables = {b.title: b.frame for s in document.sections for b in s.blocks if isinstance(b, Table)}
    assert tables["missing at activation"].values.tolist() == [
        ["gate", 2, 0, "liveness 2", "checkpoint 1", "log 3, lease_epoch 1"],
        ["no-wait", 2, 1, "log 2", "none", "none"]]
    assert "missing at activation" not in {b.title for s in region_document([gated()]).sections for b in s.blocks
                                           if isinstance(b, Table)}
