"""``make demo``: the crash scenario on both profiles, side by side with the worst case each design allows.

Runs ``crash`` (SIGKILL the worker holding the most streams) on ``blog`` and ``hardened`` for each seed of
``--seeds`` (default one seed: two runs of 40 to 60 s each), builds a report per run and a comparison, and
prints what a user must see: the recovery measured, its spread over the seeds, and beside it the worst case
of each design, computed by the scenario catalog at the run's time scale and at scale 1.  One seed can be
lucky: ``blog`` recovers when its next reconcile falls, anywhere from the lease expiry to lease + reconcile
(the published worst case), so a single measurement says little about it; ``hardened`` is bounded by its
lease plus a work allowance.  Then the verdicts and a per-connection summary of the killed worker's streams.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from fleet.config import FleetConfig
from harness.checkers.events import read_events
from harness.checkers.verdict import analyse
from harness.cli_args import timescale_arg
from harness.report import build_report
from harness.run_folders import add_output_arguments, output_folder
from harness.scenarios.catalog import SCENARIOS
from harness.scenarios.runner import ScenarioError, ScenarioRun, run_scenario

PROFILES = ("blog", "hardened")
WORST_CASE_WHY = {
    "blog": "lease + reconcile (published): a takeover waits for the next reconcile after the lease expires",
    "hardened": "its bound: 1.1 × lease + a 1 s work allowance (not scaled); "
                "detection is paced by expiry",
}

Verdicts = dict[str, dict[int, dict[str, Any]]]  # profile -> seed -> verdict


def _fmt_ms(value: Any) -> str:
    return "-" if value is None else f"{value / 1000:.2f} s"


def worst_case_ms(profile: str, timescale: float) -> float:
    """The longest crash recovery the design allows, as the crash scenario file computes it."""
    config = FleetConfig(profile=profile, timescale=timescale, worker_id="demo")  # type: ignore[arg-type]
    spec = SCENARIOS["crash"]
    return spec.expand(profile, spec.seed, config, spec.workers).bound_ms["kill"]


def _spread(values: list[float]) -> str:
    if len(values) == 1:
        return _fmt_ms(values[0])
    return (f"{_fmt_ms(min(values))} – {_fmt_ms(max(values))} "
            f"(median {_fmt_ms(statistics.median(values))})")


def recovery_table(verdicts: Verdicts, timescale: float) -> str:
    """Measured recovery beside each design's worst case, one column per profile."""
    seeds = sorted({seed for by_seed in verdicts.values() for seed in by_seed})
    rows: list[tuple[str, list[str]]] = []
    for seed in seeds:
        rows.append((f"max recovery, seed {seed}",
                     [_fmt_ms(verdicts[p].get(seed, {}).get("recovery_ms", {}).get("max")) for p in verdicts]))
    if len(seeds) > 1:
        rows.append((f"spread over {len(seeds)} seeds", [
            _spread([v["recovery_ms"]["max"] for v in verdicts[p].values()
                     if v["recovery_ms"].get("max") is not None]) if verdicts[p] else "-" for p in verdicts]))
    rows.append((f"worst case at time scale {timescale:g}", [_fmt_ms(worst_case_ms(p, timescale)) for p in verdicts]))
    rows.append(("worst case at time scale 1", [_fmt_ms(worst_case_ms(p, 1.0)) for p in verdicts]))
    width = max(len(text) for _, cells in rows for text in [*cells, *verdicts]) + 3
    lines = [(f"{'':<34}" + "".join(f"{p:<{width}}" for p in verdicts)).rstrip()]
    lines += [(f"{label:<34}" + "".join(f"{cell:<{width}}" for cell in cells)).rstrip() for label, cells in rows]
    lines += ["", "worst case:"] + [f"  {p}: {WORST_CASE_WHY.get(p, 'the scenario bound')}" for p in verdicts]
    return "\n".join(lines)


