"""``python -m harness.backends``: serve an embedded backend until SIGTERM or Ctrl-C.

Prints one JSON line (kind, region, endpoints, queue_url, tables, dynamodb engine) on stdout once the
servers answer and the resources exist, so a script or another terminal can point fleet processes at it.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from types import FrameType

from harness.backends.base import BackendError
from harness.backends.embedded import DYNAMODB_ENGINES, start_embedded


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m harness.backends",
        description="Start the embedded AWS backend (DynamoDB, SQS, CloudWatch, Route 53 on loopback), "
        "create the fleet's tables and queues, print one JSON line describing it, and serve until "
        "SIGTERM or Ctrl-C.",
    )
    parser.add_argument(
        "--dynamodb",
        choices=DYNAMODB_ENGINES,
        default="dynalite",
        help="DynamoDB server: dynalite (Node; atomic, ~1,400 conditional updates/s) or moto "
        "(requests serialised, ~100/s). Default: dynalite, or moto when Node is missing.",
    )
    parser.add_argument(
        "--region", default="us-east-1", help="region the resources live in (default: us-east-1)"
    )
    parser.add_argument(
        "--log-dir",
        default=None,
        help="directory for the servers' stderr logs (kept); default: a temporary directory removed on exit",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        backend = start_embedded(dynamodb=args.dynamodb, region=args.region, log_dir=args.log_dir)
    except BackendError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    with backend:
        description = backend.describe() | {"dynamodb_engine": backend.dynamodb_engine}
        print(json.dumps(description), flush=True)
        print(f"serving the embedded backend (DynamoDB on {backend.dynamodb_engine}); "
              "SIGTERM or Ctrl-C stops it", file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
