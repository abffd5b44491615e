"""The report's wording: bounds stated as computed (the scale-1 figure from the scenario catalog, never the
bound divided by the scale), seeds, verdict words, request errors, zombie writes, the fault model and the
outcome counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.report.model import load_run
from harness.report.summary import (
    bound_text,
    bound_texts,
    bounds_at_scale_one,
    fault_model_text,
    headline,
    outcomes_table,
    published_bound_text,
    requests_table,
    seconds_text,
    seed_text,
    verdict_word,
    zombie_writes_table,
)
from tests.harness.report.histories import T0, add_zombie_writes, read_events, small_run


@pytest.mark.parametrize("ms, scale, scale_one, text", [
    (2700.0, 0.1, 22500.0, "2.7 s at time scale 0.1 (22.5 s at scale 1)"),
    (2700.0, 0.1, None, "2.7 s at time scale 0.1"),
    (80000.0, 1.0, 80000.0, "80 s at time scale 1"),
    (1000.0, None, None, "1 s"),
])
def test_bound_text(ms: float, scale: float | None, scale_one: float | None, text: str) -> None:
    assert bound_text(ms, scale, scale_one) == text


@pytest.mark.parametrize("profile, bound_ms, scale_one", [
    ("hardened", 2700.0, 22500.0),  # e.g. 1.1 × lease + an unscaled 0.5 s work allowance
    ("blog", 8000.0, 80000.0),      # lease + reconcile: all of it scales
    ("hardened", 2700.0, None),     # a run that did not record the scale-1 bound: no scale-1 claim
])
def test_the_scale_one_bound_is_the_one_the_run_recorded(
    tmp_path: Path, profile: str, bound_ms: float, scale_one: float | None
) -> None:
    small_run(tmp_path, profile=profile, bound_ms=bound_ms, bound_scale1_ms=scale_one)
    run = load_run(tmp_path, lambda _: None)
    assert bounds_at_scale_one(run) == ({"bound": scale_one} if scale_one is not None else {})
    at_one = f" ({scale_one / 1000:g} s at scale 1)" if scale_one is not None else ""
    assert bound_texts(run) == {"bound": f"{bound_ms / 1000:g} s at time scale 0.1{at_one}"}
    assert published_bound_text(run) == "8 s at time scale 0.1 (80 s at scale 1)"


def test_small_words() -> None:
    words = [verdict_word(v) for v in (True, False, "unknown", None)]
    assert words == ["valid", "INVALID", "unknown", "unknown"]
    assert [seed_text(s) for s in (1.0, 7, "abc", None)] == ["1", "7", "abc", "?"]
    assert [seconds_text(v) for v in (2400.0, None, float("nan"), 250_000.0)] == ["2.40 s", "–", "–", "250 s"]


def add_requests(run_dir: Path, worker: str, counts: list[tuple[int, int, dict[str, int] | None]]) -> None:
    """``requests`` events of ``worker``: (coordination, messages, errors or None) in order."""
    with (run_dir / "history" / f"{worker}.jsonl").open("a") as handle:
        for number, (coordination, messages, errors) in enumerate(counts):
            event: dict[str, Any] = {"t": T0 + 7000 + number, "src": worker, "type": "requests",
                                     "worker": worker, "held": 1, "coordination": coordination,
                                     "messages": messages}
            if errors is not None:
                event["errors"] = errors
            handle.write(json.dumps(event) + "\n")


def test_request_error_rates_per_worker_count_each_incarnation(tmp_path: Path) -> None:
    small_run(tmp_path)
    add_requests(tmp_path, "worker-2", [(10, 30, {"ProvisionedThroughputExceededException": 2}),
                                        (20, 60, {"ProvisionedThroughputExceededException": 4, "TimeoutError": 1}),
                                        (5, 15, {"RequestThrottled": 1})])  # restarted: counters from zero
    add_requests(tmp_path, "worker-3", [(50, 50, {})])
    frame, note = requests_table(load_run(tmp_path, lambda _: None))
    assert note is None
    assert frame.to_dict("records") == [
        {"worker": "worker-2", "requests": "100", "errors": "6", "error_rate": "6.0%",
         "errors_by_code": "ProvisionedThroughputExceededException 4, RequestThrottled 1, TimeoutError 1"},
        {"worker": "worker-3", "requests": "100", "errors": "0", "error_rate": "0.0%", "errors_by_code": ""},
    ]


def test_without_error_counters_the_table_says_so(tmp_path: Path) -> None:
    small_run(tmp_path)
    add_requests(tmp_path, "worker-2", [(10, 30, None)])
    frame, note = requests_table(load_run(tmp_path, lambda _: None))
    assert frame["requests"].tolist() == ["40"] and frame["error_rate"].tolist() == [""]
    assert note is not None and "no errors field" in note


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
