"""The ``wsfleet`` subcommands for a fleet deployed on AWS (``terraform/``), named by terraform's outputs:
``aws-preflight`` (its guardrails, checked before a run may touch it, changing nothing) and ``aws-history``
(its history, read back from CloudWatch Logs into a run folder).  boto3 is imported only when one runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.cli_errors import CliError


def _instant(text: str) -> int:
    """An ISO 8601 time (UTC unless it says otherwise) as Unix ms."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r} (e.g. 2026-12-01T17:00:00Z)") from None
    return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp() * 1000)


def _deployment_options(parser: argparse.ArgumentParser) -> None:
    named = parser.add_mutually_exclusive_group(required=True)
    named.add_argument("--outputs", type=Path, metavar="FILE", help="a file of `terraform output -json`")
    named.add_argument("--terraform-dir", type=Path, metavar="DIR", help="run `terraform output -json` there")
    parser.add_argument("--aws-profile", metavar="NAME", help="credentials profile (default: the standard chain)")


def add_aws_commands(sub: Any) -> None:
    preflight = sub.add_parser(
        "aws-preflight", help="check a deployed fleet's guardrails before a run may touch it",
        description="Read the deployment from terraform's outputs and check, changing nothing: the outputs' "
                    "region and the credentials' account are the ones named here, and every resource a run "
                    "may touch (tables, queue, ECS cluster and service) carries the allowlisted tag. "
                    "Exit 0: all pass; 1: a check failed; 2: the outputs could not be read.")
    _deployment_options(preflight)
    preflight.add_argument("--account", required=True, help="the only AWS account id a run may touch")
    preflight.add_argument("--region", required=True, help="the only region a run may touch")
    preflight.add_argument("--tag", metavar="KEY=VALUE",
                           help="the tag every touched resource must carry (default: wsfleet:chaos=allowed, "
                                "which terraform adds with chaos_target = true)")

    history = sub.add_parser(
        "aws-history", help="read a deployed fleet's history back from CloudWatch Logs",
        description="Write the history events the deployment's workers and router logged between two times "
                    "(set WSFLEET_HISTORY_PATH=/dev/stdout in terraform's fleet_settings) to RUN_DIR/history, "
                    "one file per process, for the checkers and `wsfleet report`.")
    _deployment_options(history)
    history.add_argument("--since", type=_instant, required=True, metavar="TIME",
                         help="ISO 8601, UTC unless it says otherwise (e.g. 2026-12-01T17:00:00Z)")
    history.add_argument("--until", type=_instant, required=True, metavar="TIME", help="ISO 8601, as --since")
    history.add_argument("--run-dir", type=Path, required=True, metavar="DIR", help="where history/ goes")


def _deployment_and_session(args: argparse.Namespace) -> tuple[Any, Any]:
    import boto3
    from botocore.exceptions import BotoCoreError

    from harness.backends.aws import DeploymentError, read_outputs

    try:
        return read_outputs(args.outputs, args.terraform_dir), boto3.Session(profile_name=args.aws_profile)
    except (DeploymentError, BotoCoreError) as exc:  # BotoCoreError: e.g. a profile that does not exist
        raise CliError(str(exc), 2) from None


def cmd_aws_preflight(args: argparse.Namespace) -> int:
    from harness.backends.aws import CHAOS_TAG, Guardrails, preflight

    key, value = str(args.tag).partition("=")[::2] if args.tag else CHAOS_TAG
    if not key or not value:
        raise CliError(f"--tag must be KEY=VALUE, not {args.tag!r}", 2)
    deployment, session = _deployment_and_session(args)
    checks = preflight(deployment, Guardrails(args.account, args.region, (key, value)), session)
    for check in checks:
        print(f"{'ok  ' if check.ok else 'FAIL'}  {check.name}: {check.detail}")
    failed = [check.name for check in checks if not check.ok]
    if failed:
        raise CliError(f"{len(failed)} of {len(checks)} checks failed ({', '.join(failed)}): nothing may run", 1)
    print(f"wsfleet aws-preflight: all {len(checks)} checks passed", file=sys.stderr)
    return 0


def cmd_aws_history(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from harness.backends.aws import aws_error_text
    from harness.backends.aws_logs import fetch_history

    if args.until <= args.since:
        raise CliError("--until must be later than --since", 2)
    deployment, session = _deployment_and_session(args)
    logs = session.client("logs", region_name=deployment.region)
    groups = (deployment.worker_log_group, deployment.router_log_group)
    try:
        fetched = fetch_history(logs, groups, args.since, args.until, args.run_dir)
    except (ClientError, BotoCoreError) as exc:
        raise CliError(f"reading {', '.join(groups)}: {aws_error_text(exc)}", 1) from None
    for src, count in fetched.events.items():
        print(f"{src}: {count} events")
    print(f"wsfleet aws-history: {sum(fetched.events.values())} events from {len(fetched.events)} processes "
          f"({fetched.other_lines} other log lines) in {args.run_dir / 'history'}", file=sys.stderr)
    if not fetched.events:
        raise CliError("no history events in that window (is WSFLEET_HISTORY_PATH=/dev/stdout set?)", 1)
    return 0


AWS_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "aws-preflight": cmd_aws_preflight, "aws-history": cmd_aws_history,
}
