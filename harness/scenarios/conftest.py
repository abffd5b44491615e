"""Fixtures of the scenario suite (its options and CI gate live in ``harness/scenarios/gate.py``).

Every run of the suite borrows its embedded backend from one ``KeptBackends`` of the session, renewed
before each run (nothing of an earlier run's tables or queues is left), so a scenario pays for its
workers and its schedule, not for starting and stopping DynamoDB and moto."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.backends import KeptBackends
from harness.scenarios.catalog import SCENARIOS
from harness.scenarios.gate import Totals, progress_reporter
from harness.scenarios.runner import ScenarioRun, run_scenario
from harness.scenarios.scenario_file import ScenarioSpec

RunScenario = Callable[..., dict[str, Any]]


@pytest.fixture(scope="session")
def kept_backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeptBackends]:
    with KeptBackends(tmp_path_factory.mktemp("backends")) as kept:
        yield kept


def _runner(run_root: Path, request: pytest.FixtureRequest) -> RunScenario:
    """Run one scenario into a folder under ``run_root``; hardened verdicts count towards the gate, except
    those of scenarios known to fail (``xfail``: their failure is the expected outcome, judged by the test)."""
    known_to_fail = request.node.get_closest_marker("xfail") is not None
    progress = progress_reporter(request)

    def run(spec: ScenarioSpec, profile: str | None = None, **options: Any) -> dict[str, Any]:
        options.setdefault("timescale", request.config.getoption("--scenario-timescale"))  # None: the file's
        options.setdefault("backends", request.getfixturevalue("kept_backends"))
        setup = ScenarioRun(spec, profile=profile, run_dir=run_root / spec.name, **options)
        verdict = run_scenario(setup, progress=progress)
        verdict["run_dir"] = str(setup.run_dir)
        if setup.setting("profile") == "hardened" and not known_to_fail:
            Totals.add(verdict)
        return verdict

    return run


@pytest.fixture
def scenario(tmp_path: Path, request: pytest.FixtureRequest) -> RunScenario:
    return _runner(tmp_path, request)


@pytest.fixture(scope="module")
def crash_hardened(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The crash scenario on hardened, run once per module: the catalog's test of it and the test that shows
    the sequences checker failing on its tampered history read the same run."""
    return _runner(tmp_path_factory.mktemp("crash-hardened"), request)(SCENARIOS["crash"], "hardened")
