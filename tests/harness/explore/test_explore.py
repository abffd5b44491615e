"""``explore`` with a stand-in for the scenario runner: it stops at the first invalid run unless told to keep
going, then classifies every invalid run by the invariant it fails and shrinks the first of each class,
re-running a candidate up to ``shrink_repeat`` times; ``summary.json`` says all of it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness.checkers.coverage import TRANSITIONS
from harness.explore import explore as explore_module
from harness.explore.explore import (
    ExploreError,
    ExploreOptions,
    condensed_mix,
    explore,
    per_backend_lines,
    resumable,
    run_coverage,
)
from harness.scenarios.scenario_file import ScenarioSpec, load

FAILS = {3: ["sequences"], 5: ["duplicate_claims", "sequences"], 6: ["sequences"]}  # by seed


def verdict(failing: list[str]) -> dict[str, Any]:
    checkers = {name: {"valid": name not in failing} for name in ("duplicate_claims", "sequences", "stop")}
    return {"valid": not failing, "checkers": checkers}


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """Replaces the runner: a generated schedule fails as ``FAILS`` says; a shrink candidate fails only
    on its second run, and only while it keeps a fault.  Records (seed, run folder name) of every run."""
    ran: list[tuple[int, str]] = []

    def run_once(spec: ScenarioSpec, run_dir: Path, options: ExploreOptions, *_: Any) -> dict[str, Any]:
        ran.append((spec.seed, run_dir.name))
        if run_dir.parent.name.startswith("shrink-"):
            second = run_dir.name.endswith("-2")
            return verdict(FAILS[spec.seed][:1] if spec.faults and second else [])
        return verdict(FAILS.get(spec.seed, []))

    monkeypatch.setattr(explore_module, "run_once", run_once)
    return ran


def options(tmp_path: Path, **changes: Any) -> ExploreOptions:
    return ExploreOptions(**{"runs": 8, "seed": 1, "out": tmp_path, "shrink_runs": 4, **changes})


def test_explore_stops_at_the_first_invalid_run_and_shrinks_it(tmp_path: Path,
                                                                runs: list[tuple[int, str]]) -> None:
    result = explore(options(tmp_path, shrink_repeat=2), progress=lambda _: None)
    assert sorted(result.verdicts) == [1, 2, 3] and result.invalid == 1
    [finding] = result.findings
    assert (finding.seed, finding.invariant) == (3, "sequences")
    assert finding.minimal is not None and load(finding.minimal).faults  # kept what the failure needs
    assert any(name.endswith("-2") for seed, name in runs if seed == 3)  # a candidate passing once ran again


def test_keep_going_classifies_every_invalid_run_and_shrinks_the_first_of_each_class(
        tmp_path: Path, runs: list[tuple[int, str]]) -> None:
    result = explore(options(tmp_path, keep_going=True), progress=lambda _: None)
    assert sorted(result.verdicts) == list(range(1, 9)) and result.invalid == 3
    classes = result.classes()
    assert {k: [f.seed for f in v] for k, v in classes.items()} == {"sequences": [3, 6], "duplicate_claims": [5]}
    assert [f.minimal is not None for f in result.findings] == [True, True, False]
    first = result.findings[0]
    assert first.minimal is not None and load(first.minimal).faults == load(first.schedule).faults  # one run
    # per candidate: none failed, so nothing was dropped
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["runs"] == 8 and summary["outcomes"] == {"valid": 5, "invalid": 3}
    assert [c["seed"] for c in summary["classes"]["sequences"]] == [3, 6]
    assert summary["classes"]["duplicate_claims"][0]["fails"] == ["duplicate_claims", "sequences"]
    assert sum(summary["fault_mix"].values()) > 0
    # the backend is drawn per run by default, and named per run and per finding
    assert sum(summary["backend_mix"].values()) == 8 and set(summary["backend_mix"]) == {"dynalite", "moto"}
    assert summary["classes"]["sequences"][0]["backend"] in ("dynalite", "moto")
    assert 0 < summary["death_notice_runs"] < 8
    assert set(summary["coverage"]) >= set(TRANSITIONS) and summary["not_covered"] == list(TRANSITIONS)  # no history
    shrunk = {seed for seed, name in runs if name != f"seed-{seed}"}
    assert shrunk == {3, 5}  # the first of each class only


OUTSIDE = "outside: clock skew 1920 ms > tolerance 100 ms"


def test_a_run_failing_outside_the_fault_model_is_named_apart_never_a_finding(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 2's schedule left the model (a skew beyond the tolerance) and fails; seed 3 left it and passes;
    seed 4 fails within it.  Seed 2 neither ends the exploration nor is shrunk nor classed; it is counted and
    named apart, with why."""
    def run_once(spec: ScenarioSpec, run_dir: Path, options: ExploreOptions, *_: Any) -> dict[str, Any]:
        failing = {2: ["duplicate_claims"], 4: ["sequences"]}.get(spec.seed, []) if run_dir.name.startswith(
            "seed-") else []
        stated = OUTSIDE if spec.seed in (2, 3) else "within"
        flag = "outside the fault model" if stated != "within" and failing else None
        return {**verdict(failing), "fault_model": {"stated": stated, "within": stated == "within", "flag": flag}}

    monkeypatch.setattr(explore_module, "run_once", run_once)
    lines: list[str] = []
    result = explore(options(tmp_path, shrink_runs=0), progress=lines.append)
    assert sorted(result.verdicts) == [1, 2, 3, 4]  # seed 2 did not end it; seed 4 did
    assert result.invalid == 1 and list(result.classes()) == ["sequences"]
    [outside] = result.outside
    assert (outside.seed, outside.invariants, outside.outside) == (2, ["duplicate_claims"], OUTSIDE)
    assert "INVALID OUTSIDE THE MODEL (duplicate_claims; outside: clock skew" in lines[1]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["outcomes"] == {"valid": 2, "invalid outside the model": 1, "invalid": 1}
    assert summary["outside_model"]["runs"] == 2
    assert [(r["seed"], r["why"]) for r in summary["outside_model"]["invalid"]] == [(2, OUTSIDE)]
    assert list(summary["classes"]) == ["sequences"]


