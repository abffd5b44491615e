"""The demo's printout: measured recovery beside each design's worst case (computed by the scenario
catalog, at the run's scale and at scale 1), the spread when several seeds ran, and clear argument errors.
The scenario runs themselves are replaced by recorded verdicts (the scenarios have their own tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness import demo


def verdict(max_ms: float, valid: bool = True, lost: int = 0) -> dict[str, Any]:
    return {"valid": valid, "recovery_ms": {"max": max_ms}, "duplicate_claims": 0, "lost_sequences": lost,
            "duplicate_deliveries": 0}


def rows(text: str) -> dict[str, list[str]]:
    """Label -> cells of a printed table (cells separated by two or more spaces)."""
    found = {}
    for line in text.splitlines():
        label, *cells = [part.strip() for part in line.split("   ") if part.strip()]
        found[label] = cells
    return found


def test_the_worst_case_of_each_design_is_printed_beside_the_measurement() -> None:
    table = demo.recovery_table({"blog": {1: verdict(1940.0)}, "hardened": {1: verdict(2290.0)}}, 0.1)
    found = rows(table.split("\n\n")[0])
    assert found["max recovery, seed 1"] == ["1.94 s", "2.29 s"]
    assert found["worst case at time scale 0.1"] == ["8.00 s", "3.20 s"]
    assert found["worst case at time scale 1"] == ["80.00 s", "23.00 s"]  # not 32 s: the allowance is not scaled
    assert "spread" not in table


def test_several_seeds_show_the_spread() -> None:
    verdicts = {"blog": {1: verdict(1940.0), 2: verdict(5080.0), 3: verdict(7600.0)},
                "hardened": {1: verdict(2290.0), 2: verdict(2310.0), 3: verdict(2250.0)}}
    found = rows(demo.recovery_table(verdicts, 0.1).split("\n\n")[0])
    assert found["spread over 3 seeds"] == ["1.94 s – 7.60 s (median 5.08 s)", "2.25 s – 2.31 s (median 2.29 s)"]


def test_verdicts_are_summed_over_seeds() -> None:
    verdicts = {"blog": {1: verdict(1.0), 2: verdict(1.0, valid=False, lost=449)},
                "hardened": {1: verdict(1.0), 2: verdict(1.0)}}
    found = rows(demo.verdict_table(verdicts))
    assert found["valid"] == ["False", "True"]
    assert found["lost sequences"] == ["449", "0"]


def test_main_runs_each_profile_per_seed_and_prints_the_comparison(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[tuple[str, int]] = []

    def fake_run(run: Any, progress: Any) -> dict[str, Any]:
        ran.append((run.profile, run.seed))
        return verdict(2000.0 + run.seed)

    monkeypatch.setattr(demo, "run_scenario", fake_run)
    monkeypatch.setattr(demo, "build_report", lambda dirs, out, progress: (out or dirs[0]) / "report.html")
    monkeypatch.setattr(demo, "per_connection", lambda run_dir: f"streams of {run_dir.name}")
    assert demo.main(["--out", str(tmp_path), "--seeds", "4,5"]) == 0
    assert ran == [("blog", 4), ("hardened", 4), ("blog", 5), ("hardened", 5)]
    out = capsys.readouterr().out
    assert "spread over 2 seeds" in out and "worst case at time scale 1" in out
    assert "streams of crash-blog-seed4" in out


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "one"], "expected seeds like 1,2,3"),
    (["--seeds", "1,1"], "expected distinct seeds"),
    (["--timescale", "0"], "must be above 0 and at most 10"),
])
def test_bad_arguments_are_one_line_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        demo.main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
