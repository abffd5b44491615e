"""The benchmarks' ``--out``: one that holds an earlier result is refused (one line, exit 2) unless --force,
which empties it; the default is a new folder per run.  Nothing is measured here: ``measure`` is replaced."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import capacity, claim_rate, coordination_cost, reconnect_storm, write_cost

BENCHES = [capacity, claim_rate, coordination_cost, reconnect_storm, write_cost]


class Measured(Exception):
    """``measure`` was reached: the folder was accepted."""


@pytest.fixture(autouse=True)
def nothing_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    def measure(_: str, args: argparse.Namespace) -> None:
        raise Measured(str(args.out))

    for bench in BENCHES:
        monkeypatch.setattr(bench, "measure", measure)


def run_main(monkeypatch: pytest.MonkeyPatch, bench: Any, argv: list[str]) -> Path:
    """Run the bench's main until its first measurement; the --out it measures into."""
    monkeypatch.setattr(sys, "argv", ["bench", *argv])
    with pytest.raises(Measured) as reached:
        bench.main() if bench is coordination_cost else bench.main(argv)
    return Path(str(reached.value))


@pytest.mark.parametrize("bench", BENCHES, ids=lambda b: b.__name__)
def test_an_out_folder_holding_results_is_refused_unless_forced(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, bench: Any) -> None:
    out = tmp_path / "out"
    (out / "hardened").mkdir(parents=True)
    (out / "result.json").write_text("an earlier result")
    monkeypatch.setattr(sys, "argv", ["bench", "--out", str(out)])
    with pytest.raises(SystemExit) as refused:
        bench.main() if bench is coordination_cost else bench.main(["--out", str(out)])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "is not empty" in err and "--force" in err
    assert len(err.strip().splitlines()) == 1 and (out / "result.json").read_text() == "an earlier result"
    assert run_main(monkeypatch, bench, ["--out", str(out), "--force"]) == out.resolve()
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("bench", BENCHES, ids=lambda b: b.__name__)
def test_the_default_out_is_a_new_folder_per_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                 bench: Any) -> None:
    monkeypatch.chdir(tmp_path)
    first, second = run_main(monkeypatch, bench, []), run_main(monkeypatch, bench, [])
    assert first != second and first.parent == second.parent and first.parent.parent == tmp_path.resolve() / "runs"
