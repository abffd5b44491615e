"""``wsfleet region``: the region failover scenario (``harness.region.failover``) over its variants, with one
report.  Exit 0: the gated variant held (no split brain, nothing lost, RTO within the bound); 1: it did not,
or a step did not happen in time; 2: bad input or a backend that would not start."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.cli_args import absolute_path, positive_int, run_folder, timescale_arg
from harness.cli_errors import CliError

DEFAULT_VARIANTS = "gate,no-gate,blog,dynamodb"
BATCH_SETTINGS = "batch-settings.json"


def _variants(text: str) -> list[str]:
    from harness.region.failover import VARIANTS

    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in VARIANTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown variant(s) {', '.join(unknown) or '(none given)'}; "
                                         f"known: {', '.join(VARIANTS)}")
    return names


def add_region_command(sub: Any) -> None:
    region = sub.add_parser(
        "region", help="standby region: split brain under a replication pause, RTO/RPO of a region outage",
        description="Two regions (each its own embedded backend and warm fleet), Global Tables between them, "
                    "Route 53 failover and the region activation gate. Each variant STARTs streams in the "
                    "primary, pauses replication for 3 leases plus a reconcile (split brain: a stream both "
                    "regions consumed at once), and, with the gate, cuts the primary off (or only its DynamoDB) "
                    "and measures the standby's takeover phase by phase (RTO), the writes left behind (RPO) "
                    "and the sequences lost. Writes RUN_DIR/report.html and report.md, and each variant's region.json. "
                    "Exit 0: the gated variant held; 1: it did not; 2: bad input.")
    region.add_argument("--variants", type=_variants, default=DEFAULT_VARIANTS,
                        help=f"comma-separated: gate (hardened with the gate: the primary cut off), no-gate "
                             f"(hardened without it), blog (the published design), dynamodb (with the gate: only "
                             f"the primary's DynamoDB out), slow-replication (unsafe: lag 20 s), no-wait (unsafe: "
                             f"the gate without the activation or replication wait), rto (the gated "
                             f"outage and failback without the pause first: with --timescale 1, the RTO at the "
                             f"timings terraform deploys, about 4-5 minutes); default {DEFAULT_VARIANTS}")
    region.add_argument("--timescale", type=timescale_arg, default=0.1,
                        help="time scale (default 0.1: health checks every 1 s, TTL 3 s; 1 for the real timings)")
    region.add_argument("--streams", type=positive_int, default=6, help="streams to START (default 6)")
    region.add_argument("--workers", type=positive_int, default=2, help="workers per region (default 2)")
    region.add_argument("--run-dir", type=absolute_path,
                        help="output folder; it must be new or empty (default: a new folder runs/region/<time>, "
                             "linked as runs/region/latest)")
    region.add_argument("--force", action="store_true", help="empty a --run-dir that holds something, then use it")
    add_region_batch_command(sub)


def cmd_region(args: argparse.Namespace) -> int:
    from harness.backends.base import BackendError
    from harness.cluster import ClusterError
    from harness.processes import ProcessError
    from harness.region.failover import VARIANTS, FailoverError, FailoverSetup, run_region_failover
    from harness.report.region import gated_holds, rto_text, write_region_report

    run_dir = run_folder(args.run_dir, args.force, "runs/region")
    results = []
    for name in args.variants:
        setup = FailoverSetup(VARIANTS[name], run_dir / name, timescale=args.timescale, streams=args.streams,
                              workers=args.workers)
        try:
            setup.run_dir.mkdir(parents=True, exist_ok=True)
            results.append(run_region_failover(setup, progress=lambda line: print(line, flush=True)))
        except FailoverError as exc:
            raise CliError(f"{name}: {exc}; run folder {setup.run_dir}", 1) from None
        except (ClusterError, BackendError, ProcessError, OSError) as exc:
            raise CliError(f"{name}: {exc}", 2) from None
    report = write_region_report(results, run_dir)
    for result in results:
        outage = result["outage"]
        if outage is None:
            rto = ""
        else:
            back = outage.get("failback")
            rto = (f"; RTO {rto_text(outage)}, {outage['redelivered']} re-delivered, "
                   f"{outage['lost']} lost" + ("" if not back else
                                              f"; failback {back['rto_s']:.2f} s, {back['split_brain']} in both"))
        print(f"wsfleet region: {result['variant']}: {result['split_brain']['streams']} of {result['streams']} "
              f"streams consumed in both regions{rto}; {result['conflicts']} conflicts resolved", flush=True)
    print(f"wsfleet region: report {report}", file=sys.stderr)
    gated = [r for r in results if r["gate"]]
    return 0 if all(gated_holds(r) for r in gated) else 1


def add_region_batch_command(sub: Any) -> None:
    batch = sub.add_parser(
        "region-batch", help="generated region fault schedules, run per variant, with a summary",
        description="COUNT region fault schedules generated from SEED (replication pause, region cut, the "
                    "primary's DynamoDB out, gray failure, flapping health checks, clock skew between the "
                    "regions, worker pauses, STARTs during the fault), each run on two regions per variant and "
                    "judged from its history and tables: split brain, lost messages, lost control writes, "
                    "activation findings. The regions' backends, Global Tables, routing controls and simulator "
                    "stay up across the batch; each run gets fresh tables and its own fleets. Writes "
                    "RUN_DIR/batch.json (every run, and per variant the summary with the fault kinds and "
                    "transitions reached). Given a RUN_DIR of an earlier batch, runs only the schedules not "
                    "judged there. Exit 0: the gated variants had none of them; 1: one did, or a run could not "
                    "be judged; 2: bad input.")
    batch.add_argument("--count", type=positive_int, required=True, help="schedules to generate and run")
    batch.add_argument("--seed", type=int, default=0, help="the first schedule's seed (default 0)")
    batch.add_argument("--variants", type=_variants, default="gate,no-gate",
                       help="comma-separated variants (default gate,no-gate; slow-replication: the unsafe lag; "
                            "no-wait: the gate without the activation or replication wait, unsafe)")
    batch.add_argument("--timescale", type=timescale_arg, default=0.1, help="time scale (default 0.1)")
    batch.add_argument("--streams", type=positive_int, default=4, help="streams to START (default 4)")
    batch.add_argument("--run-dir", type=absolute_path,
                       help="output folder: new or empty, or an earlier batch's (resumed: what it judged is not "
                            "run again); default: a new folder under runs/region-batch")
    batch.add_argument("--force", action="store_true", help="empty a --run-dir that holds something, then use it")


def _batch_folder(args: argparse.Namespace) -> Path:
    """The batch's folder: an earlier batch's to resume (its time scale and streams must be these), or a new
    one; its settings are written there."""
    import json

    settings = {"timescale": args.timescale, "streams": args.streams}
    given = args.run_dir / BATCH_SETTINGS if args.run_dir is not None and not args.force else None
    if given is not None and given.is_file():
        earlier = json.loads(given.read_text(encoding="utf-8"))
        if earlier != settings:
            raise CliError(f"{args.run_dir} holds a batch run with {earlier}, not {settings}: give those or "
                           f"another folder", 2)
        return Path(args.run_dir)
    run_dir = run_folder(args.run_dir, args.force, "runs/region-batch")
    (run_dir / BATCH_SETTINGS).write_text(json.dumps(settings) + "\n", encoding="utf-8")
    return run_dir


def cmd_region_batch(args: argparse.Namespace) -> int:
    import json

    from harness.region.batch import run_batch
    from harness.region.failover import VARIANTS
    from harness.region.schedules import generate, summary

    run_dir = _batch_folder(args)
    results = run_batch(generate(args.seed, args.count), [VARIANTS[name] for name in args.variants], run_dir,
                        args.timescale, args.streams, say=lambda line: print(f"wsfleet region-batch: {line}",
                                                                             flush=True))
    totals = summary(results)
    (run_dir / "batch.json").write_text(json.dumps({"runs": results, "summary": totals}, indent=2) + "\n",
                                        encoding="utf-8")
    for name, total in totals.items():
        print(f"wsfleet region-batch: {name}: {json.dumps(total)}", flush=True)
    gated = [total for name, total in totals.items() if VARIANTS[name].gate]
    bad = any(t["split_brain_runs"] or t["lost_messages"] or t["activation_findings"] or t["unjudged"]
              or t["control_beyond_lag"] or t["control_reverted_at_end"] for t in gated)
    return 1 if bad else 0


REGION_COMMANDS = {"region": cmd_region, "region-batch": cmd_region_batch}
