"""A moto server whose DynamoDB requests run one at a time (``python -m harness.backends.moto_serial``).

A stock moto server handles each request on its own thread, and its DynamoDB model does not make a
conditional write atomic: two concurrent conditional writers can both be told they won.  This launcher
wraps moto's WSGI application in a middleware holding one lock around every DynamoDB and DynamoDB
Streams request (``X-Amz-Target`` starting with ``DynamoDB``), so each request sees the effect of the one
before; other services (SQS long polls in particular) stay concurrent.

Its ECS keeps tasks where they are told to be, as ECS does (``ecs_as_aws``): moto's default lifecycle moves a
RUNNING task a step toward STOPPED on every DescribeTasks, which made forged death notices look true.

It binds the requested port (0 = any free one), writes ``{"port": N}`` as one line on stdout, then sends
its stdout to stderr.  It exits 0 on SIGTERM or SIGINT, and by itself when the process that started it
(``--parent-pid``) is gone, so a killed test run leaves no server behind.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from types import FrameType
from typing import Any

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

_PARENT_CHECK_S = 0.5


class SerialisedDynamoDB:
    """WSGI middleware: DynamoDB requests pass through ``app`` one at a time, the rest concurrently."""

    def __init__(self, app: WsgiApp) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not str(environ.get("HTTP_X_AMZ_TARGET", "")).startswith("DynamoDB"):
            return self.app(environ, start_response)
        with self.lock:
            body = self.app(environ, start_response)
            try:
                return [b"".join(body)]
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()


def ecs_as_aws() -> None:
    """Make moto's ECS tasks behave as ECS's do where death notices look (``fleet.deathnotice``): a task
    moves only when told (StopTask), never because it was described, and a stopped task says when it
    stopped (``stoppedAt``; ``executionStoppedAt``, its containers' stop, the same here), which moto leaves
    out.  The first stop dates it; a second StopTask does not."""
    from moto.ecs.models import EC2ContainerServiceBackend, Task
    from moto.moto_api import state_manager

    # "manual": a task moves one step after this many descriptions, so never
    state_manager.set_transition("ecs::task", {"progression": "manual", "times": sys.maxsize})
    stop_task = EC2ContainerServiceBackend.stop_task

    def stop_and_date(self: EC2ContainerServiceBackend, cluster_str: str, task_str: str, reason: str) -> Task:
        task = stop_task(self, cluster_str, task_str, reason)
        if getattr(task, "stopped_at", None) is None:
            task.stopped_at = task.execution_stopped_at = datetime.now(UTC)  # type: ignore[attr-defined]
        return task

    EC2ContainerServiceBackend.stop_task = stop_and_date  # type: ignore[method-assign]


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m harness.backends.moto_serial",
        description="Serve moto (all services) with DynamoDB requests serialised. Prints {\"port\": N} "
        "on stdout once listening; exits 0 on SIGTERM/SIGINT.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one (default: 0)")
    parser.add_argument(
        "--unserialised",
        action="store_true",
        help="do not serialise DynamoDB requests (stock moto behaviour; for demonstrating the race only)",
    )
    parser.add_argument(
        "--parent-pid",
        type=int,
        default=0,
        help="exit when this process is gone (default: 0, never)",
    )
    return parser.parse_args(argv)


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(_PARENT_CHECK_S)
    os._exit(0)


def _stop(signum: int, frame: FrameType | None) -> None:
    """End at once: the store is in memory, and closing the server would wait for every open keep-alive
    connection's thread (a fleet process's client holds one) until the grace is spent and we are killed."""
    sys.stderr.flush()
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if not 0 <= args.port <= 65535:
        print(f"moto_serial: --port must be 0..65535, not {args.port}", file=sys.stderr)
        return 2
    # A second purge within 60 s is refused by AWS; tests purge between cases.
    os.environ.setdefault("MOTO_SQS_ENFORCE_STRICT_QUEUE_PURGE_BEHAVIOUR", "false")
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    class QuietHandler(MotoRequestHandler):
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            """One line per request would cost more than the request; errors are still logged."""

    ecs_as_aws()
    app: WsgiApp = DomainDispatcherApplication(create_backend_app)
    if not args.unserialised:
        app = SerialisedDynamoDB(app)
    try:
        server = make_server(args.host, args.port, app, threaded=True, request_handler=QuietHandler)
    except OSError as exc:
        print(f"moto_serial: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    os.environ["MOTO_PORT"] = str(server.server_port)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if args.parent_pid:
        threading.Thread(target=_watch_parent, args=(args.parent_pid,), daemon=True).start()
    print(json.dumps({"port": server.server_port}), flush=True)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    server.serve_forever()  # until SIGTERM or SIGINT ends the process (_stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
