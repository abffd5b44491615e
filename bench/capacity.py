"""Capacity (issue 13): what N streams cost one worker process at a steady message rate, per profile.

For the profile under test (default ``hardened``) and then ``blog`` in the same run (``--skip-blog`` leaves it
out), it starts the harness's topology (``harness.cluster.Cluster``: embedded backend, Toxiproxy, upstream
simulator emitting ``--rate`` messages a second per stream, router) with ONE worker whose ``max_connections``
is N + 100, and:

1. watches the worker process with no stream for ``--idle`` seconds (its idle CPU, shown beside the figures)
   and samples its RSS (``VmRSS``, psutil, that PID only): the baseline;
2. creates and STARTs N streams through the router from a pool of threads, as ``harness.cluster
   .start_connection`` does (a START the router refuses is counted, not fatal), and waits until the simulator
   has a live session for every accepted one, up to ``--own-timeout`` seconds from the first START (then it
   goes on with those it has).  Time to own them all is read from the simulator's own records: the opening of
   each stream's first session, from the first START;
3. lets the backlog of the setup drain for ``--settle`` seconds, then holds the streams for ``--hold`` seconds,
   sampling the worker's RSS and CPU seconds (user + system, psutil, that one PID) at the start and end of the
   window and once a second in between;
4. keeps the fleet up ``--grace`` seconds more, stops it and reads the run's history
   (``harness.checkers.events.read_events``): for each message the simulator emitted during the window (``emit``,
   its ``t`` the emission time), the ``t`` of the first ``ok`` ``msg.persist`` whose seq_from..seq_to covers it
   (when the write was answered), answered before the window's end + grace.  The delays' p50 / p99 / max are
   over the messages persisted so, and the share persisted is printed beside them, so a saturated backend
   shows as a low share rather than as a good p99 over the few that made it.  The worker's ``requests``
   events give its DynamoDB requests a second during the window.

Figures: RSS per stream = (RSS at the window's end - baseline) / streams held, in KB (1024 bytes); CPU per
stream = worker CPU seconds over the window / its length / streams held (a fraction of one core), printed as %
of one core per 1000 streams and as % of one core in all (the idle worker's own CPU is in it; the JSON has
the figure above idle too).  "Streams held" is the number with a live session at the window's end (N when all
went well; it is printed when it is not).

Usage: ``python bench/capacity.py [--n 1000] [--rate 1] [--hold 30] [--timescale 1] [--profile hardened]
[--skip-blog] [--set KEY=VALUE ...] [--out DIR [--force]]``.  Progress goes to stderr; one line per
profile to stdout, and the last line reads ``capacity: N=1000 rate=1/s hardened: RSS X KB/stream, CPU Y
%core/1000 streams, owned all in T s, emit->persist p99 P s (S % persisted); blog: ...; ratio hardened/blog:
RSS a, CPU b, p99 c``.  The figures go to ``OUT/capacity-n<N>-rate<R>.json``.  Exit status 2 when a fleet
cannot start or its worker dies during the measurement.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psutil

from fleet.config import PROFILES, tuning
from fleet.errors import ConfigError
from harness.checkers.events import read_events, select
from harness.cluster import Cluster, ClusterError, ClusterSpec, http_json, send_event
from harness.run_folders import add_output_arguments, output_folder

SEQ_BITS = 32  # a (stream, seq) key: the stream's code above these bits, the seq below
KB = 1024.0
WORKER_MODULE = "fleet.worker"


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults after each option; the module's docstring, as written, after the options."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python bench/capacity.py", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1], formatter_class=_HelpFormatter)
    p.add_argument("--n", type=int, default=1000, help="streams one worker holds")
    p.add_argument("--rate", type=float, default=1.0,
                   help="messages a second each stream emits (real seconds, whatever the time scale)")
    p.add_argument("--hold", type=float, default=30.0,
                   help="seconds of the measured window, at steady state, once every stream is owned")
    p.add_argument("--settle", type=float, default=5.0,
                   help="seconds between owning the last stream and the window, for the backlog the setup left "
                   "(messages emitted before each stream was owned) to be stored")
    p.add_argument("--grace", type=float, default=5.0,
                   help="a message emitted during the window counts as persisted if its write was answered by the "
                   "window's end + this many seconds")
    p.add_argument("--idle", type=float, default=5.0,
                   help="seconds the worker is watched with no stream before the STARTs, for its idle CPU (shown "
                   "beside the figures; the per-stream CPU is not reduced by it)")
    p.add_argument("--timescale", type=float, default=1.0,
                   help="time scale of the fleet (lease, heartbeat, ...) and of the simulator's gateway limits")
    p.add_argument("--profile", choices=PROFILES, default="hardened", help="profile under test")
    p.add_argument("--skip-blog", action="store_true", help="measure only --profile, not blog after it")
    p.add_argument("--threads", type=int, default=16, help="threads creating and STARTing the streams")
    p.add_argument("--own-timeout", type=float, default=300.0,
                   help="seconds from the first START to wait for every stream to be owned; past it the window "
                   "is measured over the streams owned by then, and how many is reported")
    p.add_argument("--set", action="append", default=[], dest="settings", metavar="KEY=VALUE",
                   help="a fleet setting for the worker and router (repeatable), as `wsfleet up --set`; "
                   "max_connections defaults to N + 100")
    add_output_arguments(p, "runs/bench-capacity", "the run directories (OUT/<profile>) and the JSON figures")
    args = checked(p, p.parse_args(argv), ("settle", "grace", "idle"))
    args.profiles = [args.profile] + ([] if args.skip_blog or args.profile == "blog" else ["blog"])
    return args


def checked(p: argparse.ArgumentParser, args: argparse.Namespace, non_negative: tuple[str, ...],
            positive_if_given: tuple[str, ...] = ()) -> argparse.Namespace:
    """``args`` with its ``--set`` settings parsed into ``overrides``, once its counts, its positive numbers
    (rate, hold, timescale, own-timeout, and those of ``positive_if_given`` that are not None) and
    ``non_negative`` are in range (else ``p.error``: exit 2)."""
    if args.n < 1 or args.threads < 1:
        p.error("--n and --threads must be at least 1")
    given = [name for name in positive_if_given if getattr(args, name) is not None]
    for name in ("rate", "hold", "timescale", "own_timeout", *given):
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0):
            p.error(f"--{name.replace('_', '-')} must be a positive number, not {value:g}")
    for name in non_negative:
        value = getattr(args, name)
        if not (math.isfinite(value) and value >= 0):
            p.error(f"--{name} must be zero or more, not {value:g}")
    try:
        args.overrides = tuning({}, args.settings)
    except ConfigError as exc:
        p.error(str(exc))
    return args


PROGRESS_S = 5.0  # seconds between progress lines while STARTing and waiting


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the figures ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Delays:
    """Emission-to-persistence of the messages emitted in a window (seconds)."""

    emitted: int
    persisted: int
    p50_s: float | None
    p99_s: float | None
    max_s: float | None

    @property
    def share(self) -> float | None:
        return self.persisted / self.emitted if self.emitted else None


def nearest_rank(values: np.ndarray, q: float) -> float | None:
    """Nearest-rank percentile (None when empty)."""
    if values.size == 0:
        return None
    ordered = np.sort(values)
    return float(ordered[max(0, math.ceil(q / 100.0 * ordered.size) - 1)])


def _whole_seqs(*columns: np.ndarray) -> np.ndarray:
    """Rows whose values in every column are whole numbers in [0, 2^SEQ_BITS)."""
    keep = np.ones(len(columns[0]), dtype=bool)
    for values in columns:
        with np.errstate(invalid="ignore"):
            keep &= np.isfinite(values) & (values >= 0) & (values < 2**SEQ_BITS) & (values == np.floor(values))
    return keep


def emit_to_persist(emits: pd.DataFrame, persists: pd.DataFrame, start_ms: float, end_ms: float,
                    grace_ms: float) -> Delays:
    """For each message emitted in [start_ms, end_ms] (``emits``: t, pk, seq), the delay to the first ``ok``
    write covering it (``persists``: t, pk, seq_from, seq_to, outcome) answered by end_ms + grace_ms.  Rows
    whose seqs are not whole numbers below 2^32 are left out."""
    e_t = emits["t"].to_numpy(dtype="float64")
    e_seq = emits["seq"].to_numpy(dtype="float64")
    inside = (e_t >= start_ms) & (e_t <= end_ms) & _whole_seqs(e_seq) & pd.notna(emits["pk"]).to_numpy()
    e_t, e_seq = e_t[inside], e_seq[inside].astype("int64")
    if e_t.size == 0:
        return Delays(0, 0, None, None, None)
    pk_names = pd.Index(pd.unique(emits["pk"].to_numpy(dtype=object)[inside]))
    e_keys = (np.asarray(pk_names.get_indexer(emits["pk"].to_numpy(dtype=object)[inside]), dtype="int64")
              << SEQ_BITS) | e_seq

    p_t = persists["t"].to_numpy(dtype="float64")
    first = persists["seq_from"].to_numpy(dtype="float64")
    last = persists["seq_to"].to_numpy(dtype="float64")
    codes = np.asarray(pk_names.get_indexer(persists["pk"].to_numpy(dtype=object)), dtype="int64")
    ok = ((persists["outcome"].to_numpy(dtype=object) == "ok") & (p_t <= end_ms + grace_ms) & (codes >= 0)
          & _whole_seqs(first, last) & (last >= first))
    p_t, codes = p_t[ok], codes[ok]
    first, last = first[ok].astype("int64"), last[ok].astype("int64")
    lengths = last - first + 1
    total = int(lengths.sum())
    if total == 0:
        return Delays(int(e_t.size), 0, None, None, None)
    which = np.repeat(np.arange(lengths.size), lengths)  # each covered seq's write
    offsets = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    keys = (codes[which] << SEQ_BITS) | (first[which] + offsets)
    times = p_t[which]
    order = np.lexsort((times, keys))  # by key, then earliest answer first
    keys, times = keys[order], times[order]
    earliest = np.ones(keys.size, dtype=bool)
    earliest[1:] = keys[1:] != keys[:-1]
    keys, times = keys[earliest], times[earliest]
    at = np.minimum(np.searchsorted(keys, e_keys), keys.size - 1)
    found = keys[at] == e_keys
    delays = (times[at][found] - e_t[found]) / 1000.0
    return Delays(int(e_t.size), int(found.sum()), nearest_rank(delays, 50), nearest_rank(delays, 99),
                  float(delays.max()) if delays.size else None)


def rss_per_stream_kb(baseline_bytes: float, end_bytes: float, streams: int) -> float | None:
    return (end_bytes - baseline_bytes) / KB / streams if streams else None


def cpu_per_stream(cpu_s: float, window_s: float, streams: int) -> float | None:
    """Worker CPU over the window as a fraction of one core, per stream."""
    return cpu_s / window_s / streams if streams and window_s > 0 else None


def request_rates(requests: pd.DataFrame, start_ms: float, end_ms: float) -> dict[str, float]:
    """DynamoDB requests a second by purpose between the worker's last ``requests`` event at or before
    ``start_ms`` and its last at or before ``end_ms`` (the counters are cumulative)."""
    if requests.empty:
        return {}
    t = requests["t"].to_numpy(dtype="float64")
    before, after = np.flatnonzero(t <= start_ms), np.flatnonzero(t <= end_ms)
    if before.size == 0 or after.size == 0 or after[-1] == before[-1]:
        return {}
    a, b = before[-1], after[-1]
    span_s = float(t[b] - t[a]) / 1000.0
    rates = {}
    for purpose in ("coordination", "messages"):
        if purpose not in requests:
            continue
        counts = pd.to_numeric(requests[purpose], errors="coerce").fillna(0.0).to_numpy(dtype="float64")
        rates[purpose] = float(counts[b] - counts[a]) / span_s
    return rates


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}"


def figure(value: float | None, spec: str) -> str:
    """A measured figure formatted by ``spec``; ``n/a`` when it could not be measured."""
    return "n/a" if value is None else format(value, spec)


def profile_part(r: dict[str, Any]) -> str:
    """``hardened: RSS X KB/stream, CPU Y %core/1000 streams, owned all in T s, emit->persist p99 P s (S %
    persisted)`` (with the streams held when not all were)."""
    held = "" if r["held"] == r["n"] else f" [{r['held']} of {r['n']} held]"
    refused = sum(r.get("refused", {}).values())
    held += f" [{refused} STARTs refused]" if refused else ""
    owned = (f"owned all in {r['owned_all_s']:.1f} s" if r["owned_all_s"] is not None
             else f"owned only {r['owned']} of {r['accepted']} in {r['own_timeout_s']:.0f} s")
    cpu_1000 = None if r["cpu_per_stream"] is None else 100.0 * 1000.0 * r["cpu_per_stream"]
    share = None if r["delays"]["share"] is None else 100.0 * r["delays"]["share"]
    return (f"{r['profile']}: RSS {figure(r['rss_kb_per_stream'], '.1f')} KB/stream, CPU {figure(cpu_1000, '.1f')} "
            f"%core/1000 streams, {owned}, emit->persist p99 {figure(r['delays']['p99_s'], '.2f')} s "
            f"({figure(share, '.1f')} % persisted){held}")


def profile_line(r: dict[str, Any]) -> str:
    """One profile's figures in full."""
    d = r["delays"]
    return (f"{profile_part(r)}; RSS {r['rss_baseline_mb']:.1f} MB before any stream, {r['rss_end_mb']:.1f} MB "
            f"at the window's end; CPU {figure(100.0 * r['cpu_core_share'], '.1f')} % of "
            f"one core in all ({r['cpu_s']:.2f} s over {r['window_s']:.1f} s; idle before any stream "
            f"{100.0 * r['idle_cpu_core_share']:.1f} %); emit->persist p50 "
            f"{figure(d['p50_s'], '.3f')} s, p99 {figure(d['p99_s'], '.3f')} s, max {figure(d['max_s'], '.3f')} s over "
            f"{d['persisted']} of {d['emitted']} messages; STARTs refused: {r['refused'] or 'none'}; DynamoDB "
            f"requests/s: {', '.join(f'{k} {v:.1f}' for k, v in r['requests_per_s'].items()) or 'n/a'}")


