"""Write cost (issue 26): what one stored message costs in DynamoDB requests, billed units, client CPU and
dollars, ``blog`` against ``hardened`` side by side in one run on the same (embedded) backend; and, with
``--memory``, what holding many quiet streams costs one worker in memory and CPU.

Each profile's fleet is started, loaded and watched as ``bench/capacity.py`` does (``bench.capacity.measure``:
one worker, ``--streams`` streams emitting ``--rate`` messages a second each, a steady window of ``--hold``
seconds).  Over that window it reads from the history:

- the worker's DynamoDB requests by operation and purpose and the read and write units they are billed, from
  its cumulative ``requests`` events (``fleet.aws.AwsClients.operations`` / ``.units``: computed from AWS's
  published rules by ``fleet.billing``; what the backend itself reported beside it), between its first event
  in the window and its last (a span inside it: written every heartbeat, they leave most of it);
- the messages stored over that same span: the seqs covered by the ``ok`` ``msg.persist`` events in it;
- the worker's CPU seconds over the window (psutil) and the emit-to-stored delays p50 / p99
  (``bench.capacity.emit_to_persist``).

Per stored message: requests (all purposes), write and read units (all purposes, and those of message
persistence alone), client CPU in microseconds, and dollars per million messages at the on-demand list price,
then each as a ratio of ``hardened`` to ``blog``.  The units follow AWS's rules ("Read/write operations":
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html; "Item sizes and
formats": https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html), the
price the on-demand list ($0.625 per million write request units, $0.125 per million read request units,
us-east-1: https://aws.amazon.com/dynamodb/pricing/on-demand/; ``fleet.billing.LIST_PRICE_USD``).  ``hardened``
stores one conditional PutItem per batch of its fenced log (``fleet.batch_log``) on every engine.

``--memory``: the low-rate mode (``--rate`` defaults to 0.02 a second, ``--settle`` to 30 s: each take-up's
tail read and mark cost about as much CPU as a window of quiet streams, so they must be over before it;
``--own-timeout`` to 600 s: the window starts once every stream is held, progress shown meanwhile).
The same one-worker fleet holds the streams; printed per profile: the worker's RSS growth per stream held
(KB) and its CPU in cores over the window (idle CPU before any stream beside it): holding a stream should
cost memory and renewals, not CPU.

Usage: ``python -m bench.write_cost [--streams 50] [--rate 5] [--hold 20] [--timescale 1] [--dynamodb
dynalite|moto] [--profiles blog,hardened] [--memory] [--repeat N] [--set KEY=VALUE ...] [--out DIR
[--force]]``. Progress goes to stderr; one line per profile to stdout, and the last line reads ``write cost:
N=50 rate=5/s on dynalite blog: R req, W WU (M msg WU), U RU, C us CPU per stored message, stored p50 A s p99
B s, $D per million messages; hardened: ...; ratio hardened/blog: requests r, write units w, CPU c, p99 p, $
d`` (with ``--memory``: ``memory: N=5000 rate=0.02/s on dynalite hardened: RSS X KB per stream, CPU Y cores
...``). The figures go to ``OUT/write-cost-n<N>-rate<R>.json`` (``write-cost-memory-...``). ``--repeat N`` measures
both profiles N times in turn, each on a fleet of its own, and ends with ``write cost over N runs: ...; median
ratio hardened/blog: ..., CPU c (each run: ...), ...``: the CPU per message moves from fleet to fleet (by how
the streams' phases make a worker's reads coalesce: 0.08 to 0.11 of ``blog``'s over ten single runs of one
build), so one pair is one sample.  Exit status 2 when a fleet cannot start or its worker dies during the
measurement.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.capacity import checked, figure, measure_profiles, progress, run_profiles, write_figures
from bench.capacity import measure as measure_fleet
from fleet.billing import dollars_per_million
from harness.backends import DYNAMODB_ENGINES
from harness.checkers.events import read_events, select
from harness.cluster import ClusterError
from harness.run_folders import add_output_arguments, output_folder

PROFILES = ("blog", "hardened")
MEMORY_RATE = 0.02  # messages a second per stream in the memory mode
MEMORY_SETTLE_S = 30.0  # the memory mode's settle: take-ups (a tail read and a mark each) over before the window
MEMORY_OWN_TIMEOUT_S = 600.0  # the memory mode waits this long for every stream to be held before the window


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default after its help, unless the help says it (a default that depends on the mode)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        return action.help if action.default is None else super()._get_help_string(action)


def _profiles(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names or any(name not in PROFILES for name in names) or len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"{text!r}: name {' and/or '.join(PROFILES)}, each once, comma-separated")
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.write_cost", description=__doc__.split("\n\n")[0],
                                formatter_class=_Formatter)
    p.add_argument("--streams", "--n", type=int, default=50, dest="n", help="streams the one worker holds")
    p.add_argument("--rate", type=float, default=None,
                   help="messages a second each stream emits (default 5; with --memory 0.02)")
    p.add_argument("--memory", action="store_true",
                   help="the low-rate mode: RSS per stream held and CPU in cores, not the cost per message")
    p.add_argument("--profiles", type=_profiles, default=list(PROFILES),
                   help="comma-separated profiles to measure, in this order (blog first: the ratios' base)")
    p.add_argument("--hold", type=float, default=20.0, help="seconds of the measured window")
    p.add_argument("--settle", type=float, default=None,
                   help="seconds between owning every stream and the window (default 3; with --memory 30: every "
                   "take-up's tail read and mark must be done before the window, or their CPU lands in it)")
    p.add_argument("--grace", type=float, default=3.0,
                   help="a message emitted in the window counts as stored if its write was answered by the "
                   "window's end + this many seconds")
    p.add_argument("--timescale", type=float, default=1.0, help="time scale of the fleet")
    p.add_argument("--threads", type=int, default=32,
                   help="threads STARTing the streams (the router sends the notifications of STARTs it handles "
                   "at once together)")
    p.add_argument("--own-timeout", type=float, default=None,
                   help="seconds to START and own every stream, with progress every 5 s, before the settle and "
                   "the window (default 60; with --memory 600: the window must see every stream held)")
    p.add_argument("--dynamodb", choices=DYNAMODB_ENGINES, default="dynalite",
                   help="the embedded DynamoDB engine both profiles run on")
    p.add_argument("--upstream-ping", type=float, default=None, metavar="S",
                   help="seconds between the upstream simulator's keepalive pings on each session (default: the "
                   "harness's, 5 s at scale 1): a worker answers every ping, so at 5,000 streams the upstream's "
                   "own keepalive is a share of the CPU measured")
    p.add_argument("--set", action="append", default=[], dest="settings", metavar="KEY=VALUE",
                   help="a fleet setting for the worker and router (repeatable), as `wsfleet up --set`")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="measure the profiles N times in turn (blog, hardened, blog, hardened, ...), each time "
                   "on a fleet of its own (OUT/run-<i>), and end with each ratio's median over the N pairs: how "
                   "a worker's reads coalesce differs from fleet to fleet (the streams' phases), and with it "
                   "the CPU per message")
    add_output_arguments(p, "runs/bench-write-cost", "the run directories (OUT/<profile>) and the JSON figures")
    args = p.parse_args(argv)
    if args.rate is None:
        args.rate = MEMORY_RATE if args.memory else 5.0
    if args.settle is None:
        args.settle = MEMORY_SETTLE_S if args.memory else 3.0
    if args.own_timeout is None:
        args.own_timeout = MEMORY_OWN_TIMEOUT_S if args.memory else 60.0
    args = checked(p, args, ("settle", "grace"), positive_if_given=("upstream_ping",))
    if args.repeat < 1 or (args.repeat > 1 and (args.memory or set(args.profiles) != set(PROFILES))):
        p.error("--repeat must be at least 1, and above 1 only for the cost per message of both profiles")
    args.idle = 1.0  # bench.capacity's idle watch: the baseline the memory mode subtracts
    return args


# -- the figures (pure) --------------------------------------------------------------------------------------
def counter_span(requests: pd.DataFrame, start_ms: float, end_ms: float) -> tuple[int, int] | None:
    """Rows of the worker's first ``requests`` event at or after ``start_ms`` and its last at or before
    ``end_ms``: a span inside the window, so what the streams' take-ups cost before it (their acquires, tail
    reads and marks) is never counted in it, whenever the counters happened to be written (None unless both
    exist and differ)."""
    t = requests["t"].to_numpy(dtype="float64")
    inside = np.flatnonzero((t >= start_ms) & (t <= end_ms))
    if inside.size < 2:
        return None
    return int(inside[0]), int(inside[-1])


def counter_delta(first: Any, last: Any) -> dict[str, float]:
    """``last - first`` per key of two cumulative counter dicts (a missing key or a non-dict is zero)."""
    a = first if isinstance(first, dict) else {}
    b = last if isinstance(last, dict) else {}
    return {k: float(b.get(k, 0)) - float(a.get(k, 0)) for k in sorted(set(a) | set(b))}


def stored_between(persists: pd.DataFrame, start_ms: float, end_ms: float) -> int:
    """Seqs covered by the ``ok`` ``msg.persist`` events answered in ``(start_ms, end_ms]``."""
    t = persists["t"].to_numpy(dtype="float64")
    first = pd.to_numeric(persists["seq_from"], errors="coerce").to_numpy(dtype="float64")
    last = pd.to_numeric(persists["seq_to"], errors="coerce").to_numpy(dtype="float64")
    ok = ((persists["outcome"].to_numpy(dtype=object) == "ok") & (t > start_ms) & (t <= end_ms)
          & np.isfinite(first) & np.isfinite(last) & (last >= first))
    return int((last[ok] - first[ok] + 1).sum())


def per_message(operations: dict[str, float], units: dict[str, float], stored: int, cpu_s: float,
                window_s: float, span_s: float) -> dict[str, float | None]:
    """Requests, units, CPU (µs) and list-price dollars per million, each per stored message; the CPU is the
    worker's over the window, scaled to the counters' span."""
    if stored <= 0 or span_s <= 0 or window_s <= 0:
        return {k: None for k in ("requests", "write_units", "message_write_units", "read_units", "cpu_us",
                                  "usd_per_million")}
    write = sum(v for k, v in units.items() if k.startswith("write "))
    read = sum(v for k, v in units.items() if k.startswith("read "))
    return {
        "requests": sum(operations.values()) / stored,
        "write_units": write / stored,
        "message_write_units": units.get("write messages", 0.0) / stored,
        "read_units": read / stored,
        "cpu_us": cpu_s / window_s * span_s / stored * 1e6,
        "usd_per_million": dollars_per_million(write, read, stored),
    }


def profile_part(r: dict[str, Any]) -> str:
    m, d = r["per_message"], r["delays"]
    return (f"{r['profile']}: {figure(m['requests'], '.3f')} req, {figure(m['write_units'], '.3f')} WU "
            f"({figure(m['message_write_units'], '.3f')} msg WU), {figure(m['read_units'], '.3f')} RU, "
            f"{figure(m['cpu_us'], '.0f')} us CPU per stored message, stored p50 {figure(d['p50_s'], '.3f')} s p99 "
            f"{figure(d['p99_s'], '.3f')} s, ${figure(m['usd_per_million'], '.3f')} per million messages")


def profile_line(r: dict[str, Any]) -> str:
    """One profile's figures in full: the summary part, then the counts behind it."""
    ops = ", ".join(f"{k} {v:g}" for k, v in r["operations"].items() if v) or "none"
    units = ", ".join(f"{k} {v:g}" for k, v in r["units"].items() if v) or "none"
    return (f"{profile_part(r)}; {r['stored']} messages stored in {r['span_s']:.1f} s; requests: {ops}; "
            f"units: {units}; {r['delays']['persisted']} of {r['delays']['emitted']} messages emitted in the "
            f"window stored; {r['held']} of {r['n']} streams held")


