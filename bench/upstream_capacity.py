"""What idle subscriber sessions cost the simulated upstream: its CPU and memory per session.

Starts ``python -m harness.upstream_sim`` in its own process, opens ``--sessions`` concurrent subscriber
sessions from this one (each on its own stream, emitting a frame every 100 s: idle, but answering the
simulator's keepalive pings) at ``--open-rate`` handshakes a second, checks through ``GET /stats`` that all
of them are live and none was refused, holds them ``--hold`` seconds, and reads the simulator process's CPU
time and RSS with psutil over that window.  The issue's target is 10,000 sessions on the project's machine.

Usage: ``python bench/upstream_capacity.py [--sessions 10000] [--hold 60] [--open-rate 400]``.
The last line reads ``upstream capacity: N sessions held S s: X CPU s per 1,000 sessions per wall s (C cores),
Y KiB RSS per session (Z MiB in all)``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from websockets.asyncio.client import ClientConnection, connect

from harness import http_client

REPO = Path(__file__).resolve().parents[1]
SIMULATOR_QUOTA = 500.0  # the simulator's default new-connection quota, handshakes a second
SPARE_DESCRIPTORS = 256  # beyond one per session: the simulator's and this process's own files and sockets


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] + " Opens N idle sessions against a simulator process, holds them, "
        "and prints the simulator's CPU seconds per 1,000 sessions per second of wall time and its RSS per session.",
        epilog="The clients run in this process; only the simulator's process is measured, over the hold window "
        "(CPU) and from before the first handshake to the end of the hold (RSS). Opening takes SESSIONS / "
        "OPEN_RATE seconds (25 s for 10,000 at 400 a second). Each process needs one open file per session: "
        "the limit is raised to the hard limit. Progress goes to stderr; the last line printed is the summary.",
    )
    parser.add_argument("--sessions", type=int, default=10_000,
                        help="concurrent subscriber sessions to open and hold (default: %(default)s)")
    parser.add_argument("--hold", type=float, default=60.0,
                        help="seconds the sessions are held open while CPU time is measured (default: %(default)s)")
    parser.add_argument("--open-rate", type=float, default=400.0,
                        help="handshakes a second while opening; keep it under the simulator's new-connection "
                        f"quota ({SIMULATOR_QUOTA:g} a second) or handshakes are refused and the run fails "
                        "(default: %(default)s)")
    parser.add_argument("--ping-interval", type=float, default=5.0,
                        help="the simulator's keepalive: seconds between pings on each session, which every "
                        "client answers (default: %(default)s, the cluster's at time scale 1)")
    parser.add_argument("--stream-rate", type=float, default=0.01,
                        help="frames a second each session's stream emits (default: %(default)s: idle)")
    args = parser.parse_args(argv)
    for name in ("sessions", "hold", "open_rate", "ping_interval", "stream_rate"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.open_rate > SIMULATOR_QUOTA:
        parser.error(f"--open-rate must be at most the simulator's quota, {SIMULATOR_QUOTA:g} a second")
    return args


def allow_descriptors(sessions: int) -> None:
    """Raise this process's open-file limit (the simulator inherits it) to fit one socket per session."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = sessions + SPARE_DESCRIPTORS
    if needed > hard:
        raise SystemExit(f"{sessions} sessions need {needed} open files; the hard limit is {hard}")
    if needed > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def start_simulator(args: argparse.Namespace) -> tuple[asyncio.subprocess.Process, dict[str, Any]]:
    """The simulator process and its ready line (ws_url, control_url, pid)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    ping = str(args.ping_interval)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "harness.upstream_sim", "--port", "0", "--rate", str(args.stream_rate),
        "--ping-interval", ping, "--ping-timeout", ping, cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 30.0)
    if not line:
        raise SystemExit(f"the simulator exited with {await process.wait()} before it was ready")
    return process, json.loads(line)


async def open_sessions(ws_url: str, count: int, rate: float) -> list[ClientConnection]:
    """``count`` sessions, a handshake every ``1 / rate`` seconds, each waited for concurrently."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    handshakes: list[asyncio.Task[ClientConnection]] = []
    for i in range(count):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        handshakes.append(asyncio.create_task(open_session(f"{ws_url}/streams/bench-{i}")))
    return await asyncio.gather(*handshakes)


async def open_session(url: str) -> ClientConnection:
    return await connect(url, ping_interval=None, close_timeout=1.0, open_timeout=60.0)


async def simulator_stats(control_url: str) -> dict[str, Any]:
    answer = await http_client.request_async("GET", f"{control_url}/stats", timeout_s=30)
    stats: dict[str, Any] = answer.json()
    return stats


async def require_all_live(control_url: str, sessions: int, when: str, patience: float = 30.0) -> None:
    """Wait until the simulator counts every session live (its handler starts just after the handshake
    answer the client saw); stop the run if one is lost or a handshake was refused."""
    deadline = time.monotonic() + patience
    while True:
        stats = await simulator_stats(control_url)
        refused = stats["handshakes"]["rejected"]
        if stats["live_sessions"] == sessions and not refused:
            return
        if refused or time.monotonic() > deadline:
            raise SystemExit(f"{when}: {stats['live_sessions']} of {sessions} sessions live, "
                             f"{refused} handshakes refused by the quota")
        await asyncio.sleep(0.2)


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


async def measure(args: argparse.Namespace) -> str:
    simulator, ready = await start_simulator(args)
    clients: list[ClientConnection] = []
    try:
        process = psutil.Process(ready["pid"])
        rss_before = process.memory_info().rss
        progress(f"opening {args.sessions} sessions at {args.open_rate:g} a second")
        clients = await open_sessions(ready["ws_url"], args.sessions, args.open_rate)
        await require_all_live(ready["control_url"], args.sessions, "after opening")
        progress(f"holding {args.sessions} sessions for {args.hold:g} s")
        wall_start, cpu_start = time.monotonic(), cpu_seconds(process)
        await asyncio.sleep(args.hold)
        wall, cpu = time.monotonic() - wall_start, cpu_seconds(process) - cpu_start
        rss = process.memory_info().rss
        await require_all_live(ready["control_url"], args.sessions, "after holding", patience=0.0)
    finally:
        for client in clients:
            client.transport.abort()
        if simulator.returncode is None:
            simulator.send_signal(signal.SIGTERM)
            await asyncio.wait_for(simulator.wait(), 60.0)
    per_thousand = cpu / wall / (args.sessions / 1000)
    per_session_kib = (rss - rss_before) / args.sessions / 1024
    return (f"upstream capacity: {args.sessions} sessions held {wall:.0f} s: {per_thousand:.4f} CPU s per 1,000 "
            f"sessions per wall s ({cpu / wall:.3f} cores), {per_session_kib:.1f} KiB RSS per session "
            f"({rss / 2**20:.0f} MiB in all)")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    allow_descriptors(args.sessions)
    print(asyncio.run(measure(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
