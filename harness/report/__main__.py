"""``python -m harness.report RUN_DIR [RUN_DIR ...] [--out DIR] [--locust-csv PREFIX]``: build the report of
one or several runs; progress on stderr, the path of ``report.html`` on stdout, a one-line error and exit
status 2 for a folder that is not a run or a Locust CSV that is not one."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.report.build import build_report
from harness.report.model import ReportError


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(
        prog="wsfleet report",
        description="Build the report of one or several scenario runs: report.html (self-contained, "
                    "opens offline), report.md, figures/*.png and the checkers' tables as phases.csv, "
                    "claims.csv, sequences.csv and zombie_writes.csv.  The checkers are re-run on each "
                    "history.  With several runs the report compares profiles per scenario and aggregates over "
                    "trials and seeds.")
    result.add_argument("run_dirs", metavar="RUN_DIR", nargs="+", type=Path,
                        help="a run folder (holding history/*.jsonl, as a scenario run writes it)")
    result.add_argument("--out", metavar="DIR", type=Path, default=None,
                        help="where to write the report (created if missing); default: the run folder "
                             "itself, which only works with one RUN_DIR")
    result.add_argument("--locust-csv", metavar="PREFIX", type=Path, default=None,
                        help="the --csv PREFIX of a Locust run against the (one) RUN_DIR: its PREFIX_stats.csv, "
                             "PREFIX_stats_history.csv and PREFIX_failures.csv go into a \"Load (Locust)\" "
                             "section with the history's load.* events; default: Locust's *_stats.csv found "
                             "in the run folder")
    result.add_argument("--quiet", action="store_true", help="no progress messages on stderr")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)

    def progress(message: str) -> None:
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    try:
        path = build_report(list(args.run_dirs), args.out, progress, args.locust_csv)
    except ReportError as exc:
        print(f"wsfleet report: error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
