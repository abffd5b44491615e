"""The embedded backend: real local servers reached by endpoint URL, with the fleet's resources created.

DynamoDB runs on dynalite (atomic conditional writes, ~1,400 updates/s) or, selected or when Node is
missing, on a moto server with DynamoDB requests serialised (``moto_serial``).  SQS, CloudWatch and
Route 53 run on a second moto server, so DynamoDB load never delays a long poll.  With moto as the
DynamoDB engine, DynamoDB Streams is served by that same process (it holds the tables).

``KeptBackends`` keeps one backend per engine up across a batch of runs (explore, the scenario suite): each
run borrows one renewed (``EmbeddedBackend.renew``: every server emptied as if just started, the resources
created again), so a run pays for neither the servers' start nor their stop, and sees nothing of the runs
before it.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import TracebackType

from botocore.exceptions import BotoCoreError, ClientError

from fleet.config import FleetConfig
from harness import http_client
from harness.backends.base import TABLE_FIELDS, Backend, BackendError
from harness.backends.resources import client, create_resources
from harness.backends.servers import ServerProcess, dynalite_command, start_dynalite, start_moto

DYNAMODB_ENGINES = ("dynalite", "moto")


@dataclass
class EmbeddedBackend(Backend):
    """A running embedded backend; ``stop()`` (or leaving the ``with`` block) ends its servers."""

    dynamodb_engine: str = "dynalite"
    servers: list[ServerProcess] = field(default_factory=list)
    log_dir: Path | None = None
    remove_log_dir: bool = False

    def pids(self) -> list[int]:
        return [server.pid for server in self.servers]

    def running(self) -> bool:
        return bool(self.servers) and all(server.child.running() for server in self.servers)

    def renew(self, config: FleetConfig) -> None:
        """Empty every server as if it had just started (moto's reset: tables, queues with their in-flight
        messages, ECS tasks, metrics; dynalite: every table deleted), then create ``config``'s tables and
        queues, empty."""
        moto_servers = self.servers if self.dynamodb_engine == "moto" else self.servers[1:]
        try:
            for server in moto_servers:
                http_client.request("POST", f"{server.url}/moto-api/reset", timeout_s=30.0)
            if self.dynamodb_engine == "dynalite":
                ddb = client(self.env(), "dynamodb")
                for name in ddb.list_tables()["TableNames"]:  # the server is ours: every table is a run's
                    ddb.delete_table(TableName=name)
        except (http_client.HttpError, BotoCoreError, ClientError) as exc:
            raise BackendError(f"could not empty the {self.dynamodb_engine} backend: {exc}") from exc
        self.create_resources(config)

    def create_resources(self, config: FleetConfig) -> None:
        """Create ``config``'s tables and queues (its region replaced by the backend's) and name them."""
        config = config.with_changes(region=self.region)
        self.tables = {role: getattr(config, name) for role, name in TABLE_FIELDS.items()}
        self.queue_url = create_resources(self.env(), config)

    def stop(self) -> None:
        """Stop every server (SIGTERM, then SIGKILL after a grace period); idempotent."""
        atexit.unregister(self.stop)
        for server in reversed(self.servers):
            server.stop()
        if self.remove_log_dir and self.log_dir is not None:
            shutil.rmtree(self.log_dir, ignore_errors=True)
            self.remove_log_dir = False

    def __enter__(self) -> EmbeddedBackend:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def start_embedded(
    dynamodb: str = "dynalite",
    region: str = "us-east-1",
    config: FleetConfig | None = None,
    log_dir: str | Path | None = None,
) -> EmbeddedBackend:
    """Start the servers, create the tables and queues, and return the running backend.

    ``config`` names the tables (its region is replaced by ``region``).  Server logs go to ``log_dir``
    (kept), or to a temporary directory removed by ``stop()``.  Without Node or dynalite, ``dynalite``
    falls back to moto with a message on stderr.
    """
    if dynamodb not in DYNAMODB_ENGINES:
        raise BackendError(f"dynamodb must be one of {', '.join(DYNAMODB_ENGINES)}, not {dynamodb!r}")
    config = (config or FleetConfig()).with_changes(region=region)
    if dynamodb == "dynalite":
        _, reason = dynalite_command()
        if reason:
            print(f"wsfleet: dynalite unavailable ({reason}); DynamoDB runs on moto instead "
                  "(requests serialised, ~100/s)", file=sys.stderr)
            dynamodb = "moto"
    directory = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="wsfleet-backend-"))
    backend = EmbeddedBackend(
        kind="embedded", region=region, endpoints={}, queue_url="", dynamodb_engine=dynamodb,
        log_dir=directory, remove_log_dir=log_dir is None,
    )
    atexit.register(backend.stop)  # a caller that forgets stop() still leaves no server or log dir behind
    try:
        backend.servers = _start_servers(dynamodb, directory)
        ddb_server, services = backend.servers
        backend.endpoints = {
            "dynamodb": ddb_server.url,
            "sqs": services.url,
            "cloudwatch": services.url,
            "route53": services.url,
            "ecs": services.url,  # the local stand-in for ECS tasks (harness.ecs_tasks)
            "ec2": services.url,
            "logs": services.url,  # the AWS backend's offline stand-in (harness.aws.standin)
            "sts": services.url,
            "fis": services.url,
            "apigatewayv2": services.url,  # the router API the stand-in names (aws_standin)
        }
        if dynamodb == "moto":
            backend.endpoints["dynamodbstreams"] = ddb_server.url
        backend.create_resources(config)
    except BaseException:
        backend.remove_log_dir = False  # the error message points into the logs
        backend.stop()
        raise
    return backend


def _start_servers(dynamodb: str, log_dir: Path) -> list[ServerProcess]:
    """Start the DynamoDB server and the services server side by side; on any failure stop both."""
    start_ddb = start_dynalite if dynamodb == "dynalite" else partial(start_moto, name="moto-dynamodb")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(start_ddb, log_dir), pool.submit(start_moto, log_dir, "moto-services")]
    # Leaving the block waited for both, so every future is done.
    errors = [error for error in (future.exception() for future in futures) if error is not None]
    started = [future.result() for future in futures if future.exception() is None]
    if errors:
        for server in started:
            server.stop()
        raise errors[0]
    return started


class KeptBackends:
    """One embedded backend per DynamoDB engine, started when first asked for and kept up until ``close()``;
    each ``fresh`` call renews it first.  Server logs go to ``log_dir/<engine>/`` (a temporary directory,
    removed on stop, without one)."""

    def __init__(self, log_dir: Path | None = None) -> None:
        self.log_dir = log_dir
        self._kept: dict[str, EmbeddedBackend] = {}

    def fresh(self, dynamodb: str, config: FleetConfig) -> EmbeddedBackend:
        """The kept backend of ``dynamodb`` (started now if none is running), empty, with ``config``'s
        resources."""
        backend = self._kept.get(dynamodb)
        if backend is not None and backend.running():
            backend.renew(config)
            return backend
        if backend is not None:  # a server ended under it: start the backend anew
            backend.stop()
        log_dir = self.log_dir / dynamodb if self.log_dir is not None else None
        self._kept[dynamodb] = backend = start_embedded(dynamodb, config=config, log_dir=log_dir)
        return backend

    def close(self) -> None:
        for backend in self._kept.values():
            backend.stop()
        self._kept.clear()

    def __enter__(self) -> KeptBackends:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