def summary(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    line = f"capacity: N={args.n} rate={args.rate:g}/s " + "; ".join(profile_part(r) for r in results)
    if len(results) == 2:
        a, b = results
        line += (f"; ratio {a['profile']}/{b['profile']}: RSS {ratio(a['rss_kb_per_stream'], b['rss_kb_per_stream'])}"
                 f", CPU {ratio(a['cpu_per_stream'], b['cpu_per_stream'])}, p99 "
                 f"{ratio(a['delays']['p99_s'], b['delays']['p99_s'])}")
    return line


# -- one fleet, one profile ------------------------------------------------------------------------------------
def worker_process(cluster: Cluster) -> psutil.Process:
    """The one worker's process: the PID the cluster started, checked by its command line (else found among
    this process's children by it)."""
    handle = next(iter(cluster.workers.values()))
    candidates = [psutil.Process(handle.pid)] if handle.pid else []
    candidates += psutil.Process().children(recursive=True)
    for process in candidates:
        try:
            if WORKER_MODULE in process.cmdline():
                return process
        except psutil.Error:
            continue
    raise ClusterError(f"cannot find the process of {handle.id} (python -m {WORKER_MODULE})")


def alive(process: psutil.Process) -> bool:
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def first_opened_ms(streams: dict[str, Any], ids: list[str]) -> dict[str, float]:
    """Each of ``ids``' first session's opening (Unix ms), for those that ever had one."""
    found: dict[str, float] = {}
    for sid in ids:
        opened = [s["opened"] for s in streams.get(sid, {}).get("sessions", []) if s.get("opened") is not None]
        if opened:
            found[sid] = float(min(opened))
    return found


def live_count(streams: dict[str, Any], ids: list[str]) -> int:
    return sum(1 for sid in ids if any(s.get("closed") is None for s in streams.get(sid, {}).get("sessions", [])))


def start_streams(cluster: Cluster, ids: list[str], threads: int,
                  deadline: float) -> tuple[list[str], Counter[str], float]:
    """Create each stream in the simulator and START it through the router, as ``start_connection`` does,
    from a pool of threads: (the ids accepted, refusals by reason, when the first START went out)."""
    control, upstream, router = cluster.upstream_control_url, cluster.upstream_url, cluster.router_url
    refused: Counter[str] = Counter()
    lock = threading.Lock()
    first_start: list[float] = []

    def start(cid: str) -> bool:
        if time.monotonic() > deadline:
            with lock:
                refused["not sent: --own-timeout reached while STARTing"] += 1
            return False
        try:
            http_json("POST", f"{control}/streams/{cid}")
            with lock:
                if not first_start:
                    first_start.append(time.time())
            send_event(router, "START", cid, f"{upstream}/streams/{cid}")
        except ClusterError as exc:
            with lock:
                refused[str(exc).removeprefix(f"START {cid} ")[:160]] += 1
            return False
        return True

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(start, cid) for cid in ids]
        began = time.monotonic()
        for answered, _ in enumerate(as_completed(futures), start=1):
            if time.monotonic() - began >= PROGRESS_S and answered < len(ids):
                began = time.monotonic()
                with lock:
                    shown = dict(refused.most_common(2))
                progress(f"  {answered} of {len(ids)} STARTs answered, {sum(refused.values())} refused"
                         + (f" ({shown})" if shown else ""))
        accepted = [cid for cid, future in zip(ids, futures, strict=True) if future.result()]
    return accepted, refused, first_start[0] if first_start else time.time()


