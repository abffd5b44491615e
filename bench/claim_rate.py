"""How fast one worker comes to own newly started streams: streams owned per second after a burst of STARTs.

Starts the harness's topology (``harness.cluster.Cluster``: embedded backend, Toxiproxy, upstream simulator with
its default new-connection quota, router) with one worker, creates N streams in the simulator (untimed: that
is the test's setup, not the system's), then sends N STARTs through the router from a pool of threads, and
watches the simulator's sessions (``Cluster.streams``) until every stream has an open session.  The curve is
built from the simulator's own ``opened`` time of each stream's first session, counted from the first START.
It does so for the profile under test (default ``hardened``) and then for ``blog`` in the same run.  With
``--preload`` every START is answered before the worker starts, and time counts from its start: the worker's
own claim rate, without the router's pace (on the embedded backend, moto's SQS sends) in it.

The streams emit slowly (``--rate``, default one message a 100 s) so message persistence does not compete with
the claim path for the backend; every stream gets ``max_connections`` room on the one worker.

Usage: ``python bench/claim_rate.py [--n 2000] [--timescale 1] [--threads 16] [--profile hardened]
[--set KEY=VALUE ...] [--fleet-root PATH] [--preload] [--skip-blog]``.  Progress and the curves go to stderr and stdout;
the last line reads ``claim rate: N=2000 hardened owned all in T s (R streams/s); blog T s (R/s); ratio X;
target S s``.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fleet.config import tuning
from harness.backends.resources import client
from harness.cluster import Cluster, ClusterError, ClusterSpec, http_json, send_event
from harness.history import HistoryTail
from harness.run_folders import add_output_arguments, output_folder

QUOTA_PER_S = 500.0  # the simulator's default new-connection quota at scale 1 (API Gateway's)
SLACK_S = 2.0  # the target: N / quota + this


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=2000, help="streams to START (default %(default)s)")
    p.add_argument("--threads", type=int, default=16, help="threads sending STARTs (default %(default)s)")
    p.add_argument("--timescale", type=float, default=1.0, help="time scale (default %(default)s)")
    p.add_argument("--rate", type=float, default=0.01, help="messages a second per stream (default %(default)s)")
    p.add_argument("--profile", default="hardened", help="profile under test (default %(default)s)")
    p.add_argument("--set", action="append", default=[], dest="settings", metavar="KEY=VALUE",
                   help="a fleet setting for the worker and router (repeatable), as `wsfleet up --set`")
    p.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds per profile")
    p.add_argument("--fleet-root", type=Path, default=None,
                   help="run the worker and router from this checkout (e.g. the main branch, for a before figure)")
    p.add_argument("--preload", action="store_true",
                   help="send every START before the worker starts, and time from its start: the worker's own claim "
                   "rate over a queue and an index already full (the router's pace left out)")
    p.add_argument("--skip-blog", action="store_true", help="measure only --profile")
    add_output_arguments(p, "runs/bench-claim-rate", "the run directories (OUT/<profile>)")
    return p.parse_args(argv)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def first_opened(streams: dict[str, Any]) -> dict[str, float]:
    """Each stream's first session's opening time (Unix ms), for streams that have one open now or had one."""
    found: dict[str, float] = {}
    for sid, stream in streams.items():
        opened = [s["opened"] for s in stream.get("sessions", [])]
        if opened:
            found[sid] = min(opened)
    return found


def open_now(streams: dict[str, Any]) -> int:
    return sum(1 for s in streams.values() if any(x["closed"] is None for x in s.get("sessions", [])))


def acquire_paths(run_dir: Path) -> Counter[str]:
    """Accepted acquires by path (``via``: notify, handoff, reconcile, ...) from the workers' histories."""
    paths: Counter[str] = Counter()
    for event in HistoryTail(run_dir, "worker-*.jsonl", {"lease.acquire"}).new_events():
        if event.get("outcome") == "ok":
            paths[str(event.get("via"))] += 1
    return paths


