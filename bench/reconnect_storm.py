"""Reconnect storms (issue 11): how fast N orphaned streams get a live upstream session again, through the
simulated gateway's new-connection quota, under each reconnect policy.

For each policy of ``--policies`` (one fleet each, same seed) it starts the harness's topology
(``harness.cluster.Cluster``: embedded backend, Toxiproxy, upstream simulator with its handshake quota,
router, workers), creates N streams in the simulator and STARTs them through the router, and waits until
every one has a live session: that setup is not timed.  Then it triggers the storm:

- ``--trigger kill``: the setup runs with only the ``--kill K`` victim workers, so they hold every stream;
  the survivors (``--workers`` minus K) join afterwards (with ``balance_band=0`` unless ``--set`` says
  otherwise, so no stream moves to them before the kill) and the victims are SIGKILLed.  Their streams are
  orphaned and must be re-acquired by the survivors: when the victims' worker leases lapse (the lease path),
  or at once on a death notice with ``--death-notices`` (each worker runs as a task of the embedded backend's
  ECS, whose exit sends the ``ECS Task State Change`` event; ``ClusterSpec.death_notices``).  The path taken
  is read from the survivors' history (``death.notice`` events, ``lease.acquire`` ``via``).
- ``--trigger disconnect``: the simulator drops every live session (``POST /disconnect``, reason
  ``server_reset``); every stream reconnects through the quota.

Everything is measured from the records, not from the bench's polling: per stream, the time from the trigger
to the opening of its next session (the simulator's session records; the orphaned session's own close is
reported beside it); per stream, the handshakes refused with 429 after the trigger (the workers' ``ws.close``
events whose reason is the upstream's HTTP 429; the simulator counts rejections only per window, and its
total is shown beside the workers' for a cross-check); the accepted and rejected handshakes of each window
(the simulator's ``handshakes`` events, one per second at scale 1) and the peak accepted a second against
the quota.  The bound is lease + 3 s for ``kill`` and N / quota + 3 s for ``disconnect``, both at the time
scale.

Usage: ``python bench/reconnect_storm.py [--trigger kill|disconnect] [--n 1000] [--policies full,none]
[--workers W] [--kill K] [--timescale 1] [--rate 0.01] [--quota 500] [--death-notices] [--set KEY=VALUE ...]
[--out DIR [--force]]``.  Progress goes to stderr; the per-policy figures to stdout, and its
last line reads ``reconnect storm: N=1000 trigger=kill scale=1 full: all recovered, p99 X s, max Y s (bound
Z s), max 429s/stream A; none: ...``.  The figures go to ``OUT/reconnect-storm-<trigger>-n<N>.json`` too.
If the fleet cannot consume or recover every stream in time, the setup and the storm each stop at their
timeout, say so, and report how many were consumed and recovered.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fleet.backoff import POLICIES
from fleet.config import tuning
from fleet.errors import ConfigError
from harness.cluster import Cluster, ClusterError, ClusterSpec, http_json
from harness.history import HistoryTail
from harness.run_folders import add_output_arguments, output_folder

SLACK_S = 3.0  # the bounds: lease + this, N / quota + this (seconds at scale 1)
MAX_REJECTIONS = 2  # the acceptance: no stream rejected more than twice
THROTTLED = "HTTP 429"  # how the worker's ws.close reason names a handshake the quota refused


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python bench/reconnect_storm.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--trigger", choices=("kill", "disconnect"), default="kill",
                   help="kill: SIGKILL the K workers holding every stream, the survivors re-acquire them; "
                   "disconnect: the simulator drops every live session at once (default %(default)s)")
    p.add_argument("--n", type=int, default=1000,
                   help="streams started, then orphaned by the trigger (default %(default)s)")
    p.add_argument("--policies", default="full,none",
                   help="reconnect policies to measure, comma-separated, one fleet each with the same seed "
                   f"({', '.join(POLICIES)}; default %(default)s)")
    p.add_argument("--workers", type=int, default=None,
                   help="workers in all (kill: victims + survivors, default K + 1 so one survivor takes every "
                   "orphan; disconnect: default 2, each pacing its handshakes at its own handshake_rate)")
    p.add_argument("--kill", type=int, default=1, metavar="K",
                   help="kill: workers SIGKILLed; they hold all the streams between them (default %(default)s)")
    p.add_argument("--death-notices", action="store_true",
                   help="kill: run each worker as a local ECS task whose exit sends a death notice, so survivors "
                   "take the streams at once instead of at lease expiry (default: off, the lease path)")
    p.add_argument("--timescale", type=float, default=1.0,
                   help="time scale of the fleet and the simulator (default %(default)s)")
    p.add_argument("--rate", type=float, default=0.01,
                   help="messages a second per stream, low so that persistence does not compete with the claims "
                   "(default %(default)s)")
    p.add_argument("--quota", type=float, default=500.0,
                   help="the simulator's new-connection quota, handshakes a second at scale 1, its bucket holding "
                   "one second's worth (default %(default)s); each worker paces its own handshakes at "
                   "--set handshake_rate (default 500)")
    p.add_argument("--max-connections", type=int, default=None,
                   help="max_connections of every worker (default N + 100: room for one worker to hold all)")
    p.add_argument("--profile", default="hardened", help="fleet profile (default %(default)s)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the topology, the same for every policy (default %(default)s)")
    p.add_argument("--set", action="append", default=[], dest="settings", metavar="KEY=VALUE",
                   help="a fleet setting for the workers and router (repeatable), as `wsfleet up --set`; "
                   "reconnect_policy is --policies' (kill sets balance_band=0 unless given here)")
    p.add_argument("--threads", type=int, default=16, help="threads sending the STARTs (default %(default)s)")
    p.add_argument("--setup-timeout", type=float, default=600.0,
                   help="seconds for the setup (the STARTs and every stream consumed) before the trigger; past it "
                   "the storm goes on over the streams consumed by then (default %(default)s)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds to wait for recovery after the trigger; past it the figures are those of the "
                   "streams recovered by then (default: 4 x the bound, at least 60)")
    add_output_arguments(p, "runs/bench-reconnect-storm", "the run directories and the JSON result")
    args = p.parse_args(argv)
    args.policy_list = [x.strip() for x in args.policies.split(",") if x.strip()]
    unknown = [x for x in args.policy_list if x not in POLICIES]
    if not args.policy_list or unknown:
        p.error(f"--policies: expected some of {', '.join(POLICIES)}, got {args.policies!r}")
    if args.n < 1 or args.quota <= 0 or args.timescale <= 0 or args.rate <= 0 or args.kill < 1:
        p.error("--n, --quota, --timescale, --rate and --kill must be positive")
    if args.workers is None:
        args.workers = args.kill + 1 if args.trigger == "kill" else 2
    if args.trigger == "kill" and args.workers <= args.kill:
        p.error(f"--trigger kill needs a survivor: --workers ({args.workers}) must exceed --kill ({args.kill})")
    if args.workers < 1:
        p.error("--workers must be at least 1")
    if args.death_notices and args.trigger != "kill":
        p.error("--death-notices applies to --trigger kill")
    try:
        args.overrides = tuning({}, args.settings)
    except ConfigError as exc:
        p.error(str(exc))
    if "reconnect_policy" in args.overrides:
        p.error("--set reconnect_policy: the policies are --policies'")
    return args


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the records ---------------------------------------------------------------------------------------------
def stream_id(pk: str) -> str:
    return pk.removeprefix("CONN#")


def live_sessions(streams: dict[str, Any], ids: list[str]) -> dict[str, dict[str, Any]]:
    """Each of ``ids``' live session (the newest if several), by stream id."""
    live: dict[str, dict[str, Any]] = {}
    for sid in ids:
        open_now = [s for s in streams.get(sid, {}).get("sessions", []) if s.get("closed") is None]
        if open_now:
            live[sid] = max(open_now, key=lambda s: s["opened"])
    return live