def test_the_condensed_mix_counts_toxics_by_type() -> None:
    mix = Counter({"pause": 3, "toxic:latency/dynamodb/upstream": 2, "toxic:latency/upstream/downstream@0.3": 1,
                   "toxic:timeout/services/upstream": 1})
    assert condensed_mix(mix) == Counter({"pause": 3, "toxic:latency": 3, "toxic:timeout": 1})


def test_a_runs_coverage_is_read_from_its_history_and_totalled(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def run_once(spec: ScenarioSpec, run_dir: Path, options: ExploreOptions, *_: Any) -> dict[str, Any]:
        (run_dir / "history").mkdir(parents=True)
        acquire = {"t": 1.0, "src": "worker-1", "type": "lease.acquire", "pk": "CONN#a", "worker": "worker-1",
                   "epoch": spec.seed, "outcome": "ok", "via": "notify"}
        (run_dir / "history" / "worker-1.jsonl").write_text(json.dumps(acquire) + "\n")
        return verdict([])

    monkeypatch.setattr(explore_module, "run_once", run_once)
    lines: list[str] = []
    explore(options(tmp_path, runs=2), progress=lines.append)
    assert "  coverage: acquire:notification 1" in lines
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["coverage"]["acquire:notification"] == 2 and "acquire:notification" not in summary["not_covered"]
    assert run_coverage(tmp_path / "nowhere") is None


def test_a_batch_run_again_into_its_folder_skips_the_seeds_already_judged_and_counts_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each run leaves its verdict as it ends; seed 3 is cut short (a history, no verdict).  Run again with more
    runs, the batch says in one line what it skips, runs only seeds 3, 5 and 6 (seed 3 into an emptied
    folder), and its summary counts all six, per backend too."""
    ran: list[int] = []

    def run_once(spec: ScenarioSpec, run_dir: Path, options: ExploreOptions, *_: Any) -> dict[str, Any]:
        assert not run_dir.exists()  # a folder of its own, with nothing of an earlier attempt
        ran.append(spec.seed)
        (run_dir / "history").mkdir(parents=True)
        acquire = {"t": 1.0, "src": "worker-1", "type": "lease.acquire", "pk": "CONN#a", "worker": "worker-1",
                   "epoch": 1, "outcome": "ok", "via": "notify"}
        (run_dir / "history" / "worker-1.jsonl").write_text(json.dumps(acquire) + "\n")
        judged = verdict(FAILS.get(spec.seed, []))
        (run_dir / "verdict.json").write_text(json.dumps(judged))
        return judged

    monkeypatch.setattr(explore_module, "run_once", run_once)
    explore(options(tmp_path, runs=4, keep_going=True, shrink_runs=0), progress=lambda _: None)
    (tmp_path / "seed-3" / "verdict.json").unlink()
    ran.clear()
    lines: list[str] = []
    result = explore(options(tmp_path, runs=6, keep_going=True, shrink_runs=0), progress=lines.append)
    assert ran == [3, 5, 6]
    assert lines[0] == (f"resuming {tmp_path}: 3 of 6 seeds already judged (seeds 1-2, 4); their verdicts are "
                        "counted, not run again")
    assert sorted(result.verdicts) == [1, 2, 3, 4, 5, 6] and result.invalid == 3
    assert [f.seed for f in result.findings] == [3, 5, 6]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["runs"] == 6 and summary["coverage"]["acquire:notification"] == 6
    per_backend = summary["per_backend"]
    assert sum(b["runs"] for b in per_backend.values()) == 6 and sum(b["invalid"] for b in per_backend.values()) == 3
    assert sum(b["coverage"]["acquire:notification"] for b in per_backend.values()) == 6
    assert all(set(b) >= {"fault_mix", "load_mix", "not_covered", "outcomes"} for b in per_backend.values())


def test_a_folder_holding_a_batch_of_other_settings_is_not_carried_on(tmp_path: Path,
                                                                       runs: list[tuple[int, str]]) -> None:
    assert not resumable(tmp_path, options(tmp_path))  # nothing there yet
    explore(options(tmp_path, runs=1), progress=lambda _: None)
    assert resumable(tmp_path, options(tmp_path, runs=50, seed=7))  # more runs, other seeds: the same batch
    with pytest.raises(ExploreError, match=r"holds a batch run with dynamodb drawn, not moto; name a new folder"):
        resumable(tmp_path, options(tmp_path, dynamodb="moto"))


def test_the_end_of_a_batch_says_per_backend_its_runs_invalid_runs_mixes_and_coverage(
        tmp_path: Path, runs: list[tuple[int, str]]) -> None:
    result = explore(options(tmp_path, keep_going=True, shrink_runs=0), progress=lambda _: None)
    lines = per_backend_lines(result)
    tallies = [line for line in lines if line.startswith(("dynalite:", "moto:"))]
    assert len(tallies) == 2 and all(" invalid (" in line and "; load: " in line for line in tallies)
    assert lines[2].split() == ["transition", "dynalite", "moto"]
    assert all(line.startswith(name) for line, name in zip(lines[3:], TRANSITIONS, strict=True))
