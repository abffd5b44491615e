"""DynamoDB coordination requests per connection-hour, ``blog`` against ``hardened``, same settings.

Coordination is every DynamoDB request but message persistence (renewals, acquires, reads, reconcile
queries, checkpoints), counted by the workers' own store adapter (``AwsClients.requests``), which writes
its counters into the history with every heartbeat.  Both profiles run the same topology, lease and
heartbeat; after a warm-up the counters are read over a steady window and converted to requests per
connection per hour at time scale 1 (a run at scale S does an hour's work in S hours).

Usage: ``python bench/coordination_cost.py [--workers 2] [--connections 100] [--window 20] [--timescale 0.1]``.
The last line reads ``coordination requests per connection-hour: blog X, hardened Y, ratio Z``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness.cluster import Cluster, ClusterSpec
from harness.history import HistoryTail
from harness.run_folders import add_output_arguments, output_folder


def counters_at(run_dir: Path, t_ms: float) -> dict[str, int]:
    """Each worker's cumulative coordination count at the last ``requests`` event before ``t_ms``."""
    found: dict[str, int] = {}
    for event in HistoryTail(run_dir, "worker-*.jsonl", {"requests"}).new_events():
        if event["t"] <= t_ms:
            found[event["worker"]] = int(event.get("coordination", 0))
    return found


def measure(profile: str, args: argparse.Namespace) -> float:
    run_dir = args.out / profile
    spec = ClusterSpec(workers=args.workers, profile=profile, timescale=args.timescale, run_dir=run_dir,
                       rate=args.rate)
    with Cluster(spec) as cluster:
        for i in range(args.connections):
            cluster.start_connection(f"b{i:04d}")
        warmup = 2 * cluster.config.lease_s + cluster.config.reconcile_s
        print(f"{profile}: {args.connections} connections on {args.workers} workers; warm-up {warmup:.1f} s, "
              f"window {args.window:.0f} s", file=sys.stderr, flush=True)
        time.sleep(warmup)
        t1 = time.time() * 1000
        time.sleep(args.window)
        t2 = time.time() * 1000
        time.sleep(2 * cluster.config.heartbeat_s)
    before, after = counters_at(run_dir, t1), counters_at(run_dir, t2)
    requests = sum(after.values()) - sum(before.get(w, 0) for w in after)
    real_hours = (t2 - t1) / 3_600_000
    per_conn_hour = requests / args.connections / real_hours * args.timescale
    print(f"{profile}: {requests} coordination requests in {(t2 - t1) / 1000:.1f} s -> "
          f"{per_conn_hour:.1f} per connection-hour at scale 1", file=sys.stderr, flush=True)
    return per_conn_hour


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--connections", type=int, default=100, help="streams (default 100)")
    parser.add_argument("--window", type=float, default=20.0, help="measured steady window in s (default 20)")
    parser.add_argument("--timescale", type=float, default=0.1, help="time scale (default 0.1)")
    parser.add_argument("--rate", type=float, default=1.0, help="messages/s per stream (default 1)")
    add_output_arguments(parser, "runs/bench-coordination", "the run directories (OUT/<profile>)")
    args = parser.parse_args()
    args.out = output_folder(args, "coordination_cost")
    blog = measure("blog", args)
    hardened = measure("hardened", args)
    print(f"coordination requests per connection-hour: blog {blog:.1f}, hardened {hardened:.1f}, "
          f"ratio {blog / hardened:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
