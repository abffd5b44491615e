"""The ``wsfleet`` subcommands for a fleet deployed on AWS (``terraform/``), named by terraform's outputs:
``aws-preflight`` (its guardrails, checked before a run may touch it, changing nothing), ``aws-plan`` (a dry
run of a scenario: each action and its target, the FIS experiment template, the cost at most),
``aws-history`` (its history, read back from CloudWatch Logs into a run folder), ``aws-standin`` (a local
fleet posing as a deployment, moto standing in for AWS), and ``scenario --backend aws`` (``cmd_aws_scenario``).
boto3 is imported only when one runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.cli_args import absolute_path, run_folder
from harness.cli_errors import CliError

LOGS_WAIT_S = 15.0  # default seconds to let CloudWatch Logs take a run's last events


def _instant(text: str) -> int:
    """An ISO 8601 time (UTC unless it says otherwise) as Unix ms."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r} (e.g. 2026-12-01T17:00:00Z)") from None
    return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp() * 1000)


def _command(sub: Any, name: str, summary: str, description: str, credentials: bool = True) -> Any:
    """A subcommand of a deployment named by terraform's outputs (``--outputs`` or ``--terraform-dir``)."""
    parser = sub.add_parser(name, help=summary, description=description)
    named = parser.add_mutually_exclusive_group(required=True)
    named.add_argument("--outputs", type=Path, metavar="FILE", help="a file of `terraform output -json`")
    named.add_argument("--terraform-dir", type=Path, metavar="DIR", help="run `terraform output -json` there")
    if credentials:
        parser.add_argument("--aws-profile", metavar="NAME", help="credentials profile (default: the standard chain)")
    return parser


def add_aws_commands(sub: Any) -> None:
    preflight = _command(
        sub, "aws-preflight", "check a deployed fleet's guardrails before a run may touch it",
        "Read the deployment from terraform's outputs and check, changing nothing: the outputs' region and the "
        "credentials' account are the ones named here, and every resource a run may touch (tables, queue, ECS "
        "cluster and service) carries the allowlisted tag. Exit 0: all pass; 1: a check failed; 2: the outputs "
        "could not be read.")
    preflight.add_argument("--account", required=True, help="the only AWS account id a run may touch")
    preflight.add_argument("--region", required=True, help="the only region a run may touch")
    preflight.add_argument("--tag", metavar="KEY=VALUE",
                           help="the tag every touched resource must carry (default: wsfleet:chaos=allowed, "
                                "which terraform adds with chaos_target = true)")

    plan = _command(
        sub, "aws-plan", "dry run: what a scenario would do to a deployed fleet, its FIS template and its cost",
        "Print, changing nothing and calling no AWS API, every action a scenario would take against the "
        "deployment (router calls, and each fault step as the AWS Fault Injection Service action that runs it, "
        "the harness act, or why it cannot run on AWS), with the cost of the run at most; --fis-template writes "
        "the FIS experiment template. The durations are the deployment's (terraform's fleet_environment). "
        "Exit 0: every step can run; 1: some cannot; 2: bad input.", credentials=False)
    plan.add_argument("name", nargs="?", help="built-in scenario name (`wsfleet scenario --list`)")
    plan.add_argument("--from", dest="from_file", type=Path, metavar="FILE", help="a scenario file instead")
    plan.add_argument("--seed", type=int, help="seed of the schedule's draws (default: the file's)")
    plan.add_argument("--role-arn", metavar="ARN", help="the IAM role FIS assumes for the experiment (default: the "
                                                        "outputs' fis_role_arn, made with chaos_target = true)")
    plan.add_argument("--stop-alarm", action="append", default=[], metavar="ARN",
                      help="a CloudWatch alarm that stops the experiment (repeat; at least one)")
    plan.add_argument("--tag", metavar="KEY=VALUE", help="the tag a target task must carry "
                                                         "(default: wsfleet:chaos=allowed)")
    plan.add_argument("--upstream-host", default="", metavar="HOST", help="the upstream's host (latency toward it)")
    plan.add_argument("--upstream-port", type=int, default=443, metavar="PORT",
                      help="the upstream's port (partition_upstream black-holes it; default 443)")
    plan.add_argument("--fis-template", type=Path, metavar="FILE", help="write the FIS experiment template here")

    history = _command(
        sub, "aws-history", "read a deployed fleet's history back from CloudWatch Logs",
        "Write the history events the deployment's workers and router logged between two times (set "
        "WSFLEET_HISTORY_PATH=/dev/stdout in terraform's fleet_settings) to RUN_DIR/history, one file per "
        "process, for the checkers and `wsfleet report`.")
    history.add_argument("--since", type=_instant, required=True, metavar="TIME",
                         help="ISO 8601, UTC unless it says otherwise (e.g. 2026-12-01T17:00:00Z)")
    history.add_argument("--until", type=_instant, required=True, metavar="TIME", help="ISO 8601, as --since")
    history.add_argument("--run-dir", type=absolute_path, required=True, metavar="DIR", help="where history/ goes")
    _add_standin(sub)