def recoveries(streams: dict[str, Any], orphans: dict[str, dict[str, Any]], trigger_ms: float) -> dict[str, Any]:
    """Per orphaned stream: seconds from the trigger to the opening of its next session (None: none yet), and
    from the trigger to the orphaned session's close in the simulator's record."""
    recovered: dict[str, float | None] = {}
    close_lag: dict[str, float | None] = {}
    for sid, orphan in orphans.items():
        sessions = streams.get(sid, {}).get("sessions", [])
        old = next((s for s in sessions if s.get("session") == orphan.get("session")), orphan)
        close_lag[sid] = None if old.get("closed") is None else (old["closed"] - trigger_ms) / 1000.0
        later = [s["opened"] for s in sessions
                 if s.get("session") != orphan.get("session") and s["opened"] >= trigger_ms]
        recovered[sid] = (min(later) - trigger_ms) / 1000.0 if later else None
    return {"recovered": recovered, "close_lag": close_lag}


def rejections(worker_events: list[dict[str, Any]], trigger_ms: float, end_ms: float = math.inf) -> Counter[str]:
    """Handshakes refused with 429 from the trigger to the end of the measurement, per stream, from the
    workers' ``ws.close`` events."""
    per_stream: Counter[str] = Counter()
    for e in worker_events:
        if (e.get("type") == "ws.close" and trigger_ms <= e["t"] <= end_ms
                and THROTTLED in str(e.get("reason", ""))):
            per_stream[stream_id(str(e.get("pk", "")))] += 1
    return per_stream