RATIO_KEYS = (("requests", "requests"), ("write units", "write_units"), ("CPU", "cpu_us"),
              ("$", "usd_per_million"))
RATIO_ORDER = ("requests", "write units", "CPU", "p99", "$")  # as the summary line names them


def pair_ratios(results: list[dict[str, Any]]) -> dict[str, float | None]:
    """hardened / blog per message, by ratio name, of one run that measured both (None: not measurable)."""
    by = {r["profile"]: r for r in results}
    h, b = by["hardened"], by["blog"]
    figures = [(name, h["per_message"][key], b["per_message"][key]) for name, key in RATIO_KEYS]
    figures.append(("p99", h["delays"]["p99_s"], b["delays"]["p99_s"]))
    return {name: None if a is None or not base else a / base for name, a, base in figures}


def repeated_summary(runs: list[list[dict[str, Any]]], args: argparse.Namespace) -> str:
    """``write cost over N runs: ...; median ratio hardened/blog: requests r, ..., CPU c (each run: c1 c2
    ...), ...; median CPU per stored message: hardened H us, blog B us``."""
    pairs = [pair_ratios(run) for run in runs]
    parts = []
    for name in RATIO_ORDER:
        values = [p[name] for p in pairs if p[name] is not None]
        median = f"{float(np.median(values)):.2f}" if len(values) == len(pairs) else "n/a"
        each = f" (each run: {' '.join(f'{v:.3f}' for v in values)})" if name == "CPU" else ""
        parts.append(f"{name} {median}{each}")
    cpu = {profile: [r["per_message"]["cpu_us"] for run in runs for r in run if r["profile"] == profile]
           for profile in ("hardened", "blog")}
    medians = ", ".join(f"{profile} {figure(float(np.median(v)) if None not in v else None, '.0f')} us"
                        for profile, v in cpu.items())
    return (f"write cost over {len(runs)} runs: {_setup(args).rstrip()}; median ratio hardened/blog: "
            + ", ".join(parts) + f"; median CPU per stored message: {medians}")