def _add_standin(sub: Any) -> None:
    standin = sub.add_parser(
        "aws-standin", help="a local fleet posing as a deployment, to try --backend aws without an account",
        description="Start a local fleet (hardened) dressed as a deployment, with moto standing in for AWS: its "
                    "workers are ECS tasks, its router is behind a SigV4 check like API Gateway's, its history "
                    "goes to CloudWatch Logs, its resources carry the chaos tag. Write the outputs file terraform "
                    "would, print the AWS variables that point a shell at it, and run until Ctrl-C.")
    standin.add_argument("--run-dir", type=absolute_path, default=None,
                         help="folder for the fleet's files and outputs.json; it must be new or empty (default: a "
                              "new folder runs/aws-standin/<time>, linked as runs/aws-standin/latest)")
    standin.add_argument("--force", action="store_true", help="empty a --run-dir that holds something, then use it")
    standin.add_argument("--workers", type=int, default=3, help="worker tasks (default 3)")
    standin.add_argument("--timescale", type=float, default=0.1, help="time scale of the fleet (default 0.1)")
    standin.add_argument("--dynamodb", choices=("dynalite", "moto"), default="dynalite",
                         help="the DynamoDB stand-in (default dynalite; moto serialises requests, ~100/s)")


def cmd_aws_standin(args: argparse.Namespace) -> int:
    import signal
    import threading

    from harness.aws.standin import aws_standin
    from harness.cluster import ClusterError

    args.run_dir = run_folder(args.run_dir, args.force, "runs/aws-standin")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        with aws_standin(args.run_dir, workers=args.workers, timescale=args.timescale,
                         dynamodb=args.dynamodb) as standin:
            for name, value in sorted(standin.env.items()):
                if name.startswith("AWS_"):
                    print(f"export {name}={value}")
            print(f"# outputs: {standin.outputs}; account {standin.account}, region {standin.env['AWS_REGION']}; "
                  f"stop alarm {standin.stop_alarm}", flush=True)
            print(f"wsfleet aws-standin: ready; try `wsfleet scenario crash --backend aws --outputs {standin.outputs}"
                  f" --account {standin.account} --region {standin.env['AWS_REGION']} --stop-alarm "
                  f"{standin.stop_alarm}` in a shell with those variables; Ctrl-C stops", file=sys.stderr, flush=True)
            stop.wait()
    except ClusterError as exc:
        raise CliError(str(exc), 1) from None
    return 0


def _tag(text: str | None) -> tuple[str, str]:
    from harness.aws.deployment import CHAOS_TAG

    key, value = str(text).partition("=")[::2] if text else CHAOS_TAG
    if not key or not value:
        raise CliError(f"--tag must be KEY=VALUE, not {text!r}", 2)
    return key, value