def storm_windows(upstream_events: list[dict[str, Any]], trigger_ms: float, timescale: float,
                  end_ms: float = math.inf) -> list[dict[str, Any]]:
    """The simulator's ``handshakes`` windows from the one holding the trigger to the one holding the end of
    the measurement (not the fleet's own shutdown, whose handoffs open sessions too), each with its counts per
    second at scale 1 and its start in seconds from the trigger."""
    rows = []
    for e in sorted((e for e in upstream_events if e.get("type") == "handshakes"), key=lambda e: e["window_start"]):
        if e["window_start"] + e["window_ms"] <= trigger_ms or e["window_start"] > end_ms:
            continue
        per_s = 1000.0 * timescale / e["window_ms"]  # a window's counts as handshakes a second at scale 1
        rows.append({"from_s": (e["window_start"] - trigger_ms) / 1000.0, "attempted": e["attempted"],
                     "accepted": e["accepted"], "rejected": e["rejected"], "accepted_per_s": e["accepted"] * per_s})
    return rows


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100.0 * len(ordered)) - 1)]


# -- one fleet, one policy -----------------------------------------------------------------------------------
def bound_s(args: argparse.Namespace, cluster: Cluster, orphans: int) -> float:
    if args.trigger == "kill":
        return cluster.config.lease_s + SLACK_S * args.timescale
    return (orphans / args.quota + SLACK_S) * args.timescale


def wait_consumed(cluster: Cluster, ids: list[str], timeout_s: float, began: float) -> int:
    """Wait until the simulator has a live session for every stream (or the timeout); how many it has."""
    control = cluster.upstream_control_url
    deadline = time.monotonic() + timeout_s
    live, shown = 0, 0.0
    while True:
        live = int(http_json("GET", f"{control}/stats")[1]["live_sessions"])
        if live >= len(ids) and len(live_sessions(cluster.streams(), ids)) >= len(ids):
            return len(ids)
        if time.monotonic() >= deadline:
            break
        if time.monotonic() - shown >= 5.0:
            progress(f"  setup {time.monotonic() - began:6.1f} s: {live} of {len(ids)} streams live")
            shown = time.monotonic()
        time.sleep(1.0)
    consumed = len(live_sessions(cluster.streams(), ids))
    progress(f"  SETUP TIMED OUT (--setup-timeout): {consumed} of {len(ids)} streams consumed; the storm goes on "
             "over those")
    return consumed