def repeat_profiles(args: argparse.Namespace) -> int:
    """``--repeat N``: both profiles N times in turn, each run in ``OUT/run-<i>``, each run's summary line, then
    the medians; the figures to ``OUT/write-cost-n<N>-rate<R>-x<N>.json``."""
    runs: list[list[dict[str, Any]]] = []
    for i in range(1, args.repeat + 1):
        progress(f"write cost: run {i} of {args.repeat}")
        one = argparse.Namespace(**{**vars(args), "out": args.out / f"run-{i}"})
        one.out.mkdir()
        results = measure_profiles("write_cost", one, args.profiles, measure, profile_line)
        if results is None:
            return 2
        runs.append(results)
        print(summary(results, args), flush=True)
    return write_figures(args, f"write-cost-n{args.n}-rate{args.rate:g}-x{args.repeat}.json", {"runs": runs},
                         repeated_summary(runs, args))


def ratios(results: list[dict[str, Any]]) -> str:
    """``; ratio hardened/blog: requests r, ...`` when both were measured (blog the base), else ""."""
    if {r["profile"] for r in results} != set(PROFILES):
        return ""
    pair = pair_ratios(results)
    return "; ratio hardened/blog: " + ", ".join(f"{name} {figure(pair[name], '.2f')}" for name in RATIO_ORDER)