def cmd_aws_plan(args: argparse.Namespace) -> int:
    import json

    from fleet.config import FleetConfig
    from fleet.errors import ConfigError
    from harness.aws.cost import RunLoad, run_ceiling_s
    from harness.aws.deployment import DeploymentError, read_outputs
    from harness.aws.fis import FIS, FisError, FisOptions, fis_plan
    from harness.cli_scenario import scenario_spec

    spec = scenario_spec(args)
    try:
        deployment = read_outputs(args.outputs, args.terraform_dir)
        config = FleetConfig.from_env({**deployment.fleet_environment, "WSFLEET_WORKER_ID": "harness"})
    except (DeploymentError, ConfigError) as exc:
        raise CliError(str(exc), 2) from None
    seed = spec.seed if args.seed is None else args.seed
    plan = spec.expand(config.profile, seed, config, spec.workers)
    role_arn = args.role_arn or deployment.fis_role_arn
    if not role_arn:
        raise CliError("no --role-arn, and the outputs name no fis_role_arn (terraform makes one with "
                       "chaos_target = true)", 2)
    options = FisOptions(role_arn, tuple(args.stop_alarm), _tag(args.tag), args.upstream_host, args.upstream_port)
    try:
        fis = fis_plan(spec.name, plan.steps, deployment, options)
    except FisError as exc:
        raise CliError(str(exc), 2) from None
    print(f"wsfleet aws-plan: {spec.name} against {deployment.cluster}/{deployment.service} in {deployment.region} "
          f"(profile {config.profile}, time scale {config.timescale:g}, seed {seed}); nothing is changed")
    print(f"  router {deployment.router_url} (SigV4-signed): START {spec.connections} streams, "
          f"then {len(plan.ops)} operations")
    tag = "=".join(options.tag)
    actions = [(op.at_s, f"{op.op.upper()} {op.target}") for op in plan.ops]
    for fault in fis.faults:
        step = fault.step
        on = (f"every task of the service tagged {tag}" if step.target == "all" else
              f"one task of the service tagged {tag}, drawn by FIS"
              + ("" if step.target == "random" else f" ({step.target} cannot be named before the run)"))
        actions.append((step.at_s, f"{step.kind} -> {step.target}: {fault.how.upper()}"
                        + (f" {fault.action['actionId']} on {on}: " if fault.how == FIS and fault.action else ": ")
                        + fault.detail))
    for at_s, action in sorted(actions, key=lambda a: a[0]):
        print(f"  at {at_s:7.2f} s  {action}")
    _print_cost(RunLoad(run_ceiling_s(plan, config), spec.workers, spec.connections, spec.rate,
                        spec.connections + len(plan.ops), fis.action_minutes, config))
    if fis.refused:
        raise CliError(f"{len(fis.refused)} of {len(fis.faults)} steps cannot run on AWS "
                       f"({', '.join(sorted({f.step.kind for f in fis.refused}))}): no template written", 1)
    if args.fis_template is not None:
        args.fis_template.write_text(json.dumps(fis.template, indent=2) + "\n")
        print(f"wsfleet aws-plan: FIS template in {args.fis_template}; create it with `aws fis "
              f"create-experiment-template --cli-input-json file://{args.fis_template}`", file=sys.stderr)
    return 0


def _print_cost(load: Any) -> None:
    """The cost of a run at most (``harness.aws.cost``), line by line."""
    from harness.aws.cost import PRICES_AS_OF, estimate

    lines = estimate(load)
    print(f"  cost at most, for {load.seconds:.0f} s of load ({PRICES_AS_OF}; no free tier, no data transfer):")
    for line in lines:
        print(f"    {line.item:<16} {line.quantity:>14,.4f} {line.unit:<22} ${line.usd:.4f}")
    print(f"    {'total':<16} {'':>14} {'':<22} ${sum(line.usd for line in lines):.4f}")


def _deployment_and_session(args: argparse.Namespace) -> tuple[Any, Any]:
    import boto3
    from botocore.exceptions import BotoCoreError

    from harness.aws.deployment import DeploymentError, read_outputs

    try:
        return read_outputs(args.outputs, args.terraform_dir), boto3.Session(profile_name=args.aws_profile)
    except (DeploymentError, BotoCoreError) as exc:  # BotoCoreError: e.g. a profile that does not exist
        raise CliError(str(exc), 2) from None