def measure(policy: str, args: argparse.Namespace) -> dict[str, Any]:
    run_dir = args.out / f"{args.trigger}-n{args.n}" / policy
    overrides: dict[str, Any] = {"max_connections": args.max_connections or args.n + 100}
    if args.trigger == "kill":
        overrides["balance_band"] = 0  # survivors join after the setup: nothing moves to them before the kill
    overrides.update(args.overrides)
    overrides["reconnect_policy"] = policy
    victims = [f"worker-{i}" for i in range(1, args.kill + 1)] if args.trigger == "kill" else []
    spec = ClusterSpec(workers=args.kill if args.trigger == "kill" else args.workers, profile=args.profile,
                       timescale=args.timescale, run_dir=run_dir, rate=args.rate, overrides=overrides,
                       upstream={"handshake_quota": args.quota}, seed=args.seed, death_notices=args.death_notices)
    ids = [f"c{i:05d}" for i in range(args.n)]
    result: dict[str, Any] = {"policy": policy, "run_dir": str(run_dir)}
    began = time.monotonic()
    with Cluster(spec) as cluster:
        config = cluster.config
        result["config"] = {"lease_s": config.lease_s, "heartbeat_s": config.heartbeat_s,
                            "handshake_rate": config.handshake_rate, "reconnect_base_s":
                            config.scaled_s(config.reconnect_base_ms), "reconnect_cap_s":
                            config.scaled_s(config.reconnect_max_ms), "balance_band": config.balance_band,
                            "max_connections": config.max_connections, "death_notices": args.death_notices}
        progress(f"{policy}: fleet up in {time.monotonic() - began:.1f} s ({len(cluster.workers)} workers); "
                 f"STARTing {args.n} streams from {args.threads} threads")
        setup_deadline = time.monotonic() + args.setup_timeout

        def start(cid: str) -> bool:
            if time.monotonic() > setup_deadline:
                return False  # the setup's time is up: this stream is left out of the storm
            cluster.start_connection(cid)
            return True

        with ThreadPoolExecutor(args.threads) as pool:
            ids = [cid for cid, sent in zip(ids, list(pool.map(start, ids)), strict=True) if sent]
        if len(ids) < args.n:
            progress(f"  SETUP TIMED OUT after {args.setup_timeout:.0f} s while STARTing: {len(ids)} of {args.n} "
                     "STARTs sent; the storm goes on over the streams consumed")
        progress(f"  setup {time.monotonic() - began:6.1f} s: {len(ids)} STARTs accepted")
        consumed = wait_consumed(cluster, ids, max(0.0, setup_deadline - time.monotonic()), began)
        if args.trigger == "kill":
            for i in range(args.kill + 1, args.workers + 1):
                cluster.add_worker(f"worker-{i}", wait=True)
            time.sleep(config.heartbeat_s)  # the survivors have renewed and looked at the fleet once
        # a quiet spell: the last setup handshakes' window closes before the trigger's, and the quota's bucket is
        # full again when the storm begins
        time.sleep(max(1.0, 2.0 * args.timescale))
        setup_s = time.monotonic() - began
        control = cluster.upstream_control_url
        before = cluster.streams()
        held = live_sessions(before, ids)
        orphans = {sid: s for sid, s in held.items() if not victims or s.get("worker") in victims}
        bound = bound_s(args, cluster, len(orphans))
        timeout_s = args.timeout if args.timeout is not None else max(60.0, 4.0 * bound)
        stats_before = http_json("GET", f"{control}/stats")[1]
        progress(f"{policy}: setup done in {setup_s:.1f} s, {len(held)} of {args.n} streams live, {len(orphans)} to "
                 f"be orphaned; trigger {args.trigger} (bound {bound:.1f} s, timeout {timeout_s:.0f} s)")
        trigger_ms = time.time() * 1000.0
        storm_began = time.monotonic()
        if args.trigger == "kill":
            for victim in victims:
                child = cluster.workers[victim].child
                assert child is not None
                child.signal(signal.SIGKILL)
            for victim in victims:
                child = cluster.workers[victim].child
                assert child is not None
                child.wait(10.0)
        else:
            dropped = http_json("POST", f"{control}/disconnect")[1]["disconnected"]
            progress(f"  the simulator dropped {dropped} sessions")
        done, streams = watch(cluster, orphans, trigger_ms, storm_began, timeout_s, stats_before)
        storm_s = time.monotonic() - storm_began
        if not done:
            progress(f"  STORM TIMED OUT after {timeout_s:.0f} s: the fleet did not recover every orphan in time")
        time.sleep(max(1.0, 2.0 * args.timescale))  # the last handshakes window closes
        end_ms = time.time() * 1000.0  # the measurement ends here: the fleet's shutdown hands streams off
        streams = cluster.streams()
        (run_dir / "streams.json").write_text(json.dumps(streams))  # the simulator's final records
        progress(f"{policy}: stopping the fleet")
    result.update({"consumed": consumed, "orphans": len(orphans), "trigger_ms": trigger_ms, "end_ms": end_ms,
                   "bound_s": bound,
                   "timeout_s": timeout_s, "timed_out": not done, "setup_s": setup_s, "storm_s": storm_s})
    result.update(analyse(run_dir, streams, orphans, (trigger_ms, end_ms), args, victims))
    result["wall_s"] = time.monotonic() - began
    return result