def _setup(args: argparse.Namespace) -> str:
    """What the run was: streams, rate, backend, and the upstream's keepalive when it is not the harness's."""
    ping = f", upstream pings every {args.upstream_ping:g} s" if args.upstream_ping else ""
    return f"N={args.n} rate={args.rate:g}/s on {args.dynamodb}{ping} "


def summary(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    head = f"write cost: {_setup(args)}"
    return head + "; ".join(profile_part(r) for r in results) + ratios(results)


def memory_line(r: dict[str, Any]) -> str:
    """One profile's figures in the memory mode."""
    held = "" if r["held"] == r["n"] else f" [{r['held']} of {r['n']} held]"
    return (f"{r['profile']}: RSS {figure(r['rss_kb_per_stream'], '.1f')} KB per stream, CPU "
            f"{figure(r['cpu_core_share'], '.3f')} cores (idle before any stream {r['idle_cpu_core_share']:.3f}), "
            f"RSS {r['rss_baseline_mb']:.1f} MB before any stream, {r['rss_end_mb']:.1f} MB at the window's end"
            f"{held}")


def memory_summary(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    return (f"memory: {_setup(args)}"
            + "; ".join(memory_line(r) for r in results))


# -- one fleet, one profile ------------------------------------------------------------------------------------
def measure(profile: str, args: argparse.Namespace) -> dict[str, Any]:
    fleet = measure_fleet(profile, args)
    events = read_events(Path(fleet["run_dir"]))
    requests = select(events, "requests", ["t", "operations", "units"], raw=("operations", "units"))
    persists = select(events, "msg.persist", ["t", "seq_from", "seq_to", "outcome"])
    window = fleet["window"]
    span = counter_span(requests, window["start_ms"], window["end_ms"])
    if span is None:
        raise ClusterError(f"{profile}: fewer than two `requests` events inside the window; lengthen --hold")
    a, b = span
    t_a, t_b = float(requests["t"].iloc[a]), float(requests["t"].iloc[b])
    operations = counter_delta(requests["operations"].iloc[a], requests["operations"].iloc[b])
    units = counter_delta(requests["units"].iloc[a], requests["units"].iloc[b])
    stored = stored_between(persists, t_a, t_b)
    span_s = (t_b - t_a) / 1000.0
    return {
        "profile": profile, "n": args.n, "held": fleet["held"], "run_dir": fleet["run_dir"],
        "span_s": span_s, "stored": stored, "operations": operations, "units": units,
        "cpu_s": fleet["cpu_s"], "window_s": fleet["window_s"], "delays": fleet["delays"],
        "per_message": per_message(operations, units, stored, fleet["cpu_s"], fleet["window_s"], span_s),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out = output_folder(args, "write_cost")
    if args.memory:
        return run_profiles("write_cost_memory", args, args.profiles, measure_fleet, memory_line, memory_summary)
    if args.repeat > 1:
        return repeat_profiles(args)
    return run_profiles("write_cost", args, args.profiles, measure, profile_line, summary)


if __name__ == "__main__":
    sys.exit(main())
