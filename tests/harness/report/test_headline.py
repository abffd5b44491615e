"""One run's headline, and the tables it summarises: zombie writes, the fault model, the outcome counts and
the load ``run.start`` names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.report.headline import fault_model_text, headline
from harness.report.model import load_run
from harness.report.tables import outcomes_table, zombie_writes_table
from tests.harness.report.histories import T0, add_zombie_writes, read_events, small_run


def test_zombie_writes_show_in_the_headline_and_their_table(tmp_path: Path) -> None:
    small_run(tmp_path)
    seqs = add_zombie_writes(tmp_path, count=3)
    run = load_run(tmp_path, lambda _: None)
    lines = dict(headline(run))
    assert lines["Zombie writes"].startswith("3 (overwrite 3); 0 possible; ")
    assert "zombie_writes: INVALID" in lines["Verdict"]
    table = zombie_writes_table(run)
    assert table["seqs"].tolist() == [str(seq) for seq in seqs]
    assert set(zip(table["writer"], table["epoch"], table["rule"], table["certain"], strict=True)) == {
        ("worker-1", 1, "overwrite", "yes")}
    assert set(table["superseded_s"]) == {"7.300"}  # worker-2's epoch-2 write of those seqs, 7.3 s in


def test_a_run_without_zombie_writes_says_so(tmp_path: Path) -> None:
    small_run(tmp_path)
    add_zombie_writes(tmp_path, count=0)
    run = load_run(tmp_path, lambda _: None)
    stored = sum(len(e["items"]) for e in read_events(tmp_path) if e["type"] == "final.persisted")
    assert dict(headline(run))["Zombie writes"].startswith(f"0; 0 possible; {stored} stored items judged")
    assert zombie_writes_table(run).empty


@pytest.mark.parametrize("stated, says", [
    (None, "not stated"),
    ("within", "within the model"),
    ("outside: clock skew 500 ms > tolerance 10 ms", "OUTSIDE the fault model (clock skew 500 ms > tolerance "
                                                     "10 ms)"),
])
def test_the_headline_states_the_fault_model(tmp_path: Path, stated: str | None, says: str) -> None:
    small_run(tmp_path, fault_model=stated)  # invalid: a duplicate claim and lost seqs
    lines = dict(headline(load_run(tmp_path, lambda _: None)))
    assert lines["Fault model"].startswith(says)
    outside = stated is not None and stated.startswith("outside")
    assert ("invalid under them" in lines["Fault model"]) is outside
    assert lines["Verdict"].endswith("under faults outside the fault model") is outside


def test_a_valid_run_outside_the_model_is_still_said_to_be_outside() -> None:
    text = fault_model_text({"stated": "outside: clock skew 500 ms > tolerance 10 ms", "within": False,
                             "flag": None})
    assert text.startswith("OUTSIDE the fault model") and "invalid" not in text


def test_outcome_counts_name_the_failing_event_types(tmp_path: Path) -> None:
    small_run(tmp_path)
    with (tmp_path / "history" / "worker-3.jsonl").open("a") as handle:
        for outcome in ("fail", "fail", "info"):
            handle.write(json.dumps({"t": T0 + 6000, "src": "worker-3", "type": "lease.acquire", "pk": "CONN#a",
                                     "worker": "worker-3", "epoch": 2, "outcome": outcome}) + "\n")
    run = load_run(tmp_path, lambda _: None)
    expected: dict[str, dict[str, int]] = {}
    for event in read_events(tmp_path):
        if "outcome" in event:
            counts = expected.setdefault(event["type"], {"ok": 0, "fail": 0, "info": 0})
            counts[event["outcome"]] += 1
    table = outcomes_table(run)
    assert table.iloc[0]["event"] == "lease.acquire" and table.iloc[0]["fail"] == 2  # failing types first
    assert {row.pop("event"): row for row in table.to_dict("records")} == expected
    totals = {name: sum(counts[name] for counts in expected.values()) for name in ("ok", "fail", "info")}
    assert dict(headline(run))["Outcomes"] == (f"ok {totals['ok']:,} · fail 2 · info 1 "
                                               "(fail: lease.acquire 2)")


def test_the_headline_names_the_load_a_run_start_gives(tmp_path: Path) -> None:
    """A ``wsfleet up`` run's ``run.start`` names its load (clients START the streams)."""
    small_run(tmp_path, scenario="up")
    path = next((tmp_path / "history").glob("harness*.jsonl"))
    events = [json.loads(line) for line in path.read_text().splitlines()]
    events[0]["load"] = "5 msg/s per stream, streams STARTed by clients"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert dict(headline(load_run(tmp_path, lambda _: None)))["Scenario"] == \
        "up, 5 msg/s per stream, streams STARTed by clients (seed 1)"