def wait_owned(cluster: Cluster, worker: psutil.Process, ids: list[str], deadline: float,
               began: float) -> dict[str, Any]:
    """Poll the simulator until every one of ``ids`` has a live session, or the deadline; its last view.  A
    worker that exits meanwhile is a ``ClusterError``."""
    control = cluster.upstream_control_url
    shown = 0.0
    while True:
        if not alive(worker):
            raise ClusterError(f"the worker (pid {worker.pid}) exited while taking the streams; log under "
                               f"{cluster.run_dir / 'logs'}")
        live = int(http_json("GET", f"{control}/stats")[1]["live_sessions"])
        if live >= len(ids) or time.monotonic() >= deadline:
            streams = cluster.streams()
            if live_count(streams, ids) >= len(ids) or time.monotonic() >= deadline:
                return streams
        if time.monotonic() - shown >= PROGRESS_S:
            progress(f"  {time.monotonic() - began:6.1f} s: {live} of {len(ids)} streams live")
            shown = time.monotonic()
        time.sleep(0.5)


def measure(profile: str, args: argparse.Namespace) -> dict[str, Any]:
    run_dir = args.out / profile
    overrides = {"max_connections": args.n + 100, **args.overrides}
    ping = getattr(args, "upstream_ping", None)  # the simulator's keepalive, where the benchmark sets it
    spec = ClusterSpec(workers=1, profile=profile, timescale=args.timescale, run_dir=run_dir, rate=args.rate,
                       overrides=overrides, dynamodb=getattr(args, "dynamodb", ClusterSpec.dynamodb),
                       upstream={"ping_interval": ping} if ping else {})
    ids = [f"c{i:05d}" for i in range(args.n)]
    began = time.monotonic()
    samples: list[dict[str, float]] = []
    with Cluster(spec) as cluster:
        worker = worker_process(cluster)
        progress(f"{profile}: fleet up in {time.monotonic() - began:.1f} s, worker pid {worker.pid}")
        time.sleep(1.0)  # the worker's start-up settles
        try:
            idle_began, cpu_idle = time.monotonic(), cpu_seconds(worker)
            time.sleep(args.idle)
            idle_cpu_share = (cpu_seconds(worker) - cpu_idle) / (time.monotonic() - idle_began)
            rss_baseline = float(worker.memory_info().rss)
            cpu_baseline = cpu_seconds(worker)
        except psutil.Error as exc:
            raise ClusterError(f"the worker (pid {worker.pid}) is gone before any stream: {exc}; log under "
                               f"{run_dir / 'logs'}") from exc
        progress(f"{profile}: baseline RSS {rss_baseline / KB / KB:.1f} MB, idle CPU {100.0 * idle_cpu_share:.1f} % "
                 f"of one core; creating and STARTing {args.n} streams from {args.threads} threads")
        deadline = time.monotonic() + args.own_timeout
        starts_began = time.monotonic()
        accepted, refused, t0 = start_streams(cluster, ids, args.threads, deadline)
        progress(f"{profile}: {len(accepted)} STARTs accepted in {time.time() - t0:.1f} s"
                 + (f", refused: {dict(refused)}" if refused else ""))
        streams = wait_owned(cluster, worker, accepted, deadline, starts_began)
        owned_ms = first_opened_ms(streams, accepted)
        owned = live_count(streams, accepted)
        times = sorted((ms / 1000.0 - t0) for ms in owned_ms.values())
        owned_all_s = times[-1] if accepted and owned >= len(accepted) and len(times) >= len(accepted) else None
        if owned_all_s is None:
            progress(f"{profile}: OWN TIMED OUT (--own-timeout {args.own_timeout:g} s): {owned} of {len(accepted)} "
                     "accepted streams live; measuring those")
        else:
            progress(f"{profile}: all {len(accepted)} owned {owned_all_s:.1f} s after the first START; settling "
                     f"{args.settle:g} s, then a {args.hold:g} s window")
        time.sleep(args.settle)
        try:
            start_ms, cpu_start = time.time() * 1000.0, cpu_seconds(worker)
            samples.append({"t_s": 0.0, "rss_mb": worker.memory_info().rss / KB / KB, "cpu_s": 0.0})
            load_start = os.getloadavg()
            window_began = time.monotonic()
            while (left := args.hold - (time.monotonic() - window_began)) > 0:
                time.sleep(min(1.0, left))
                samples.append({"t_s": time.monotonic() - window_began, "rss_mb": worker.memory_info().rss / KB / KB,
                                "cpu_s": cpu_seconds(worker) - cpu_start})
            end_ms, cpu_end = time.time() * 1000.0, cpu_seconds(worker)
            rss_end = float(worker.memory_info().rss)
        except psutil.Error as exc:
            raise ClusterError(f"the worker (pid {worker.pid}) is gone during the window: {exc}; log under "
                               f"{run_dir / 'logs'}") from exc
        load_end = os.getloadavg()
        held = live_count(cluster.streams(), accepted)
        progress(f"{profile}: window done ({held} streams live); {args.grace:g} s of grace, then stopping the fleet")
        time.sleep(args.grace)
    progress(f"{profile}: reading the history")
    events = read_events(run_dir)
    emits = select(events, "emit", ["t", "pk", "seq"])
    persists = select(events, "msg.persist", ["t", "pk", "seq_from", "seq_to", "outcome"])
    requests = select(events, "requests", ["t", "held", "coordination", "messages"],
                      raw=("held", "coordination", "messages"))
    delays = emit_to_persist(emits, persists, start_ms, end_ms, 1000.0 * args.grace)
    window_s = (end_ms - start_ms) / 1000.0
    cpu_s = cpu_end - cpu_start
    return {
        "profile": profile, "n": args.n, "run_dir": str(run_dir), "accepted": len(accepted),
        "refused": dict(refused), "owned": owned, "owned_all_s": owned_all_s, "own_timeout_s": args.own_timeout,
        "owned_p50_s": times[len(times) // 2] if times else None, "held": held,
        "window": {"start_ms": start_ms, "end_ms": end_ms}, "window_s": window_s,
        "rss_baseline_mb": rss_baseline / KB / KB, "rss_end_mb": rss_end / KB / KB,
        "rss_kb_per_stream": rss_per_stream_kb(rss_baseline, rss_end, held),
        "cpu_s": cpu_s, "cpu_core_share": cpu_s / window_s,
        "cpu_per_stream": cpu_per_stream(cpu_s, window_s, held),
        "idle_cpu_core_share": idle_cpu_share,
        "cpu_per_stream_above_idle": cpu_per_stream(cpu_s - idle_cpu_share * window_s, window_s, held),
        "rss_max_mb": max(s["rss_mb"] for s in samples),
        "cpu_s_before_window": cpu_start - cpu_baseline,
        "delays": {**asdict(delays), "share": delays.share},
        "requests_per_s": request_rates(requests, start_ms, end_ms),
        "loadavg_start": load_start, "loadavg_end": load_end, "samples": samples,
        "wall_s": time.monotonic() - began,
    }


def measure_profiles(prog: str, args: argparse.Namespace, profiles: list[str],
                     measure_one: Callable[[str, argparse.Namespace], dict[str, Any]],
                     line_of: Callable[[dict[str, Any]], str]) -> list[dict[str, Any]] | None:
    """Each profile's figures, measured in turn, each one's line shown as progress (None when a fleet cannot
    run: said why)."""
    results: list[dict[str, Any]] = []
    for profile in profiles:
        try:
            results.append(measure_one(profile, args))
        except ClusterError as exc:
            progress(f"{prog}: {profile}: the fleet could not run: {exc}")
            return None
        progress(line_of(results[-1]))
    return results


def run_profiles(prog: str, args: argparse.Namespace, profiles: list[str],
                 measure_one: Callable[[str, argparse.Namespace], dict[str, Any]],
                 line_of: Callable[[dict[str, Any]], str],
                 summary_of: Callable[[list[dict[str, Any]], argparse.Namespace], str]) -> int:
    """Measure each profile in turn (exit status 2 when a fleet cannot run), print each one's line and the
    summary last, and write the figures to ``OUT/<prog>-n<N>-rate<R>.json``."""
    results = measure_profiles(prog, args, profiles, measure_one, line_of)
    if results is None:
        return 2
    for r in results:
        print(line_of(r))
    return write_figures(args, f"{prog.replace('_', '-')}-n{args.n}-rate{args.rate:g}.json",
                         {"results": results}, summary_of(results, args))


def write_figures(args: argparse.Namespace, name: str, figures: dict[str, Any], line: str) -> int:
    """Write ``figures``, the settings and the summary ``line`` to ``OUT/<name>``, say where, and print the line
    last (exit status 0)."""
    out = args.out / name
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    out.write_text(json.dumps({"args": settings, **figures, "summary": line}, indent=1, default=str))
    progress(f"figures written to {out}")
    print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out = output_folder(args, "capacity")
    return run_profiles("capacity", args, args.profiles, measure, profile_line, summary)


if __name__ == "__main__":
    sys.exit(main())