def cmd_aws_preflight(args: argparse.Namespace) -> int:
    from harness.aws.deployment import Guardrails, preflight

    deployment, session = _deployment_and_session(args)
    checks = preflight(deployment, Guardrails(args.account, args.region, _tag(args.tag)), session)
    for check in checks:
        print(f"{'ok  ' if check.ok else 'FAIL'}  {check.name}: {check.detail}")
    failed = [check.name for check in checks if not check.ok]
    if failed:
        raise CliError(f"{len(failed)} of {len(checks)} checks failed ({', '.join(failed)}): nothing may run", 1)
    print(f"wsfleet aws-preflight: all {len(checks)} checks passed", file=sys.stderr)
    return 0


def cmd_aws_history(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from harness.aws.deployment import aws_error_text
    from harness.aws.logs import ROUTER, WORKERS, fetch_history

    if args.until <= args.since:
        raise CliError("--until must be later than --since", 2)
    deployment, session = _deployment_and_session(args)
    logs = session.client("logs", region_name=deployment.region)
    groups = ((deployment.worker_log_group, WORKERS), (deployment.router_log_group, ROUTER))
    try:
        fetched = fetch_history(logs, groups, args.since, args.until, args.run_dir)
    except (ClientError, BotoCoreError) as exc:
        raise CliError(f"reading {', '.join(group for group, _ in groups)}: {aws_error_text(exc)}", 1) from None
    for src, count in fetched.events.items():
        print(f"{src}: {count} events")
    print(f"wsfleet aws-history: {sum(fetched.events.values())} events from {len(fetched.events)} processes "
          f"({fetched.other_lines} other log lines) in {args.run_dir / 'history'}", file=sys.stderr)
    for problem, count in fetched.refused.items():
        print(f"wsfleet aws-history: error: {count} lines refused: {problem}", file=sys.stderr)
    if fetched.refused:
        raise CliError(f"{sum(fetched.refused.values())} history lines of the deployment were refused (above): "
                       "their events are not in the run folder", 1)
    if not fetched.events:
        raise CliError("no history events in that window (is WSFLEET_HISTORY_PATH=/dev/stdout set?)", 1)
    return 0


AWS_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "aws-preflight": cmd_aws_preflight, "aws-history": cmd_aws_history, "aws-plan": cmd_aws_plan,
    "aws-standin": cmd_aws_standin,
}


def add_aws_scenario_arguments(scenario: Any) -> None:
    """``wsfleet scenario``'s options for ``--backend aws``."""
    group = scenario.add_argument_group(
        "against a deployed fleet (--backend aws)",
        "The deployment is named by terraform's outputs; the run touches only the account and region named, "
        "and only resources with the allowlisted tag. Faults are AWS API calls (term: ECS StopTask; kill: a FIS "
        "experiment on the worker's task); the "
        "history is read back from CloudWatch Logs. The cost at most is printed before any load.")
    named = group.add_mutually_exclusive_group()
    named.add_argument("--outputs", type=Path, metavar="FILE", help="a file of `terraform output -json`")
    named.add_argument("--terraform-dir", type=Path, metavar="DIR", help="run `terraform output -json` there")
    group.add_argument("--account", help="the only AWS account id the run may touch (required)")
    group.add_argument("--region", help="the only region the run may touch (required)")
    group.add_argument("--aws-profile", metavar="NAME", help="credentials profile (default: the standard chain)")
    group.add_argument("--tag", metavar="KEY=VALUE", help="the tag every touched resource must carry "
                                                          "(default: wsfleet:chaos=allowed)")
    group.add_argument("--dry-run", action="store_true",
                       help="check the guardrails and print every action with its target and the cost; change "
                            "nothing")
    for name, what in (("upstream-url", "the simulator's WebSocket base URL, as the workers reach it"),
                       ("upstream-control-url", "the simulator's control API, as the harness reaches it"),
                       ("upstream-log-group", "the log group of the simulator's history")):
        group.add_argument(f"--{name}", default="", metavar="URL" if "url" in name else "GROUP",
                           help=f"{what} (default: the outputs' {name.replace('-', '_')})")
    group.add_argument("--role-arn", metavar="ARN", help="the role FIS assumes for a kill step's experiment "
                                                         "(default: the outputs' fis_role_arn)")
    group.add_argument("--stop-alarm", action="append", default=[], metavar="ARN",
                       help="a CloudWatch alarm that stops a kill step's FIS experiment (repeat; a scenario with a "
                            "kill step needs at least one)")
    group.add_argument("--logs-wait", type=float, default=LOGS_WAIT_S, metavar="S",
                       help="seconds to let CloudWatch Logs take the last events before reading them (default 15)")


