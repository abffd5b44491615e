"""What the ``wsfleet`` scenario commands share, run locally (``cli``) or on AWS (``cli_aws``): the scenario
the user named or gave as a file, and how a finished run is reported (its report, its verdict's headline,
a summary line)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.cli_errors import CliError

if TYPE_CHECKING:
    from harness.scenarios.scenario_file import ScenarioSpec


def scenario_spec(args: argparse.Namespace) -> ScenarioSpec:
    """The scenario named by ``args.name`` or read from ``args.from_file``; ``CliError`` says what is wrong."""
    from harness.scenarios.catalog import SCENARIOS
    from harness.scenarios.scenario_file import ScenarioFileError, load

    if args.from_file is not None and args.name:
        raise CliError("give a scenario name or --from FILE, not both")
    if args.from_file is not None:
        try:
            return load(args.from_file)
        except ScenarioFileError as exc:
            raise CliError(str(exc)) from None
    if not args.name:
        raise CliError("name a scenario or give --from FILE (--list shows the names)")
    if args.name not in SCENARIOS:
        raise CliError(f"unknown scenario {args.name!r}; known: {', '.join(SCENARIOS)}")
    return SCENARIOS[args.name]


def finish_scenario(args: argparse.Namespace, verdict: dict[str, Any], run_dir: Path, started: float) -> None:
    """A run's report (unless --no-report), its verdict's headline as one JSON line, and a summary line."""
    if not args.no_report:
        report_runs([run_dir], None)
    print(json.dumps({k: verdict[k] for k in ("scenario", "profile", "timescale", "valid", "duplicate_claims",
                                              "lost_sequences", "recovery_ms", "bound_ms")}))
    from harness.checkers.verdict import verdict_line

    print(f"wsfleet scenario: {verdict['scenario']}/{verdict['profile']} in {time.monotonic() - started:.0f} s: "
          f"{verdict_line(verdict)}; run folder {run_dir}", file=sys.stderr)


def report_runs(run_dirs: list[Path], out: Path | None, locust_csv: Path | None = None) -> Path:
    """The report of these runs (``harness.report``), with its progress on stderr; its path."""
    from harness.report import build_report

    return build_report(run_dirs, out, progress=lambda line: print(line, file=sys.stderr, flush=True),
                        locust_csv=locust_csv)
