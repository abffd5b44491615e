"""How long ``wsfleet report`` takes on a large history, phase by phase (issue 13's target: the whole report
of a 1.2 M-event history in at most 8 s).

The history is the tests' synthetic crash run (``tests.harness.report.histories.write_large_history``: 100
streams at 10 msg/s for 10 minutes, worker-1 killed halfway, about 600 k ``emit`` and 600 k ``msg.persist``
events), written to a temporary folder.  The report then runs as a user runs it, ``wsfleet report RUN`` in a
fresh process, ``--repeat`` times; the command's wall time (interpreter start and imports included) is what
counts, and its own progress lines give the phases: reading the history, checking it, drawing the figures.

With ``--baseline-root DIR`` (a checkout of an earlier commit, e.g. ``git worktree add /tmp/old fed9a42``) the
same history is reported by that code too, alternating with this one, and the summary gives the ratio of the
medians: this machine's speed varies by a third from minute to minute, the ratio much less.

Usage: ``python -m bench.report_speed [--connections 100] [--seconds 600] [--rate 10] [--repeat 3]
[--baseline-root DIR]`` from the repository root; one line per run, the last line the summary.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.harness.report.histories import write_large_history

TARGET_S = 8.0


def one_report(run: Path, root: Path, out: Path) -> tuple[float, dict[str, float]]:
    """Run ``wsfleet report`` of the code in ``root`` on ``run`` in a fresh process, into the new folder ``out``:
    its wall time, and the phases its progress lines give (reading, checking, the whole report after it began
    reading)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "harness.cli", "report", str(run), "--out", str(out)],
                          cwd=root, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"wsfleet report failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    lines = done.stderr.splitlines() + done.stdout.splitlines()
    return wall, {name: _seconds(next((line for line in lines if marker in line), ""))
                  for name, marker in (("read", "; checking"), ("checked", "checked in"), ("whole", "report.html ("))}


def _seconds(line: str) -> float:
    """The ``in N s`` of a progress line (NaN when there is none)."""
    found = re.search(r"in ([\d.]+) s", line)
    return float(found.group(1)) if found else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.report_speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=100, help="streams in the history (default 100)")
    parser.add_argument("--seconds", type=int, default=600, help="length of the run in seconds (default 600)")
    parser.add_argument("--rate", type=float, default=10.0, help="messages a second per stream (default 10)")
    parser.add_argument("--repeat", type=int, default=3, help="reports to time (default 3)")
    parser.add_argument("--baseline-root", type=Path, default=None,
                        help="a checkout of an earlier commit whose report to time beside this one")
    args = parser.parse_args()
    roots = {"this": Path.cwd(), **({"baseline": args.baseline_root.resolve()} if args.baseline_root else {})}
    with tempfile.TemporaryDirectory(prefix="report-speed-") as folder:
        run = Path(folder)
        events = write_large_history(run, connections=args.connections, seconds=args.seconds, rate=args.rate)
        size = sum(path.stat().st_size for path in (run / "history").glob("*.jsonl")) / 1e6
        print(f"history: {events:,} events, {size:.0f} MB", flush=True)
        walls: dict[str, list[float]] = {name: [] for name in roots}
        for attempt in range(1, args.repeat + 1):
            for name, root in roots.items():
                wall, phases = one_report(run, root, run / f"report-{name}-{attempt}")
                walls[name].append(wall)
                print(f"{name} run {attempt}: {wall:.1f} s (read {phases['read']:.1f} s, checked "
                      f"{phases['checked']:.1f} s, whole report {phases['whole']:.1f} s)", flush=True)
    median = {name: statistics.median(times) for name, times in walls.items()}
    against = (f"; baseline median {median['baseline']:.1f} s, ratio {median['this'] / median['baseline']:.2f}"
               if "baseline" in median else "")
    print(f"report of {events:,} events: median {median['this']:.1f} s, slowest {max(walls['this']):.1f} s over "
          f"{args.repeat} runs of `wsfleet report` (imports included; target {TARGET_S:.0f} s){against}")


if __name__ == "__main__":
    main()
