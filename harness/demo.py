"""``make demo``: the crash scenario on both profiles, side by side, with a report.

Runs ``crash`` (SIGKILL the worker holding the most streams) on ``blog`` and ``hardened`` with the same
seed, then prints the two verdicts side by side, a per-connection summary of the killed worker's streams
(owner before and after, time to re-own, sequences emitted vs persisted, gap), and where the reports are.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.checkers.verdict import analyse
from harness.history import read_history
from harness.report import build_report
from harness.scenarios.catalog import SCENARIOS
from harness.scenarios.runner import ScenarioError, ScenarioRun, run_scenario

PROFILES = ("blog", "hardened")


def _fmt_ms(value: Any) -> str:
    return "-" if value is None else f"{value / 1000:.2f} s"


def side_by_side(verdicts: dict[str, dict[str, Any]]) -> str:
    rows = [
        ("valid", lambda v: str(v["valid"])),
        ("duplicate claims", lambda v: str(v["duplicate_claims"])),
        ("lost sequences", lambda v: str(v["lost_sequences"])),
        ("duplicate deliveries", lambda v: str(v["duplicate_deliveries"])),
        ("recovery p50", lambda v: _fmt_ms(v["recovery_ms"].get("p50"))),
        ("recovery max", lambda v: _fmt_ms(v["recovery_ms"].get("max"))),
        ("bound", lambda v: _fmt_ms(v["bound_ms"])),
        ("detect max", lambda v: _fmt_ms(v["phases_ms"].get("detect", {}).get("max"))),
        ("claim max", lambda v: _fmt_ms(v["phases_ms"].get("claim", {}).get("max"))),
        ("caught up max", lambda v: _fmt_ms(v["phases_ms"].get("caught_up", {}).get("max"))),
    ]
    lines = [f"{'':<22}" + "".join(f"{p:>14}" for p in verdicts)]
    lines += [f"{label:<22}" + "".join(f"{get(v):>14}" for v in verdicts.values()) for label, get in rows]
    return "\n".join(lines)


def per_connection(run_dir: Path) -> str:
    analysis = analyse(read_history(run_dir))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.demo", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("runs/demo"), help="folder for both runs (default runs/demo)")
    parser.add_argument("--timescale", type=float, default=0.1, help="time scale (default 0.1: 2 s lease)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the fault schedule (default 1)")
    args = parser.parse_args(argv)
    verdicts = {}
    try:
        for profile in PROFILES:
            run = ScenarioRun(SCENARIOS["crash"], profile=profile, timescale=args.timescale, seed=args.seed,
                              run_dir=args.out / f"crash-{profile}")
            verdicts[profile] = run_scenario(run, progress=lambda line: print(line, flush=True))
            build_report([run.run_dir], None, progress=lambda line: print(line, flush=True))
    except ScenarioError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    comparison = build_report([args.out / f"crash-{p}" for p in PROFILES], args.out / "comparison",
                              progress=lambda line: print(line, flush=True))
    scale = args.timescale
    print(f"\ncrash at time scale {scale} (lease {20 * scale:.1f} s, reconcile {60 * scale:.1f} s; "
          f"published worst case {80 * scale:.1f} s)\n")
    print(side_by_side(verdicts))
    for profile in PROFILES:
        print(f"\n{profile}: the killed worker's streams")
        print(per_connection(args.out / f"crash-{profile}"))
    print(f"\nreports: {args.out}/crash-blog/report.html, {args.out}/crash-hardened/report.html, {comparison}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
