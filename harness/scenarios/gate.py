"""The scenario suite's pytest plugin (loaded by the root ``conftest.py``): its options and its CI gate.

``--max-duplicate-claims N`` (default 0): the ``hardened`` scenario runs of the session together may show at
most N duplicate claims and no lost sequence.  The gate is a test of its own, ``scenario-gate``, appended
after every collected scenario test, so it appears in ``--junitxml`` output as a failing test case (not only
as an exit code); it is not added when the session runs no scenario.  The last line of the session reads
``duplicate claims: N, lost sequences: M`` over the ``hardened`` runs.  ``--scenario-timescale`` sets the time
scale of every scenario run (default: each file's).  ``progress_reporter`` shows a run's progress lines through
pytest's terminal reporter, so a long scenario is not silent without ``-s``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest

GATE_NAME = "scenario-gate"
SCENARIO_FIXTURE = "scenario"


class Totals:
    """What the session's ``hardened`` runs showed."""

    runs = 0
    duplicate_claims = 0
    lost_sequences = 0

    @classmethod
    def add(cls, verdict: dict[str, Any]) -> None:
        cls.runs += 1
        cls.duplicate_claims += int(verdict.get("duplicate_claims") or 0)
        cls.lost_sequences += int(verdict.get("lost_sequences") or 0)


def progress_reporter(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """A progress callback writing ``<test id>: <line>`` through the terminal reporter (not captured)."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    name = request.node.name

    def show(line: str) -> None:
        if reporter is None:
            return
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            reporter.write_line(f"{name}: {line}")

    return show


class GateFailure(Exception):
    """The hardened runs together exceeded the gate."""


class GateItem(pytest.Item):
    """The duplicate-claims gate as a test case: runs after every scenario test of the session."""

    def runtest(self) -> None:
        limit = self.config.getoption("--max-duplicate-claims")
        if Totals.duplicate_claims > limit or Totals.lost_sequences > 0:
            raise GateFailure(f"hardened runs ({Totals.runs}) showed {Totals.duplicate_claims} duplicate claims "
                              f"(at most {limit} allowed) and {Totals.lost_sequences} lost sequences (none allowed)")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, GateFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[str, int, str]:
        return __file__, 0, f"{GATE_NAME}: duplicate claims and lost sequences over the hardened runs"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--max-duplicate-claims", type=int, default=0,
                     help="fail the scenario gate when hardened runs show more duplicate claims than this "
                          "(default 0)")
    parser.addoption("--scenario-timescale", type=float, default=None,
                     help="time scale of scenario runs (default: each scenario file's, 0.1 for the catalog)")


@pytest.hookimpl(trylast=True)  # after -k / -m deselection, so the gate follows only what will run
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if any(SCENARIO_FIXTURE in getattr(item, "fixturenames", ()) for item in items):
        items.append(GateItem.from_parent(session, name=GATE_NAME))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if Totals.runs:
        terminalreporter.write_line(
            f"duplicate claims: {Totals.duplicate_claims}, lost sequences: {Totals.lost_sequences}")