def _local_only(args: argparse.Namespace) -> list[str]:
    """The local-topology options given with --backend aws: the deployment decides those."""
    given = {"--workers": args.workers is not None, "--profile": args.profile is not None,
             "--timescale": args.timescale is not None, "--dynamodb": args.dynamodb not in (None, "dynalite"),
             "--death-notices": args.death_notices, "--fleet-root": args.fleet_root is not None,
             "--start": args.start, "--set": bool(args.settings), "--repeat": args.repeat != 1}
    return [flag for flag, yes in given.items() if yes]


def aws_only_options(args: argparse.Namespace) -> list[str]:
    """The ``--backend aws`` options given to a local run, which would otherwise be silently unused."""
    given = {"--outputs": args.outputs is not None, "--terraform-dir": args.terraform_dir is not None,
             "--account": bool(args.account), "--region": bool(args.region), "--aws-profile": bool(args.aws_profile),
             "--tag": bool(args.tag), "--dry-run": args.dry_run, "--upstream-url": bool(args.upstream_url),
             "--upstream-control-url": bool(args.upstream_control_url),
             "--upstream-log-group": bool(args.upstream_log_group), "--role-arn": bool(args.role_arn),
             "--stop-alarm": bool(args.stop_alarm), "--logs-wait": args.logs_wait != LOGS_WAIT_S}
    return [flag for flag, yes in given.items() if yes]