def measure(profile: str, args: argparse.Namespace) -> dict[str, Any]:
    run_dir = args.out / profile
    overrides = {"max_connections": args.n + 100, **tuning({}, args.settings)}
    spec = ClusterSpec(workers=0 if args.preload else 1, profile=profile, timescale=args.timescale,
                       run_dir=run_dir, rate=args.rate, overrides=overrides, fleet_root=args.fleet_root)
    ids = [f"c{i:05d}" for i in range(args.n)]
    with Cluster(spec) as cluster:
        control, upstream = cluster.upstream_control_url, cluster.upstream_url
        with ThreadPoolExecutor(args.threads) as pool:
            list(pool.map(lambda c: http_json("POST", f"{control}/streams/{c}"), ids))
        progress(f"{profile}: {args.n} streams created in the simulator; sending STARTs from {args.threads} threads")
        refused: Counter[str] = Counter()
        answered: list[float] = []
        lock = threading.Lock()

        def start(cid: str) -> None:
            refusal = None
            try:  # as harness.cluster.start_connection does, a 503 repeated a few times
                send_event(cluster.router_url, "START", cid, f"{upstream}/streams/{cid}")
            except ClusterError as exc:
                refusal = str(exc).removeprefix(f"START {cid} ")
            with lock:
                answered.append(time.time())
                if refusal is not None:
                    refused[refusal] += 1

        assert cluster.backend is not None
        sqs, queue_url = client(cluster.backend.env(), "sqs"), cluster.backend.queue_url
        timeline: list[str] = []
        t_starts = t0 = time.time()
        with ThreadPoolExecutor(args.threads) as sender:
            sent = sender.map(start, ids)
            if args.preload:  # every START in before the worker starts: it finds them all queued and listed
                list(sent)
                progress(f"{profile}: {len(answered)} STARTs answered in {time.time() - t_starts:.1f} s; "
                         "starting the worker")
                t0 = time.time()
                cluster.add_worker("worker-1", wait=False)
            deadline = time.monotonic() + args.timeout
            owned = 0
            while time.monotonic() < deadline:
                time.sleep(0.5)
                streams = cluster.streams()
                owned = open_now(streams)
                queued = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=[
                    "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
                timeline.append(f"  {time.time() - t0:6.1f} s: {len(answered):5d} STARTs answered, {owned:5d} of "
                                f"{args.n} streams with an open session, queue: "
                                f"{queued['ApproximateNumberOfMessages']} visible, "
                                f"{queued['ApproximateNumberOfMessagesNotVisible']} in flight")
                progress(timeline[-1])
                if owned >= args.n:
                    break
            list(sent)  # every START answered
        streams = cluster.streams()
    opened = first_opened({k: v for k, v in streams.items() if k in set(ids)})
    times = sorted((ms / 1000.0 - t0) for ms in opened.values())
    done_s = times[-1] if len(times) >= args.n else None
    return {"profile": profile, "times": times, "done_s": done_s, "owned": owned, "refused": dict(refused),
            "starts_s": max(answered) - t_starts, "paths": dict(acquire_paths(run_dir)), "timeline": timeline}


def curve(result: dict[str, Any], n: int, step_s: float = 0.5) -> list[str]:
    times: list[float] = result["times"]
    if not times:
        return ["  (no stream was owned)"]
    rows, t, i, previous = [], step_s, 0, 0
    end = times[-1] + step_s
    while t <= end:
        while i < len(times) and times[i] <= t:
            i += 1
        rows.append(f"  {t:6.1f} s {i:6d} owned {100.0 * i / n:5.1f} %  +{(i - previous) / step_s:7.1f}/s")
        previous = i
        t += step_s
    return rows


def summary(result: dict[str, Any], n: int) -> str:
    if result["done_s"] is None:
        return f"{result['profile']} owned {len(result['times'])} of {n} (not all)"
    return f"{result['profile']} owned all in {result['done_s']:.1f} s ({n / result['done_s']:.0f} streams/s)"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out = output_folder(args, "claim_rate")
    results = [measure(args.profile, args)]
    if not args.skip_blog and args.profile != "blog":
        results.append(measure("blog", args))
    for r in results:
        print(f"{r['profile']}: STARTs all answered after {r['starts_s']:.1f} s (refused: {r['refused'] or 'none'}); "
              f"acquires by path: {r['paths']}")
        print("\n".join(r["timeline"][::max(1, len(r["timeline"]) // 40)]))
        print(f"{r['profile']}: streams owned (first session opened at the simulator), from the first START "
              "(--preload: from the worker's start):")
        print("\n".join(curve(r, args.n)))
    target = args.n / QUOTA_PER_S + SLACK_S
    line = f"claim rate: N={args.n} scale={args.timescale:g} " + "; ".join(summary(r, args.n) for r in results)
    if len(results) == 2 and all(r["done_s"] for r in results):
        line += f"; ratio {results[1]['done_s'] / results[0]['done_s']:.1f}x faster than blog"
    print(f"{line}; target {target:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