def watch(cluster: Cluster, orphans: dict[str, dict[str, Any]], trigger_ms: float, began: float,
          timeout_s: float, before: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Poll the simulator until every orphan has a session opened after the trigger, or the timeout: (all
    recovered, the last view of the streams).  Only the end is decided here; the figures are the records'."""
    control = cluster.upstream_control_url
    expected, totals_before = int(before["live_sessions"]), before["handshakes"]  # as the trigger came
    deadline = began + timeout_s
    streams: dict[str, Any] = {}
    looked = shown = 0.0
    while time.monotonic() < deadline:
        time.sleep(0.5)
        stats = http_json("GET", f"{control}/stats")[1]
        live = int(stats["live_sessions"])
        now = time.monotonic()
        if now - shown >= 2.0:
            hs = stats["handshakes"]
            progress(f"  storm {now - began:6.1f} s: {live} sessions live; since the trigger "
                     f"{hs['accepted'] - totals_before['accepted']} handshakes accepted, "
                     f"{hs['rejected'] - totals_before['rejected']} rejected (429)")
            shown = now
        if (live >= expected and now - looked >= 1.0) or now - looked >= 10.0:
            looked = now
            streams = cluster.streams()
            missing = [sid for sid, r in recoveries(streams, orphans, trigger_ms)["recovered"].items() if r is None]
            if not missing:
                return True, streams
    return False, cluster.streams()


def analyse(run_dir: Path, streams: dict[str, Any], orphans: dict[str, dict[str, Any]],
            span_ms: tuple[float, float], args: argparse.Namespace, victims: list[str]) -> dict[str, Any]:
    trigger_ms, end_ms = span_ms
    watched = {"ws.close", "lease.acquire", "death.notice", "lease.renew"}
    got = recoveries(streams, orphans, trigger_ms)
    times = sorted(t for t in got["recovered"].values() if t is not None)
    lags = sorted(t for t in got["close_lag"].values() if t is not None)
    worker_events: list[dict[str, Any]] = []
    survivors_events: list[dict[str, Any]] = []
    victim_renewals: list[dict[str, Any]] = []
    for path in sorted((run_dir / "history").glob("worker-*.jsonl")):
        events = HistoryTail(run_dir, path.name, watched).new_events()
        worker_events += events
        if path.stem in victims:
            victim_renewals += [e for e in events if e["type"] == "lease.renew" and e.get("outcome") == "ok"
                                and "pk" not in e and e["t"] < trigger_ms]
        else:
            survivors_events += [e for e in events if trigger_ms <= e["t"] <= end_ms]
    throttled = rejections(worker_events, trigger_ms, end_ms)
    per_stream = [throttled.get(sid, 0) for sid in orphans]
    windows = storm_windows(HistoryTail(run_dir, "upstream.jsonl", {"handshakes"}).new_events(), trigger_ms,
                            args.timescale, end_ms)
    saturated = [w["accepted_per_s"] for w in windows if w["rejected"] > 0]
    acquires = [e for e in survivors_events if e["type"] == "lease.acquire" and e.get("outcome") == "ok"]
    notices = [e for e in survivors_events if e["type"] == "death.notice"]
    confirmed = sum(1 for e in notices if e.get("outcome") == "confirmed")
    figures: dict[str, Any] = {
        "recovered": len(times),
        "times_s": times,
        "p50_s": percentile(times, 50), "p99_s": percentile(times, 99), "max_s": times[-1] if times else None,
        "close_lag_max_s": lags[-1] if lags else None,
        "rejections_total": sum(throttled.values()),
        "rejections_orphans": sum(per_stream),
        "max_rejections_per_stream": max(per_stream, default=0),
        "rejected_more_than_twice": sum(1 for c in per_stream if c > MAX_REJECTIONS),
        "rejections_histogram": dict(sorted(Counter(per_stream).items())),
        "simulator_attempted": sum(w["attempted"] for w in windows),
        "simulator_accepted": sum(w["accepted"] for w in windows),
        "simulator_rejected": sum(w["rejected"] for w in windows),
        "peak_accepted_per_s": max((w["accepted_per_s"] for w in windows), default=0.0),
        "saturated_windows": len(saturated),
        "saturated_mean_accepted_per_s": sum(saturated) / len(saturated) if saturated else None,
        "windows": windows,
        "acquires_by_path": dict(Counter(str(e.get("via")) for e in acquires)),
        "first_acquire_s": min(((e["t"] - trigger_ms) / 1000.0 for e in acquires), default=None),
        "last_acquire_s": max(((e["t"] - trigger_ms) / 1000.0 for e in acquires), default=None),
        "death_notices_confirmed": confirmed,
    }
    if args.trigger == "kill":
        figures["takeover_path"] = "death notice" if confirmed else "lease expiry"
        last = max(victim_renewals, key=lambda e: e["t"], default=None)
        expiry = None if last is None or "expires_ms" not in last else (last["expires_ms"] - trigger_ms) / 1000.0
        figures["victim_lease_expiry_s"] = expiry
        # what the takeover itself took: from the victims' lease lapsing (which the kill's phase in their
        # heartbeat decides) to the last orphan's new session
        figures["max_after_expiry_s"] = None if expiry is None or not times else times[-1] - expiry
    return figures


# -- the report ----------------------------------------------------------------------------------------------
def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def policy_line(r: dict[str, Any], quota: float) -> str:
    within = r["max_s"] is not None and r["recovered"] == r["orphans"] and r["max_s"] <= r["bound_s"]
    timed_out = f" (timed out after {r['timeout_s']:.0f} s)" if r["timed_out"] else ""
    return (f"{r['policy']}: recovered {r['recovered']}/{r['orphans']}{timed_out}; time to recovered p50 "
            f"{seconds(r['p50_s'])}, p99 {seconds(r['p99_s'])}, max {seconds(r['max_s'])} (bound "
            f"{r['bound_s']:.1f} s: {'within' if within else 'NOT within'}); 429s: {r['rejections_total']} in all, "
            f"max {r['max_rejections_per_stream']} per stream, {r['rejected_more_than_twice']} streams rejected "
            f"more than {MAX_REJECTIONS} times; peak accepted {r['peak_accepted_per_s']:.0f}/s vs quota "
            f"{quota:g}/s")


def details(r: dict[str, Any], args: argparse.Namespace) -> list[str]:
    lines = [
        f"  wall: {r['wall_s']:.1f} s in all (setup {r['setup_s']:.1f} s, storm {r['storm_s']:.1f} s); "
        f"{r['consumed']} of {args.n} consumed before the trigger; run dir {r['run_dir']}",
        f"  config: {r['config']}",
        f"  orphaned sessions closed in the simulator's record at most {seconds(r['close_lag_max_s'])} after the "
        "trigger",
        f"  429s per orphaned stream (count: streams): {r['rejections_histogram']}; the simulator rejected "
        f"{r['simulator_rejected']} and accepted {r['simulator_accepted']} of {r['simulator_attempted']} handshakes "
        f"in the storm's windows; {r['saturated_windows']} saturated windows, mean accepted in them "
        + ("-" if r["saturated_mean_accepted_per_s"] is None else f"{r['saturated_mean_accepted_per_s']:.0f}/s"),
    ]
    if args.trigger == "kill":
        lines.append(f"  takeover path: {r['takeover_path']} ({r['death_notices_confirmed']} death notices "
                     f"confirmed); the victim's worker lease expired {seconds(r.get('victim_lease_expiry_s'))} "
                     f"after the kill, the last orphan recovered {seconds(r.get('max_after_expiry_s'))} after "
                     f"that; survivors' acquires {r['acquires_by_path']}, first at {seconds(r['first_acquire_s'])}, "
                     f"last at {seconds(r['last_acquire_s'])}{acquire_rate(r)}")
    lines.append("  handshakes per window (from the trigger; per second at scale 1):")
    for w in r["windows"][:60]:
        lines.append(f"    {w['from_s']:+7.2f} s  attempted {w['attempted']:5d}  accepted {w['accepted']:5d}  "
                     f"rejected {w['rejected']:5d}")
    if len(r["windows"]) > 60:
        lines.append(f"    ... {len(r['windows']) - 60} more windows")
    lines.append("  recovered streams over time since the trigger:")
    lines += curve(r["times_s"], r["orphans"], max(0.05, r["bound_s"] / 20.0))
    return lines


def acquire_rate(r: dict[str, Any]) -> str:
    count = sum(r["acquires_by_path"].values())
    first, last = r["first_acquire_s"], r["last_acquire_s"]
    if count < 2 or first is None or last is None or last <= first:
        return ""
    return f" ({count / (last - first):.0f} acquires/s)"


def curve(times: list[float], total: int, step_s: float) -> list[str]:
    if not times:
        return ["    (none recovered)"]
    rows, i, k = [], 0, 1
    while True:
        t = k * step_s
        while i < len(times) and times[i] <= t:
            i += 1
        rows.append(f"    {t:7.2f} s {i:6d} recovered ({100.0 * i / max(1, total):5.1f} %)")
        if i >= len(times):
            return rows
        k += 1


def summary_part(r: dict[str, Any]) -> str:
    if r["recovered"] == r["orphans"] and r["orphans"] > 0:
        head = "all recovered"
    else:
        head = f"{r['recovered']}/{r['orphans']} recovered" + (" (timed out)" if r["timed_out"] else "")
    return (f"{r['policy']}: {head}, p99 {seconds(r['p99_s'])}, max {seconds(r['max_s'])} (bound "
            f"{r['bound_s']:.1f} s), max 429s/stream {r['max_rejections_per_stream']}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out = output_folder(args, "reconnect_storm")
    results: list[dict[str, Any]] = []
    for policy in args.policy_list:
        try:
            results.append(measure(policy, args))
        except ClusterError as exc:
            progress(f"{policy}: the fleet could not run: {exc}")
            return 2
        progress(policy_line(results[-1], args.quota))
    for r in results:
        print(policy_line(r, args.quota))
        print("\n".join(details(r, args)))
    line = (f"reconnect storm: N={args.n} trigger={args.trigger} scale={args.timescale:g} "
            + "; ".join(summary_part(r) for r in results))
    out = args.out / f"reconnect-storm-{args.trigger}-n{args.n}.json"
    settings = {k: v for k, v in vars(args).items() if k not in ("out",)}
    out.write_text(json.dumps({"args": {**settings, "out": str(args.out)}, "results": results, "summary": line},
                              indent=1, default=str))
    progress(f"figures written to {out}")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
