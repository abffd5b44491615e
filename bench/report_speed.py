"""How long the report takes on a large history, phase by phase (issue 13's target: the whole report of a
1.2 M-event history in at most 8 s).

The history is the tests' synthetic crash run (``tests.harness.report.histories.write_large_history``: 100
streams at 10 msg/s for 10 minutes, worker-1 killed halfway, about 600 k ``emit`` and 600 k ``msg.persist``
events), written to a temporary folder.  The report's own progress lines give the phases: reading the
history, checking it, writing the tables, drawing the figures.  Wall and CPU seconds are this process's.

Usage: ``python -m bench.report_speed [--connections 100] [--seconds 600] [--rate 10]`` from the repository
root; one line per phase, the last line the summary.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from harness.report import build_report
from tests.harness.report.histories import write_large_history

TARGET_S = 8.0


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.report_speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--rate", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="report-speed-") as folder:
        run = Path(folder)
        events = write_large_history(run, connections=args.connections, seconds=args.seconds, rate=args.rate)
        started, cpu = time.perf_counter(), time.process_time()
        build_report([run], None, lambda m: print(f"{time.perf_counter() - started:7.1f} s  {m}", flush=True))
        wall, cpu_s = time.perf_counter() - started, time.process_time() - cpu
    print(f"report of {events:,} events: {wall:.1f} s wall, {cpu_s:.1f} s CPU (target {TARGET_S:.0f} s)")


if __name__ == "__main__":
    main()
