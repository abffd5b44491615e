"""How long ``wsfleet up`` takes to stop on Ctrl-C while one worker holds N streams, and whether any of its
processes outlive it (issue 13's target: 2,000 streams, at most 10 s, none left).

Runs ``wsfleet up --workers 1`` as a user would, at time scale 1 (a 6 s shutdown budget, a 20 s lease), with
``max_connections`` room for every stream; creates N streams in the simulator and STARTs them through the
router from a pool of threads; waits until the simulator has a live session for each and then ``--hold``
seconds; sends SIGINT and times the command's exit.  It then lists the processes ``wsfleet up`` had started
that are still running, and reads the worker's history: how many leases it released and how many it left to
lapse when its shutdown budget ran out.

Usage: ``python -m bench.shutdown_time [--streams 2000] [--rate 0.1] [--hold 20]`` from the repository root.
The streams emit slowly by default so that the shutdown, not the backlog of a saturated local backend, is
measured.  The last line reads ``shutdown: N streams held, exit T s after SIGINT (exit code C), R released,
L left to lapse, K processes left; target 10 s``.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from harness.cluster import ClusterError, http_json, start_connection
from harness.history import HistoryTail, HistoryWriter

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 10.0


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.shutdown_time", description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=2000, help="streams the worker holds (default 2000)")
    parser.add_argument("--rate", type=float, default=0.1, help="messages per second per stream (default 0.1)")
    parser.add_argument("--hold", type=float, default=20.0, help="seconds held once all are live (default 20)")
    parser.add_argument("--threads", type=int, default=16, help="threads sending STARTs (default 16)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shutdown-time-") as folder:
        try:
            measure(args, Path(folder))
        except ClusterError as exc:
            sys.exit(f"shutdown_time: {exc}")


def measure(args: argparse.Namespace, run_dir: Path) -> None:
    up = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "up", "--workers", "1", "--timescale", "1", "--rate", str(args.rate),
         "--set", f"max_connections={args.streams + 100}", "--run-dir", str(run_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO)
    try:
        children, interrupted, code = _hold_then_interrupt(args, up)
    finally:
        if up.poll() is None:  # an error before the SIGINT: nothing it started may outlive the bench
            up.send_signal(signal.SIGINT)
            up.wait(300)
    exit_s = time.monotonic() - interrupted
    time.sleep(1.0)
    left = [child for child in children if child.is_running() and child.status() != psutil.STATUS_ZOMBIE]
    events = HistoryTail(run_dir, "worker-1.jsonl", {"lease.release", "lease.lost"}).new_events()
    released = sum(1 for e in events if e["type"] == "lease.release" and e.get("outcome") == "ok")
    lapsed = sum(1 for e in events if e["type"] == "lease.lost" and "shutdown budget" in str(e.get("reason")))
    print(f"shutdown: {args.streams} streams held, exit {exit_s:.1f} s after SIGINT (exit code {code}), "
          f"{released} released, {lapsed} left to lapse, {len(left)} processes left; target {TARGET_S:.0f} s")


def _hold_then_interrupt(args: argparse.Namespace,
                         up: subprocess.Popen[bytes]) -> tuple[list[psutil.Process], float, int]:
    """STARTs the streams, waits until all are live and ``--hold`` more, sends SIGINT and waits for the exit:
    (the processes ``wsfleet up`` had started, when SIGINT was sent, the exit code)."""
    assert up.stdout is not None
    info = json.loads(up.stdout.readline())
    control, router = info["upstream_control_url"], info["router_url"]

    unrecorded = HistoryWriter(None, "bench")  # the run's own history is the worker's

    def start(number: int) -> None:
        start_connection(unrecorded, router, info["upstream_url"], control, f"c{number:05d}")

    began = time.monotonic()
    with ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(start, range(args.streams)))
    print(f"{time.monotonic() - began:6.1f} s  {args.streams} STARTs accepted", flush=True)
    while (live := int(http_json("GET", f"{control}/stats")[1]["live_sessions"])) < args.streams:
        print(f"{time.monotonic() - began:6.1f} s  {live} of {args.streams} streams live", flush=True)
        time.sleep(5.0)
    print(f"{time.monotonic() - began:6.1f} s  all live; holding {args.hold:g} s", flush=True)
    time.sleep(args.hold)
    children = psutil.Process(up.pid).children(recursive=True)
    interrupted = time.monotonic()
    up.send_signal(signal.SIGINT)
    return children, interrupted, up.wait(300)


if __name__ == "__main__":
    main()
