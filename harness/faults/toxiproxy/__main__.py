"""``python -m harness.faults.toxiproxy``: run the embedded Toxiproxy-compatible server.

Flags are the real ``toxiproxy-server``'s, single-dash as Go writes them (double-dash works too).  Once
listening it prints one JSON line ``{"url": ..., "pid": ...}`` on stdout; SIGTERM or SIGINT closes every
proxy and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0..65535, got {port}")
    return port


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness.faults.toxiproxy",
        description="An embedded server speaking the Toxiproxy v2 HTTP API: TCP proxies whose traffic "
        "toxics (latency, bandwidth, slow_close, timeout, reset_peer, slicer, limit_data) degrade.",
    )
    parser.add_argument(
        "-host", "--host", default="127.0.0.1", help="address the API listens on (default 127.0.0.1)"
    )
    parser.add_argument(
        "-port", "--port", type=_port, default=8474, help="API port (default 8474; 0 picks a free port)"
    )
    parser.add_argument(
        "-seed",
        "--seed",
        type=int,
        default=None,
        help="seed for toxicity draws, jitter and slicing; with the same seed, the same sequence of "
        "connections and API calls gets the same draws (the real server's -seed only seeds Go's global "
        "generator, whose draws depend on timing). Default: random",
    )
    parser.add_argument(
        "-config", "--config", type=Path, default=None, help="JSON file of proxies to create at startup"
    )
    parser.add_argument(
        "-log-level",
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="stderr log level (default warning)",
    )
    return parser


async def _serve(args: argparse.Namespace) -> int:
    from harness.faults.toxiproxy.server import ToxiproxyServer  # aiohttp: imported once the flags are good

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    server = ToxiproxyServer(args.host, args.port, args.seed)
    try:
        url = await server.start()
    except OSError as exc:
        print(f"toxiproxy: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    try:
        if args.config is not None:
            try:
                await server.populate_from(args.config)
            except ValueError as exc:
                print(f"toxiproxy: {exc}", file=sys.stderr)
                return 1
        print(json.dumps({"url": url, "pid": os.getpid(), "seed": server.seed}), flush=True)
        await stop.wait()
        return 0
    finally:
        await server.close()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="toxiproxy %(levelname)s %(message)s")
    return asyncio.run(_serve(args))


if __name__ == "__main__":
    sys.exit(main())
