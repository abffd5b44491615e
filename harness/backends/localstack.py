"""The ``localstack`` backend: the fleet's resources on a LocalStack, given its endpoint or started here.

``localstack_backend(endpoint_url, region)`` prepares a running LocalStack (tables and queues from
``fleet.schema`` through ``harness.backends.resources.create_resources``, the one implementation every
backend shares; idempotent, so a LocalStack whose ready hook already ran is fine) and returns the
``Backend`` whose ``env()`` points fleet processes at it.  ``start_localstack`` starts a throwaway
LocalStack container through testcontainers where a Docker engine answers; ``localstack_unavailable``
says why it cannot, so callers (and the pytest fixture) can skip with that reason.

``python -m harness.backends.localstack --endpoint URL --region R`` is what LocalStack's ready hook
(localstack/init/ready.d/wsfleet-resources.sh) runs; it prints one JSON line per region.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from botocore.exceptions import BotoCoreError, ClientError

from fleet.config import FleetConfig
from fleet.errors import ConfigError
from harness.backends.base import ENDPOINT_ENV_VARS, TABLE_FIELDS, Backend, BackendError
from harness.backends.resources import create_resources

LOCALSTACK_IMAGE = "localstack/localstack:4.14.0"
# What localstack/docker-compose.yml enables (a test checks they agree): the fleet's data plane plus what
# deploying the router there would take.
LOCALSTACK_SERVICES: tuple[str, ...] = ("dynamodb", "sqs", "cloudwatch", "route53", "lambda", "apigateway")
DEFAULT_ENDPOINT = "http://127.0.0.1:4566"
DEFAULT_REGION = "us-east-1"
_DOCKER_SOCKET = "/var/run/docker.sock"
_PING_TIMEOUT_S = 2.0


def localstack_backend(
    endpoint_url: str, region: str = DEFAULT_REGION, config: FleetConfig | None = None
) -> Backend:
    """Create the fleet's resources on the LocalStack at ``endpoint_url`` in ``region``; return its Backend.

    Table names come from ``config`` (default: FleetConfig's).  Every service the fleet uses is reached
    at the one endpoint.  Raises BackendError when LocalStack does not answer or refuses.
    """
    parts = urlsplit(endpoint_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BackendError(f"LocalStack endpoint must be an http(s) URL, not {endpoint_url!r}")
    effective = (config or FleetConfig()).with_changes(region=region)
    endpoints = {service: endpoint_url for service in ENDPOINT_ENV_VARS}
    tables = {role: str(getattr(effective, name)) for role, name in TABLE_FIELDS.items()}
    unprepared = Backend(kind="localstack", region=region, endpoints=endpoints, queue_url="", tables=tables)
    queue_url = create_resources(unprepared.env(), effective)
    return Backend(kind="localstack", region=region, endpoints=endpoints, queue_url=queue_url, tables=tables)


def localstack_unavailable() -> str | None:
    """Why no LocalStack container can be started here (no testcontainers, no Docker engine), or None."""
    try:
        importlib.import_module("testcontainers.localstack")
    except ImportError:
        return "testcontainers is not installed (pip install 'testcontainers[localstack]')"
    return _docker_engine_problem()


@contextmanager
def start_localstack(
    region: str = DEFAULT_REGION, image: str = LOCALSTACK_IMAGE, config: FleetConfig | None = None
) -> Iterator[Backend]:
    """Start a LocalStack container (testcontainers), prepare it, yield its Backend, and remove it."""
    problem = localstack_unavailable()
    if problem:
        raise BackendError(f"cannot start LocalStack: {problem}")
    module = importlib.import_module("testcontainers.localstack")
    container = module.LocalStackContainer(image=image, region_name=region)
    container = container.with_services(*LOCALSTACK_SERVICES)
    container.start()
    try:
        yield localstack_backend(str(container.get_url()), region, config)
    finally:
        container.stop()


def _docker_engine_problem() -> str | None:
    """Ping the Docker engine named by DOCKER_HOST (default: the local socket); None when it answers."""
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return None  # a TCP engine: testcontainers will say whether it answers
    path = host[len("unix://"):] if host else _DOCKER_SOCKET
    if not os.path.exists(path):
        return f"no Docker engine: {path} does not exist (the docker client alone is not enough)"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(_PING_TIMEOUT_S)
            sock.connect(path)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            answer = sock.recv(64)
    except OSError as exc:
        return f"no Docker engine answering at {path}: {exc}"
    if not answer.startswith(b"HTTP/1.") or b" 200 " not in answer:
        return f"the Docker engine at {path} did not answer its ping: {answer[:40]!r}"
    return None


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m harness.backends.localstack",
        description="Create the fleet's tables and notification queues (from fleet/schema.py) on a running "
        "LocalStack and print one JSON line per region describing the backend (endpoints, queue URL, "
        "tables). Safe to repeat: existing tables and queues are kept. Table names follow the WSFLEET_* "
        "variables, as in every fleet process.",
    )
    parser.add_argument(
        "--endpoint",
        default=os.environ.get("WSFLEET_LOCALSTACK_ENDPOINT", DEFAULT_ENDPOINT),
        help="LocalStack's URL (default: $WSFLEET_LOCALSTACK_ENDPOINT or %(default)s)",
    )
    parser.add_argument(
        "--region",
        action="append",
        help=f"region to create the resources in; repeat for a standby region (default: {DEFAULT_REGION})",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        config = FleetConfig.from_env()
        for region in args.region or [DEFAULT_REGION]:
            backend = localstack_backend(args.endpoint, region, config)
            print(json.dumps(backend.describe()), flush=True)
    except (BackendError, ConfigError, BotoCoreError, ClientError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