def cmd_aws_scenario(args: argparse.Namespace, spec: Any) -> int:
    """``wsfleet scenario NAME --backend aws``: guardrails, the plan and its cost, then the run."""
    import dataclasses
    import time

    from botocore.exceptions import BotoCoreError, ClientError

    from fleet.config import FleetConfig
    from fleet.errors import ConfigError
    from harness.aws.cost import RunLoad, run_ceiling_s
    from harness.aws.deployment import UPSTREAM_OUTPUTS, Guardrails, aws_error_text, preflight
    from harness.aws.fis import FisError, FisOptions, check_options
    from harness.aws.topology import AwsTopology, run_on_aws, running_workers
    from harness.cli_scenario import finish_scenario
    from harness.cluster import ClusterError
    from harness.faults.fault import AWS, FaultError, Runs
    from harness.faults.plane import refusals, where
    from harness.router_client import SigningError, signer_for
    from harness.scenarios.runner import Phases, ScenarioError

    local = _local_only(args)
    if local:
        raise CliError(f"{', '.join(local)}: with --backend aws the deployment decides these "
                       "(terraform's fleet_settings and service)", 2)
    if args.outputs is None and args.terraform_dir is None:
        raise CliError("--backend aws needs the deployment: --outputs FILE or --terraform-dir DIR", 2)
    if not args.account or not args.region:
        raise CliError("--backend aws needs --account and --region: the only account and region the run may "
                       "touch", 2)
    deployment, session = _deployment_and_session(args)
    deployment = dataclasses.replace(deployment, **{name: getattr(args, name) for name in UPSTREAM_OUTPUTS
                                                    if getattr(args, name)})
    try:
        config = FleetConfig.from_env({**deployment.fleet_environment, "WSFLEET_WORKER_ID": "harness"})
    except ConfigError as exc:
        raise CliError(f"the outputs' fleet_environment: {exc}", 2) from None
    if config.profile != "hardened":
        raise CliError(f"the deployment runs {config.profile}: the AWS backend finds a worker's task through "
                       "the workers table, where only hardened registers its workers", 2)
    checks = preflight(deployment, Guardrails(args.account, args.region, _tag(args.tag)), session)
    for check in checks:
        print(f"{'ok  ' if check.ok else 'FAIL'}  {check.name}: {check.detail}", file=sys.stderr)
    if not all(check.ok for check in checks):
        raise CliError(f"{sum(not c.ok for c in checks)} guardrail checks failed: nothing was run", 1)
    try:
        dynamodb = session.client("dynamodb", region_name=deployment.region)
        ecs = session.client("ecs", region_name=deployment.region)
        workers = running_workers(dynamodb, ecs, deployment)
    except (ClientError, BotoCoreError) as exc:
        raise CliError(f"listing the running workers: {aws_error_text(exc)}", 1) from None
    if len(workers) < 2:
        raise CliError(f"{len(workers)} workers are running in {deployment.cluster}: a scenario needs at least 2 "
                       "(someone must take over)", 1)
    seed = spec.seed if args.seed is None else args.seed
    connections = args.connections or spec.connections
    plan = spec.expand(config.profile, seed, config, len(workers))
    fis = None
    if args.stop_alarm:
        fis = FisOptions(args.role_arn or deployment.fis_role_arn, tuple(args.stop_alarm), _tag(args.tag))
        try:
            check_options(fis)
        except FisError as exc:
            raise CliError(str(exc), 2) from None
    refused = refusals([step.kind for step in plan.steps], AWS, {"fis"} if fis is not None else set())
    if refused:
        raise CliError(f"{spec.name} cannot run against a deployment: {'; '.join(refused)}", 1)
    print(f"wsfleet scenario: {spec.name} against {deployment.cluster}/{deployment.service} in {deployment.region}"
          f" ({len(workers)} workers, time scale {config.timescale:g}, seed {seed})")
    print(f"  router {deployment.router_url} (SigV4-signed): START {connections} streams, then "
          f"{len(plan.ops)} operations; STOP them all at the end")
    for step in plan.steps:
        runs = where(step.kind, AWS)
        print(f"  at {step.at_s:7.2f} s  {step.kind} -> {step.target}: "
              f"{runs.how if isinstance(runs, Runs) else runs.why}")
    _print_cost(RunLoad(run_ceiling_s(plan, config), len(workers), connections, args.rate or spec.rate,
                        2 * connections + len(plan.ops), sum(step.kind == "kill" for step in plan.steps), config))
    if args.dry_run:
        print("wsfleet scenario: dry run, nothing was changed", file=sys.stderr)
        return 0
    try:
        signer = signer_for(deployment.router_url, sign=True, region=deployment.region, profile=args.aws_profile)
    except SigningError as exc:
        raise CliError(str(exc), 2) from None
    assert signer is not None
    args.run_dir = run_folder(args.run_dir, args.force, args.run_parent)  # only now: a dry run or a refusal
    started = time.monotonic()                                           # leaves no folder behind
    phases = Phases(spec, config, len(workers), seed, connections,
                    progress=lambda line: print(line, file=sys.stderr, flush=True),
                    prefix=time.strftime("r%Y%m%dT%H%M%S-", time.gmtime()))
    try:
        topology = AwsTopology(deployment, session, args.run_dir, signer, config.lease_s, fis)
        verdict = run_on_aws(topology, phases, args.logs_wait)
    except (ScenarioError, ClusterError, FaultError) as exc:
        raise CliError(str(exc), 2) from None
    except (ClientError, BotoCoreError) as exc:
        raise CliError(f"an AWS call failed: {aws_error_text(exc)}", 2) from None
    finish_scenario(args, verdict, args.run_dir, started)
    return 0 if verdict["valid"] is True else 1
