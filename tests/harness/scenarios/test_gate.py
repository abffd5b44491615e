"""The scenario suite's pytest plugin, in pytest sessions of their own: a failing test case in JUnit XML when
the hardened runs exceed the gate, no gate without scenario tests, its option accepted by ``pytest tests``,
progress shown without ``-s``, and test ids that read ``crash-hardened``."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from harness.processes import REPO_ROOT

FAKE_SCENARIOS = '''
import pytest
from harness.scenarios.gate import Totals

@pytest.fixture
def scenario():
    return lambda claims: Totals.add({"duplicate_claims": claims, "lost_sequences": 0})

@pytest.mark.parametrize("claims", [0, 2])
def test_run(scenario, claims):
    scenario(claims)
'''


def pytest_session(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def gate_cases(junit: Path) -> list[ET.Element]:
    return [case for case in ET.parse(junit).iter("testcase") if case.get("name") == "scenario-gate"]


def test_too_many_duplicate_claims_is_a_failing_test_case_in_junit_xml(tmp_path: Path) -> None:
    (tmp_path / "test_fake.py").write_text(FAKE_SCENARIOS)
    done = pytest_session(tmp_path, "-p", "harness.scenarios.gate", "--junitxml", "out.xml", "-q")
    assert done.returncode == 1, done.stdout
    (case,) = gate_cases(tmp_path / "out.xml")
    failure = case.find("failure")
    assert failure is not None and "2 duplicate claims (at most 0 allowed)" in (failure.get("message") or "")
    assert "duplicate claims: 2, lost sequences: 0" in done.stdout
    assert "2 passed" in done.stdout  # the runs themselves passed; only the gate failed


def test_within_the_limit_the_gate_passes(tmp_path: Path) -> None:
    (tmp_path / "test_fake.py").write_text(FAKE_SCENARIOS)
    done = pytest_session(tmp_path, "-p", "harness.scenarios.gate", "--max-duplicate-claims", "2",
                          "--junitxml", "out.xml", "-q")
    assert done.returncode == 0, done.stdout
    (case,) = gate_cases(tmp_path / "out.xml")
    assert case.find("failure") is None


def test_no_gate_without_scenario_tests_and_the_option_works_for_pytest_tests(tmp_path: Path) -> None:
    done = pytest_session(REPO_ROOT, "tests/harness/scenarios/test_expressions.py", "--max-duplicate-claims", "3",
                          "--junitxml", str(tmp_path / "out.xml"), "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    assert gate_cases(tmp_path / "out.xml") == []


def test_progress_lines_show_without_capture_being_disabled(tmp_path: Path) -> None:
    (tmp_path / "test_progress.py").write_text(
        "from harness.scenarios.gate import progress_reporter\n"
        "def test_long(request):\n"
        "    progress_reporter(request)('every stream has an owner; steady running')\n")
    done = pytest_session(tmp_path, "-q")
    assert done.returncode == 0, done.stdout
    assert "test_long: every stream has an owner; steady running" in done.stdout


def test_scenario_test_ids_read_scenario_dash_profile() -> None:
    done = pytest_session(REPO_ROOT, "harness/scenarios", "--collect-only", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "test_scenario[crash-hardened]" in done.stdout and "test_scenario[crash-blog]" in done.stdout
