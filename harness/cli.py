"""The ``wsfleet`` command: run a fleet locally, drive it, break it, and read what happened.

Subcommands: ``up`` (backend, simulator, router and N workers in the foreground), ``start`` / ``stop``
(post an event to the router), ``status`` (each connection's desired state, owner, ``last_seq`` and lag),
``messages`` (a stream's stored messages in order, takeover marks included),
``worker`` (one worker process, configured by ``WSFLEET_*``), ``scenario`` (one chaos scenario, built in or
from a file, with a verdict; ``--repeat`` measures how often it fails), ``explore`` (generated schedules
until one fails, then shrunk), ``report`` (reports from run folders), ``aws-preflight`` (a deployed fleet's
guardrails, checked before a run).  Errors are one line on stderr and a
non-zero exit: 2 for bad input, 1 for a failed check or an unreachable service.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleet.config import PROFILES, FleetConfig, tuning
from fleet.errors import ConfigError
from harness.cli_args import (
    CONNECTIONS,
    WORKERS,
    absolute_path,
    positive_int,
    rate_arg,
    run_folder,
    seconds_arg,
    timescale_arg,
)
from harness.cli_aws import (
    AWS_COMMANDS,
    add_aws_commands,
    add_aws_scenario_arguments,
    aws_only_options,
    cmd_aws_scenario,
)
from harness.cli_errors import CliError
from harness.cli_region import REGION_COMMANDS, add_region_command
from harness.cli_scenario import finish_scenario, report_runs, scenario_spec
from harness.processes import mark_children

if TYPE_CHECKING:
    from harness.scenarios.scenario_file import ScenarioSpec

HARNESS_EXTRAS = "pip install 'wsfleet[harness]'"

STATE_FILE = Path(".wsfleet") / "up.json"


def _connection_id(text: str) -> str:
    from fleet.router import CONNECTION_ID

    if not CONNECTION_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a connection id ([A-Za-z0-9._:-], 1 to 128 characters)")
    return text


def _seq(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a sequence number (a whole number)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is not a sequence number (0 or more)")
    return value


def _add_topology(p: argparse.ArgumentParser, run_dir_default: str,
                  backends: tuple[str, ...] = ("embedded", "localstack")) -> None:
    p.add_argument("--workers", type=WORKERS, default=3, help="worker processes to run (default 3)")
    p.add_argument("--profile", choices=PROFILES, default="hardened",
                   help="lease algorithm: blog (the published design), hardened (ours), unsafe (tests only)")
    p.add_argument("--timescale", type=timescale_arg, default=0.1,
                   help="multiply every duration by this (default 0.1: 2 s lease, 0.5 s heartbeat)")
    p.add_argument("--run-dir", type=absolute_path, default=None,
                   help=f"folder for history, logs and verdict; it must be new or empty (default: a new folder "
                        f"{run_dir_default}/<time>, linked as {run_dir_default}/latest)")
    p.add_argument("--force", action="store_true", help="empty a --run-dir that holds something, then use it")
    p.set_defaults(run_parent=run_dir_default)
    p.add_argument("--dynamodb", choices=("dynalite", "moto"),
                   help="embedded DynamoDB server (default: a scenario file's, else dynalite; moto is ~14x "
                        "slower, serialised)")
    p.add_argument("--rate", type=rate_arg, default=5.0, help="messages per second per stream (default 5)")
    p.add_argument("--backend", choices=backends, default="embedded",
                   help="AWS backend: embedded servers (default), a running LocalStack (see --localstack-url)"
                        + (", or a fleet deployed on AWS (see the options below)" if "aws" in backends else ""))
    p.add_argument("--localstack-url", default="http://localhost:4566",
                   help="LocalStack edge endpoint for --backend localstack (default http://localhost:4566)")
    p.add_argument("--start", action="store_true",
                   help="with --backend localstack: start a throwaway LocalStack container (testcontainers, "
                        "`pip install 'wsfleet[localstack]'`, and a Docker engine), create the resources in "
                        "it, and remove it at the end, instead of using --localstack-url")
    p.add_argument("--death-notices", action="store_true",
                   help="run each worker as a task of the embedded backend's ECS: when its process exits, ECS's "
                        "task state change goes to the queue (as EventBridge sends it on AWS) and the fleet "
                        "takes its streams at once instead of at lease expiry (hardened; embedded backend only)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                   help="a fleet setting for every worker and the router, e.g. --set max_connections=2000 "
                        "(repeatable; durations in ms at scale 1). WSFLEET_* variables in the environment "
                        "apply too; --set wins over them, and both over the defaults")


def _tuning(args: argparse.Namespace) -> dict[str, object]:
    """The fleet settings of --set and the WSFLEET_* environment, checked (exit 2 on a bad one)."""
    try:
        overrides = tuning(os.environ, args.settings)
        FleetConfig(profile="hardened", worker_id="cli", **overrides)  # type: ignore[arg-type]
    except ConfigError as exc:
        raise CliError(str(exc), 2) from None
    return overrides


def _version() -> str:
    try:
        return importlib.metadata.version("wsfleet")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _existing_dir(text: str) -> Path:
    path = absolute_path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder")
    return path


def _catalog_listing() -> str:
    try:
        from harness.scenarios.catalog import SCENARIOS
    except ModuleNotFoundError as exc:  # a fleet-only install (the worker image): say what is missing
        return f"scenarios: unavailable without the harness (missing module {exc.name!r}; {HARNESS_EXTRAS})"
    return "scenarios:\n" + "\n".join(f"  {name:<20} {spec.description}" for name, spec in SCENARIOS.items())


class _ExactParser(argparse.ArgumentParser):
    """A parser that takes options only as spelt: ``--out`` is an error, not ``--outputs``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = _ExactParser(
        prog="wsfleet",
        description="WebSocket workers coordinated by DynamoDB leases, and the chaos harness that measures "
                    "how they recover. Every duration is scaled by --timescale.",
    )
    parser.add_argument("--version", action="version", version=f"wsfleet {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    up = sub.add_parser("up", help="run backend, simulator, router and workers in the foreground",
                        description="Start the embedded AWS backend (dynalite + moto), the upstream simulator, "
                                    "the router and N workers; print one JSON line with every endpoint; stop "
                                    "everything on Ctrl-C or SIGTERM.")
    _add_topology(up, "runs/up")

    for name, verb in (("start", "START"), ("stop", "STOP")):
        p = sub.add_parser(name, help=f"post a {verb} event to the router",
                           description=f"POST {{\"event_type\": \"{verb}\", ...}} to the router of a running "
                                       "`wsfleet up` (or --router URL).")
        p.add_argument("connection_id", type=_connection_id,
                       help="connection id ([A-Za-z0-9._:-], at most 128 characters)")
        p.add_argument("--router", help="router base URL (default: from the running `wsfleet up`)")
        p.add_argument("--sign", action=argparse.BooleanOptionalAction, default=None,
                       help="sign the request with SigV4 (execute-api), as a deployed API Gateway requires "
                            "(default: only for an <api>.execute-api.<region>.amazonaws.com URL)")
        p.add_argument("--region", help="the API's region for signing (default: from the URL's host)")
        p.add_argument("--aws-profile", metavar="NAME",
                       help="sign with this shared-credentials profile (default: the standard chain)")
        if name == "start":
            p.add_argument("--ws-url", help="upstream URL (default: the simulator's stream for this id)")

    status = sub.add_parser("status", help="show every connection: desired state, owner, last_seq, lag",
                            description="Read the connections table and the simulator's heads of a running "
                                        "`wsfleet up`.")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")

    messages = sub.add_parser(
        "messages", help="print a stream's stored messages in order",
        description="Read a stream's items from the messages table of a running `wsfleet up` (either stored "
                    "layout: one item per message, or hardened's batch log with its takeover marks) and print "
                    "one line per message in the store's order: seq, timestamp (ms), batch, epoch, "
                    "writer (worker@gen), data. A takeover mark is a line of its own. Exit 1 if an item is "
                    "unreadable (each is printed, never skipped).")
    messages.add_argument("stream", type=_connection_id, metavar="STREAM", help="the connection id")
    messages.add_argument("--from", type=_seq, dest="from_seq", metavar="SEQ",
                          help="only messages from this sequence number on (and the marks placed there or later)")
    messages.add_argument("--json", action="store_true", help="one JSON object per line instead of columns")

    sub.add_parser("worker", help="run one worker process (configured by WSFLEET_* variables)",
                   description="Run one fleet worker; see `python -m fleet.worker --help` for its settings.")

    scenario = sub.add_parser(
        "scenario", help="run one chaos scenario and write its verdict", epilog=_catalog_listing(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run a scenario (built in, or a scenario file with --from) end to end and write RUN_DIR/"
                    "history, verdict.json and a report. Settings not given take the file's values. "
                    "Exit 0: valid; 1: invalid; 2: could not run.")
    scenario.add_argument("name", nargs="?", help="built-in scenario name (listed below)")
    scenario.add_argument("--from", dest="from_file", type=absolute_path, metavar="FILE",
                          help="run the scenario file FILE (YAML or JSON) instead of a built-in one")
    scenario.add_argument("--list", action="store_true", help="list the scenarios and exit")
    scenario.add_argument("--repeat", type=positive_int, default=1, metavar="K",
                          help="run K times (RUN_DIR/run-<i>) and report how often it was invalid")
    scenario.add_argument("--connections", type=CONNECTIONS, help="streams (default: the file's, 30)")
    scenario.add_argument("--seed", type=int, help="seed of the schedule's draws (default: the file's, 1)")
    scenario.add_argument("--no-report", action="store_true", help="skip the HTML/Markdown report")
    scenario.add_argument("--fleet-root", type=_existing_dir, metavar="DIR",
                          help="run the worker and router processes from the checkout DIR (e.g. a worktree of "
                               "an older commit); the harness and checkers stay this one")
    _add_topology(scenario, "runs/scenario", backends=("embedded", "localstack", "aws"))
    add_aws_scenario_arguments(scenario)
    scenario.set_defaults(workers=None, profile=None, timescale=None, rate=None)

    explore = sub.add_parser(
        "explore", help="run generated fault schedules until one is invalid; save and shrink it",
        description="Run schedules generated from seeds S, S+1, ... (one progress line each); stop at the "
                    "first invalid one, write it as a scenario file, shrink it (re-running candidates) and "
                    "write the minimal one beside it. With --keep-going, run every schedule, save each "
                    "invalid one, shrink the first of each class (the invariant it fails) and print the "
                    "classes; OUT/summary.json holds the counts, the fault mix and the classes, in all and per "
                    "backend. Run again with the same --out and settings, it carries the batch on: the seeds "
                    "already judged there are counted, not run again. Exit 0: "
                    "every run valid; 1: an invalid run was found; 2: nothing could be run.")
    explore.add_argument("--profile", choices=PROFILES, default="hardened", help="lease algorithm (default hardened)")
    explore.add_argument("--runs", type=positive_int, default=10, help="schedules to run at most (default 10)")
    explore.add_argument("--seed", type=int, default=1, help="seed of the first schedule (default 1)")
    explore.add_argument("--budget-s", type=seconds_arg, help="start no new run after this many seconds")
    explore.add_argument("--out", type=absolute_path, default=None,
                         help="folder for runs and scenario files; it must be new or empty, or hold a batch "
                              "of the same settings, which is carried on (default: a new folder "
                              "runs/explore/<time>, linked as runs/explore/latest)")
    explore.add_argument("--force", action="store_true", help="empty an --out that holds something, then use it")
    explore.add_argument("--fleet-root", type=_existing_dir, metavar="DIR",
                         help="run the worker and router processes from the checkout DIR")
    explore.add_argument("--workers", type=WORKERS, default=3, help="worker processes (default 3)")
    explore.add_argument("--connections", type=CONNECTIONS,
                         help="streams (default: drawn per run with the rate, 20x5/s, 10x10/s or 5x20/s; "
                              "20 when only --rate is given)")
    explore.add_argument("--timescale", type=timescale_arg, default=0.1, help="time scale (default 0.1)")
    explore.add_argument("--rate", type=rate_arg,
                         help="messages per second per stream (default: drawn per run with the streams; 5 "
                              "when only --connections is given)")
    explore.add_argument("--dynamodb", choices=("drawn", "dynalite", "moto"), default="drawn",
                         help="embedded DynamoDB server: drawn per run (default), or fixed to dynalite "
                              "or moto")
    explore.add_argument("--shrink-runs", type=int, default=20,
                         help="candidates the shrinker may try (default 20; 0: no shrinking)")
    explore.add_argument("--shrink-repeat", type=positive_int, default=1, metavar="K",
                         help="run each shrink candidate up to K times; it still fails if any run does "
                              "(default 1; failures that show only sometimes need more)")
    explore.add_argument("--keep-going", action="store_true",
                         help="do not stop at the first invalid run: classify them all (a benchmark)")

    report = sub.add_parser("report", help="build reports from run folders",
                            description="Write report.html, report.md and CSVs for one or more run folders "
                                        "(several: a comparison and an aggregate).")
    report.add_argument("run_dirs", nargs="+", type=absolute_path, help="run folders (each with history/)")
    report.add_argument("--out", type=absolute_path,
                        help="output folder (default: the run folder); one that holds a report is refused "
                             "without --force")
    report.add_argument("--force", action="store_true", help="overwrite the report an --out folder holds")
    report.add_argument("--locust-csv", metavar="PREFIX", type=absolute_path,
                        help="Locust's --csv PREFIX of a load run against the (one) run folder (default: "
                             "Locust's *_stats.csv found in the run folder)")

    add_region_command(sub)
    add_aws_commands(sub)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM: handled as Ctrl-C is (everything started is stopped and healed), exit 143."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """Ctrl-C and SIGTERM interrupt the command wherever it waits, so every process it started is stopped
    and every fault healed, even when it was started with SIGINT ignored (as a non-interactive shell starts
    a background job, whose children inherit that); the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    mark_children()
    try:
        with _interruptible():
            return int(COMMANDS[args.command](args))
    except CliError as exc:
        print(f"wsfleet {args.command}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print(f"wsfleet {args.command}: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        return 143 if terminated else 130
    except ModuleNotFoundError as exc:  # a fleet-only install has no harness dependencies
        print(f"wsfleet {args.command}: needs the Python module {exc.name!r}, which is not installed "
              f"(the harness: {HARNESS_EXTRAS})", file=sys.stderr)
        return 2


# -- up ---------------------------------------------------------------------------------------------------
def cmd_up(args: argparse.Namespace) -> int:
    overrides = _tuning(args)
    args.run_dir = run_folder(args.run_dir, args.force, args.run_parent)
    with _localstack(args) as localstack_url:
        return _run_up(args, localstack_url, overrides)


def _run_up(args: argparse.Namespace, localstack_url: str, overrides: dict[str, object]) -> int:
    from harness.cluster import Cluster, ClusterError, ClusterSpec

    spec = ClusterSpec(workers=args.workers, profile=args.profile, timescale=args.timescale,
                       run_dir=args.run_dir, dynamodb=args.dynamodb or "dynalite", rate=args.rate,
                       localstack_url=localstack_url, overrides=overrides,
                       death_notices=args.death_notices)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        with Cluster(spec) as cluster:
            # what ran, for the checkers and the report (a scenario's run.start names its scenario)
            cluster.history.emit("run.start", scenario="up", profile=spec.profile, timescale=spec.timescale,
                                 config=cluster.config.durations(), workers=spec.workers, seed=spec.seed,
                                 settings=overrides or None,
                                 load=f"{spec.rate:g} msg/s per stream, streams STARTed by clients")
            info = cluster.describe()
            STATE_FILE.parent.mkdir(exist_ok=True)
            STATE_FILE.write_text(json.dumps({**info, "backend_env": cluster.backend.env() if cluster.backend
                                               else {}}))
            print(json.dumps(info), flush=True)
            print(f"wsfleet up: running; Ctrl-C stops everything (logs in {args.run_dir}/logs)",
                  file=sys.stderr)
            while not stop.wait(1.0):
                pass
            print("wsfleet up: stopping", file=sys.stderr)
    except ClusterError as exc:
        raise CliError(str(exc), 1) from None
    finally:
        STATE_FILE.unlink(missing_ok=True)
    return 0


@contextlib.contextmanager
def _localstack(args: argparse.Namespace) -> Iterator[str]:
    """The LocalStack endpoint of ``--backend localstack`` ("" for the embedded backend); with ``--start``, a
    container's, removed when the block ends."""
    if args.start and args.backend != "localstack":
        raise CliError("--start starts a LocalStack container: it needs --backend localstack", 2)
    if not args.start:
        yield str(args.localstack_url) if args.backend == "localstack" else ""
        return
    from harness.backends.base import BackendError
    from harness.backends.localstack import start_localstack

    try:
        with start_localstack() as backend:
            print(f"wsfleet: LocalStack container started at {backend.endpoints['dynamodb']}", file=sys.stderr)
            yield backend.endpoints["dynamodb"]
    except BackendError as exc:
        raise CliError(str(exc), 2) from None


def _running() -> dict[str, Any]:
    try:
        return dict(json.loads(STATE_FILE.read_text()))
    except (OSError, ValueError):
        raise CliError("no running `wsfleet up` found here (start one in another terminal first)", 1) from None


# -- start / stop ----------------------------------------------------------------------------------------
def cmd_event(args: argparse.Namespace) -> int:
    from harness.cluster import ClusterError, http_json
    from harness.router_client import SigningError, error_text, signer_for

    router = args.router or _running()["router_url"]
    try:
        signer = signer_for(router, args.sign, args.region, args.aws_profile)
    except SigningError as exc:
        raise CliError(str(exc), 2) from None
    body: dict[str, Any] = {"event_type": args.command.upper(), "connection_id": args.connection_id}
    if args.command == "start":
        if args.ws_url:
            body["ws_url"] = args.ws_url
        else:
            up = _running()
            body["ws_url"] = f"{up['upstream_url']}/streams/{args.connection_id}"
            try:
                http_json("POST", f"{up['upstream_control_url']}/streams/{args.connection_id}")
            except ClusterError as exc:
                raise CliError(str(exc), 1) from None
    try:
        status, payload = http_json("POST", router.rstrip("/") + "/events", body, signer=signer)
    except ClusterError as exc:
        raise CliError(str(exc), 1) from None
    print(json.dumps(payload))
    if not 200 <= status < 300:
        raise CliError(f"router answered {status}: {error_text(payload)}", 2 if 400 <= status < 500 else 1)
    return 0


# -- status ----------------------------------------------------------------------------------------------
def cmd_status(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from harness.backends.resources import client
    from harness.cluster import ClusterError, http_json

    up = _running()
    try:
        ddb = client(up["backend_env"], "dynamodb")
        items = [i for page in ddb.get_paginator("scan").paginate(TableName=up["tables"]["connections"])
                 for i in page["Items"]]
        _, streams = http_json("GET", up["upstream_control_url"] + "/streams")
    except (BotoCoreError, ClientError, ClusterError) as exc:
        raise CliError(f"cannot read the fleet's state: {exc}", 1) from None
    heads = {s["id"]: s["head_seq"] for s in streams.get("streams", [])}
    rows = []
    for item in sorted(items, key=lambda i: i["pk"]["S"]):
        cid = item["pk"]["S"].removeprefix("CONN#")
        last_seq = int(item.get("last_seq", {}).get("N", 0))
        owner = item.get("lease_owner", {}).get("S", "")
        live = [s for s in next((x["sessions"] for x in streams.get("streams", []) if x["id"] == cid), [])
                if s["closed"] is None]
        consumed = max((s.get("last_seq_sent") or 0 for s in live), default=last_seq)
        rows.append({"connection_id": cid, "desired_state": item.get("desired_state", {}).get("S", ""),
                     "owner": owner, "last_seq": last_seq, "head_seq": heads.get(cid),
                     "lag": (heads[cid] - consumed) if cid in heads else None,
                     "sessions": [s["worker"] for s in live]})
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'CONNECTION':<16} {'DESIRED':<8} {'OWNER':<12} {'LAST_SEQ':>8} {'HEAD':>6} {'LAG':>5}  SESSIONS")
    for r in rows:
        print(f"{r['connection_id']:<16} {r['desired_state']:<8} {r['owner'] or '-':<12} {r['last_seq']:>8} "
              f"{r['head_seq'] if r['head_seq'] is not None else '-':>6} "
              f"{r['lag'] if r['lag'] is not None else '-':>5}  {','.join(r['sessions']) or '-'}")
    return 0


# -- messages --------------------------------------------------------------------------------------------
def cmd_messages(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from harness.backends.resources import client
    from harness.message_log import UNREADABLE, entries, messages

    up = _running()
    try:
        found = list(entries(client(up["backend_env"], "dynamodb"), up["tables"]["messages"],
                             f"CONN#{args.stream}"))
    except (BotoCoreError, ClientError) as exc:
        raise CliError(f"cannot read the messages table: {exc}", 1) from None
    unreadable = [entry for entry in found if entry.kind == UNREADABLE]
    for entry in found:
        if entry.kind == UNREADABLE:
            print(f"?? unreadable item, sk {entry.sk}: {entry.problem}")
        for message in messages([entry], args.from_seq):
            writer = f"{message.worker}@{message.gen}" if message.gen else message.worker or "-"
            if args.json:
                print(json.dumps(dataclasses.asdict(message)))
            elif message.kind == "mark":
                print(f"-- takeover mark, batch {message.batch}: {writer} epoch {message.epoch}")
            else:
                print(f"{message.seq:>8} {message.ts if message.ts is not None else '-':>14} "
                      f"{message.batch if message.batch is not None else '-':>6} "
                      f"{message.epoch if message.epoch is not None else '-':>5} {writer:<24} {message.data}")
    if not found:
        print(f"wsfleet messages: nothing stored for {args.stream}", file=sys.stderr)
    if unreadable:
        raise CliError(f"{len(unreadable)} stored item(s) of {args.stream} are unreadable", 1)
    return 0


# -- worker ----------------------------------------------------------------------------------------------
def cmd_worker(args: argparse.Namespace) -> int:
    from fleet.worker import main as worker_main

    return worker_main([])


# -- scenario --------------------------------------------------------------------------------------------
def cmd_scenario(args: argparse.Namespace) -> int:
    if args.list:
        from harness.scenarios.catalog import SCENARIOS

        for name, scenario in SCENARIOS.items():
            print(f"{name:<20} {scenario.description}")
        return 0
    spec = scenario_spec(args)
    if args.workers is not None and args.workers < 2:
        raise CliError("--workers must be at least 2 for a scenario (someone must take over)")
    overrides = _tuning(args)
    if args.backend == "aws":
        return cmd_aws_scenario(args, spec)
    aws_only = aws_only_options(args)
    if aws_only:
        raise CliError(f"{', '.join(aws_only)}: only with --backend aws (this run is local)", 2)
    args.run_dir = run_folder(args.run_dir, args.force, args.run_parent)
    if args.death_notices:
        spec = dataclasses.replace(spec, death_notices=True)
    with _localstack(args) as localstack_url:
        verdicts = [_run_scenario_once(args, spec, i, localstack_url, overrides) for i in range(args.repeat)]
    if args.repeat > 1:
        _print_reproduction(verdicts)
    return 0 if all(v["valid"] is True for v in verdicts) else 1


def _run_scenario_once(args: argparse.Namespace, spec: ScenarioSpec, i: int, localstack_url: str,
                       overrides: dict[str, object]) -> dict[str, Any]:
    from harness.cluster import ClusterError
    from harness.faults.plane import FaultError
    from harness.processes import ProcessError
    from harness.scenarios.runner import ScenarioError, ScenarioRun, run_scenario

    run_dir = args.run_dir if args.repeat == 1 else args.run_dir / f"run-{i + 1}"
    run = ScenarioRun(spec, profile=args.profile, timescale=args.timescale, workers=args.workers,
                      connections=args.connections, seed=args.seed, run_dir=run_dir, rate=args.rate,
                      dynamodb=args.dynamodb, localstack_url=localstack_url, fleet_root=args.fleet_root,
                      overrides=overrides)
    started = time.monotonic()
    try:
        verdict = run_scenario(run, progress=lambda line: print(line, file=sys.stderr, flush=True))
    except (ScenarioError, ClusterError, ProcessError, FaultError) as exc:
        raise CliError(str(exc), 2) from None
    finish_scenario(args, verdict, run_dir, started)
    return verdict


def _print_reproduction(verdicts: list[dict[str, Any]]) -> None:
    from harness.explore.explore import failing_invariants

    invalid = [v for v in verdicts if v["valid"] is False]
    per_invariant: dict[str, int] = {}
    for verdict in invalid:
        for name in failing_invariants(verdict):
            per_invariant[name] = per_invariant.get(name, 0) + 1
    detail = ", ".join(f"{name} {count}/{len(verdicts)}" for name, count in per_invariant.items())
    print(f"wsfleet scenario: reproduction rate {len(invalid)}/{len(verdicts)} invalid "
          f"({100 * len(invalid) / len(verdicts):.0f} %){': ' + detail if detail else ''}")


# -- explore ---------------------------------------------------------------------------------------------
def cmd_explore(args: argparse.Namespace) -> int:
    from harness.explore.explore import (
        ExploreError,
        ExploreOptions,
        condensed_mix,
        explore,
        per_backend_lines,
        resumable,
    )

    if args.workers < 2:
        raise CliError("--workers must be at least 2 (someone must take over)")
    options = ExploreOptions(profile=args.profile, runs=args.runs, seed=args.seed, budget_s=args.budget_s,
                             out=args.out, fleet_root=args.fleet_root, workers=args.workers,
                             connections=args.connections, timescale=args.timescale, rate=args.rate,
                             dynamodb=args.dynamodb, shrink_runs=max(0, args.shrink_runs),
                             shrink_repeat=args.shrink_repeat, keep_going=args.keep_going)
    try:  # a folder holding a batch of the same settings is carried on: its judged seeds are not run again
        resume = args.out is not None and not args.force and resumable(args.out, options)
    except ExploreError as exc:
        raise CliError(str(exc)) from None
    if not resume:
        args.out = options.out = run_folder(args.out, args.force, "runs/explore", "--out")
    result = explore(options, progress=lambda line: print(line, flush=True))
    ran = [v for v in result.verdicts.values() if v is not None]
    mix = ", ".join(f"{kind} {count}" for kind, count in condensed_mix(result.fault_mix).most_common())
    outside = f", {len(result.outside)} invalid outside the fault model" if result.outside else ""
    print(f"wsfleet explore: {len(result.verdicts)} runs ({len(ran)} ran, {result.invalid} invalid{outside}) in "
          f"{result.elapsed_s:.0f} s; fault mix: {mix or 'none'}; summary {args.out / 'summary.json'}")
    for line in per_backend_lines(result):
        print(f"wsfleet explore: {line}")
    for finding in result.outside:
        print(f"wsfleet explore: outside the fault model, seed {finding.seed} fails "
              f"{', '.join(finding.invariants)} ({finding.outside}); schedule {finding.schedule}")
    root = f" --fleet-root {args.fleet_root}" if args.fleet_root else ""
    for invariant, found in result.classes().items():
        first = found[0]
        replay = first.minimal or first.schedule
        print(f"wsfleet explore: fails {invariant} in {len(found)} run(s), seeds "
              f"{', '.join(str(f.seed) for f in found)}; schedule {first.schedule}"
              f"{f', shrunk {first.minimal}' if first.minimal else ''}\n"
              f"replay: wsfleet scenario --from {replay} --profile {args.profile}{root}")
    if result.classes():
        return 1
    return 0 if ran else 2


# -- report ----------------------------------------------------------------------------------------------
def cmd_report(args: argparse.Namespace) -> int:
    from harness.history import HistoryError
    from harness.report.build import REPORT_HTML, REPORT_MD

    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise CliError(f"--out {args.out} is a file, not a folder")
    if args.out is not None and not args.force and any((args.out / n).exists() for n in (REPORT_HTML, REPORT_MD)):
        raise CliError(f"--out {args.out} holds a report already; name another folder, or add --force to "
                       "overwrite it")
    try:
        path = report_runs(args.run_dirs, args.out, args.locust_csv)
    except (HistoryError, OSError, ValueError) as exc:
        raise CliError(str(exc), 2) from None
    print(path)
    return 0


COMMANDS = {
    "up": cmd_up, "start": cmd_event, "stop": cmd_event, "status": cmd_status, "messages": cmd_messages,
    "worker": cmd_worker,
    "scenario": cmd_scenario, "explore": cmd_explore, "report": cmd_report, **REGION_COMMANDS,
    **AWS_COMMANDS,
}

if __name__ == "__main__":
    sys.exit(main())
