"""Fixtures and the CI gate of the scenario suite.

``--max-duplicate-claims N`` (default 0): the session fails when the ``hardened`` runs together show more
duplicate claims than N, or lose any sequence.  The last line of the session reads
``duplicate claims: N, lost sequences: M`` over the ``hardened`` runs.  JUnit XML: pytest's ``--junitxml``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.scenarios.runner import ScenarioRun, run_scenario

_TOTALS: dict[str, int] = {"duplicate_claims": 0, "lost_sequences": 0, "runs": 0}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--max-duplicate-claims", type=int, default=0,
                     help="fail the session when hardened runs show more duplicate claims than this (default 0)")
    parser.addoption("--scenario-timescale", type=float, default=0.1,
                     help="time scale of scenario runs (default 0.1)")


RunScenario = Callable[..., dict[str, Any]]


@pytest.fixture
def scenario(tmp_path: Path, request: pytest.FixtureRequest) -> RunScenario:
    """Run one scenario into a temporary run folder; hardened verdicts count towards the gate."""

    def run(name: str, profile: str, **options: Any) -> dict[str, Any]:
        spec = ScenarioRun(name=name, profile=profile, run_dir=tmp_path / f"{name}-{profile}",
                           timescale=request.config.getoption("--scenario-timescale"), **options)
        verdict = run_scenario(spec, progress=print)
        verdict["run_dir"] = str(spec.run_dir)
        if profile == "hardened":
            _TOTALS["runs"] += 1
            _TOTALS["duplicate_claims"] += int(verdict["duplicate_claims"] or 0)
            _TOTALS["lost_sequences"] += int(verdict["lost_sequences"] or 0)
        return verdict

    return run


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if _TOTALS["runs"]:
        terminalreporter.write_line(
            f"duplicate claims: {_TOTALS['duplicate_claims']}, lost sequences: {_TOTALS['lost_sequences']}"
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    limit = session.config.getoption("--max-duplicate-claims")
    if _TOTALS["runs"] and (_TOTALS["duplicate_claims"] > limit or _TOTALS["lost_sequences"] > 0):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