def verdict_table(verdicts: Verdicts) -> str:
    """The invariants per profile, summed over seeds (valid only when every run was)."""
    def total(profile: str, key: str) -> str:
        return str(sum(int(v[key]) for v in verdicts[profile].values()))

    rows = [
        ("valid", lambda p: str(all(v["valid"] is True for v in verdicts[p].values()))),
        ("duplicate claims", lambda p: total(p, "duplicate_claims")),
        ("lost sequences", lambda p: total(p, "lost_sequences")),
        ("duplicate deliveries", lambda p: total(p, "duplicate_deliveries")),
    ]
    lines = [f"{'':<34}" + "".join(f"{p:>14}" for p in verdicts)]
    lines += [f"{label:<34}" + "".join(f"{get(p):>14}" for p in verdicts) for label, get in rows]
    return "\n".join(lines)


def per_connection(run_dir: Path) -> str:
    analysis = analyse(read_events(run_dir))
    sequences = {row["pk"]: row for row in analysis.sequences}
    lines = [f"{'connection':<12} {'owner before':<13} {'owner after':<13} {'re-owned':>9} {'gap':>8} "
             f"{'emitted':>8} {'persisted':>9} {'lost':>5}"]
    for row in sorted(analysis.phases, key=lambda r: r["pk"]):
        seq = sequences.get(row["pk"], {})
        lines.append(
            f"{row['pk'].removeprefix('CONN#'):<12} {row['old_worker'] or '-':<13} {row['new_worker'] or '-':<13} "
            f"{_fmt_ms(row.get('claim_ms')):>9} {_fmt_ms(row.get('gap_ms')):>8} {seq.get('emitted', '-'):>8} "
            f"{seq.get('persisted', '-'):>9} {seq.get('lost', '-'):>5}"
        )
    return "\n".join(lines)


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seeds like 1,2,3, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"expected distinct seeds like 1,2,3, got {text!r}")
    return seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_arguments(parser, "runs/demo", "the runs and their reports")
    parser.add_argument("--timescale", type=timescale_arg, default=0.1, help="time scale (default 0.1: 2 s lease)")
    parser.add_argument("--seeds", type=_seeds, default=[1],
                        help="comma-separated seeds of the fault schedule (default 1; each adds ~80 s)")
    args = parser.parse_args(argv)
    args.out = output_folder(args, "demo")
    verdicts: Verdicts = {profile: {} for profile in PROFILES}
    run_dirs: list[Path] = []
    try:
        for seed in args.seeds:
            for profile in PROFILES:
                run = ScenarioRun(SCENARIOS["crash"], profile=profile, timescale=args.timescale, seed=seed,
                                  run_dir=args.out / f"crash-{profile}-seed{seed}")
                verdicts[profile][seed] = run_scenario(run, progress=lambda line: print(line, flush=True))
                build_report([run.run_dir], None, progress=lambda line: print(line, flush=True))
                run_dirs.append(run.run_dir)
    except ScenarioError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    comparison = build_report(run_dirs, args.out / "comparison", progress=lambda line: print(line, flush=True))
    config = FleetConfig(timescale=args.timescale, worker_id="demo")
    print(f"\ncrash (SIGKILL the busiest worker) at time scale {args.timescale:g} "
          f"(lease {_fmt_ms(config.scaled_ms(config.lease_ms))}, "
          f"reconcile {_fmt_ms(config.scaled_ms(config.reconcile_ms))})\n")
    print(recovery_table(verdicts, args.timescale))
    if len(args.seeds) == 1:
        print("\nOne seed is one draw: blog's recovery depends on where its next reconcile falls. "
              "For the spread: .venv/bin/python -m harness.demo --seeds 1,2,3 (about 80 s per seed).")
    print()
    print(verdict_table(verdicts))
    for profile in PROFILES:
        print(f"\n{profile}, seed {args.seeds[0]}: the killed worker's streams")
        print(per_connection(args.out / f"crash-{profile}-seed{args.seeds[0]}"))
    print("\nreports: " + ", ".join(f"{path}/report.html" for path in run_dirs) + f", {comparison}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
