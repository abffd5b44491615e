"""Command line of the simulated upstream: ``python -m harness.upstream_sim [options]``.

When it is listening it prints one JSON line, ``{"ws_url": ..., "control_url": ..., "pid": ...}``, then serves
until SIGTERM or SIGINT and shuts down cleanly (exit 0).  Bad options exit 2; a port or history file that
cannot be opened exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import sys

from harness.upstream_sim.control import MAX_RATE
from harness.upstream_sim.server import (
    DEFAULT_HANDSHAKE_QUOTA,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_AGE,
    UpstreamSimulator,
)

PROG = "python -m harness.upstream_sim"


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _rate(text: str) -> float:
    value = _positive_float(text)
    if value > MAX_RATE:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_RATE:g} messages per second, got {text!r}")
    return value


def _limit(text: str) -> float | None:
    """A gateway limit: a positive number, or 0 / none for off."""
    if text.lower() in ("0", "none"):
        return None
    try:
        return _positive_float(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a positive number, or 0 or none for off, got {text!r}") from None


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535, got {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Simulated upstream WebSocket source. Each connection id is a stream of JSON text frames "
            '{"seq": n, "data": "<id>:<n>", "ts": <unix ms>} emitted at a set rate from seq 1, whether '
            "or not anyone listens. Subscribe at ws://HOST:PORT/streams/{id}?from_seq=N (header "
            "X-Worker-Id names the worker, X-Worker-Gen its incarnation); the same port answers the JSON control "
            "API (/health, /stats, /streams, /streams/{id}, /streams/{id}/disconnect, /disconnect) and "
            "/redirect?location=URL (a 302, for testing clients' redirect handling); browsers are refused. "
            "Like API Gateway, it meters new connections (a handshake over the quota is answered 429 with "
            "Retry-After) and closes a session at a maximum age and after an idle timeout (close code 1001, "
            "'Going away'); these limits are given at time scale 1 and multiplied by --timescale, while the "
            "keepalive and close timeouts are in real seconds. Prints one JSON line with ws_url, "
            "control_url and pid when ready; SIGTERM or SIGINT stops it."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument(
        "--port", type=_port, default=0, help="port to listen on; 0 picks a free one (default: %(default)s)"
    )
    parser.add_argument(
        "--rate",
        type=_rate,
        default=10.0,
        help="messages per second emitted by each stream (default: %(default)s)",
    )
    parser.add_argument(
        "--replay-depth",
        type=_positive_int,
        default=10000,
        help="frames kept per stream to serve from_seq resumes; an older from_seq is served from the oldest "
        "kept frame and the session records replay_from (default: %(default)s)",
    )
    parser.add_argument(
        "--max-backlog",
        type=_positive_int,
        default=None,
        help="unsent frames a session may have queued (a slow or frozen client) before it is closed with "
        "reason 'error'; at least the replay depth (default: twice the replay depth)",
    )
    parser.add_argument(
        "--ping-interval",
        type=_positive_float,
        default=0.5,
        help="real seconds between keepalive pings on each session (default: %(default)s)",
    )
    parser.add_argument(
        "--ping-timeout",
        type=_positive_float,
        default=0.5,
        help="real seconds a ping may take to be sent and answered before the session is closed with reason "
        "'keepalive_timeout' (default: %(default)s)",
    )
    parser.add_argument(
        "--close-timeout",
        type=_positive_float,
        default=1.0,
        help="real seconds a close frame may take before the TCP connection is aborted (default: %(default)s)",
    )
    parser.add_argument(
        "--evict-older",
        action="store_true",
        help="a new session of a stream closes that stream's older sessions with reason 'evicted'",
    )
    parser.add_argument(
        "--handshake-quota",
        type=_limit,
        default=DEFAULT_HANDSHAKE_QUOTA,
        metavar="PER_SECOND",
        help="new-connection quota: WebSocket handshakes accepted a second (a token bucket); one over it is "
        "answered HTTP 429 with a Retry-After header in whole seconds (at least 1); handshakes a second at "
        "time scale 1, 0 or none: no quota (default: %(default)g, API Gateway's)",
    )
    parser.add_argument(
        "--handshake-burst",
        type=_positive_int,
        default=None,
        metavar="HANDSHAKES",
        help="handshakes the quota accepts at once after a quiet spell (the bucket's size) "
        "(default: one second's worth of --handshake-quota)",
    )
    parser.add_argument(
        "--max-age",
        type=_limit,
        default=DEFAULT_MAX_AGE,
        metavar="SECONDS",
        help="close a session this long after it opened, with code 1001 'Going away' and reason 'max_age' in "
        "the history; seconds at time scale 1, 0 or none: never (default: %(default)g, API Gateway's 2 hours)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=_limit,
        default=DEFAULT_IDLE_TIMEOUT,
        metavar="SECONDS",
        help="close a session whose client sent no frame (data, ping, pong or close) for this long, with code "
        "1001 'Going away' and reason 'idle_timeout'; a client that answers the keepalive pings is never idle; "
        "seconds at time scale 1, 0 or none: never (default: %(default)g, API Gateway's 10 minutes)",
    )
    parser.add_argument(
        "--timescale",
        type=_positive_float,
        default=1.0,
        help="multiplies the gateway limits (--handshake-quota's second, --max-age, --idle-timeout, the "
        "Retry-After a client is told, the one-second windows of the 'handshakes' history events), as the "
        "cluster's time scale "
        "multiplies every fleet duration (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the random choice of the sessions a POST /disconnect?fraction=F drops, so a run is "
        "reproducible (default: %(default)s)",
    )
    parser.add_argument(
        "--history",
        metavar="FILE",
        default=None,
        help="append the upstream's history events (sub.open, sub.close, emit, handshakes) to this JSON Lines file "
        "(default: no history)",
    )
    return parser


async def _serve(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    simulator = UpstreamSimulator(
        rate=args.rate,
        replay_depth=args.replay_depth,
        max_backlog=args.max_backlog,
        ping_interval=args.ping_interval,
        ping_timeout=args.ping_timeout,
        close_timeout=args.close_timeout,
        evict_older=args.evict_older,
        history_path=args.history,
        max_age=args.max_age,
        idle_timeout=args.idle_timeout,
        handshake_quota=args.handshake_quota,
        handshake_burst=args.handshake_burst,
        timescale=args.timescale,
        seed=args.seed,
    )
    try:
        ws_url, control_url = await simulator.start(args.host, args.port)
    except OSError as exc:
        print(f"{PROG}: cannot start on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"ws_url": ws_url, "control_url": control_url, "pid": os.getpid()}), flush=True)
    try:
        await stop.wait()
    finally:
        await simulator.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.max_backlog is not None and args.max_backlog < args.replay_depth:
        parser.error(
            f"--max-backlog ({args.max_backlog}) must be at least --replay-depth ({args.replay_depth})"
        )
    return asyncio.run(_serve(args))


if __name__ == "__main__":
    sys.exit(main())
