"""Several runs side by side: one line per run, runs grouped by scenario and profile, the profile comparison
(pooled recovery with the blog/hardened ratio) and the aggregate over trials and seeds.

Statistics over pooled runs use the checkers' own ``summarise`` and ``phase_stats`` on the checkers' phase
rows; nothing is recomputed from the raw history."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from harness.checkers.recovery import phase_stats
from harness.checkers.result import Row, summarise
from harness.report.bounds import bounds_of
from harness.report.headline import STATISTICS, judged_rows
from harness.report.model import RunData
from harness.report.text import ms_text, natural, number, seed_text, verdict_word


def runs_table(runs: list[RunData]) -> pd.DataFrame:
    """One line per run."""
    records = []
    for run in runs:
        v, bounds = run.verdict, bounds_of(run)
        records.append({
            "run": run.label, "scenario": run.scenario, "profile": run.profile,
            "seed": "" if run.info.seed is None else seed_text(run.info.seed),
            "timescale": run.info.timescale,
            "verdict": verdict_word(v["valid"]),
            **{f"recovery_{s}_ms": ms_text(v["recovery_ms"].get(s)) for s in STATISTICS},
            "bound_ms": "; ".join(ms_text(ms) for ms in bounds.values()),
            "affected": len(judged_rows(run)), "duplicate_claims": v["duplicate_claims"],
            "lost_sequences": v["lost_sequences"], "duplicate_deliveries": v["duplicate_deliveries"],
            "zombie_writes": v["zombie_writes"],
            "fault_model": "" if v["fault_model"]["within"] is None else (
                "within" if v["fault_model"]["within"] else "OUTSIDE"),
        })
    return pd.DataFrame(records)


def groups(runs: list[RunData]) -> dict[tuple[str, str], list[RunData]]:
    """Runs by (scenario, profile), in first-seen order."""
    found: dict[tuple[str, str], list[RunData]] = {}
    for run in runs:
        found.setdefault((run.scenario, run.profile), []).append(run)
    return found


def pooled_rows(runs: Iterable[RunData]) -> list[Row]:
    return [row for run in runs for row in judged_rows(run)]


def pooled_recovery(runs: Iterable[RunData]) -> dict[str, float | None]:
    return summarise(row["recovery_ms"] for row in pooled_rows(runs))


def pooled_phases(runs: Iterable[RunData]) -> dict[str, dict[str, float | None]]:
    return phase_stats(pooled_rows(runs))


def comparison_table(runs: list[RunData]) -> pd.DataFrame:
    """Per scenario and statistic, the pooled recovery of each profile side by side, and blog/hardened."""
    by_group = groups(runs)
    profiles = list(dict.fromkeys(profile for _, profile in by_group))
    records = []
    for scenario in dict.fromkeys(scenario for scenario, _ in by_group):
        stats = {p: pooled_recovery(by_group[(scenario, p)]) for p in profiles if (scenario, p) in by_group}
        for statistic in STATISTICS:
            record: dict[str, Any] = {"scenario": scenario, "recovery": statistic}
            record.update({f"{p}_ms": ms_text(stats[p][statistic]) if p in stats else "" for p in profiles})
            if "blog" in stats and "hardened" in stats:
                blog, hardened = stats["blog"][statistic], stats["hardened"][statistic]
                record["blog/hardened"] = f"{blog / hardened:.1f}×" if blog is not None and hardened else ""
            records.append(record)
    return pd.DataFrame(records)


def aggregate_table(runs: list[RunData]) -> pd.DataFrame:
    """Per scenario and profile, over its runs (trials, seeds): verdicts, pooled recovery statistics, the
    spread of each run's worst recovery, and the invariant counts summed."""
    records = []
    for (scenario, profile), members in groups(runs).items():
        pooled = pooled_recovery(members)
        worst = [number(run.verdict["recovery_ms"].get("max")) for run in members]
        spread = summarise(worst)
        seeds = sorted({seed_text(run.info.seed) for run in members if run.info.seed is not None},
                       key=natural)
        valid = [run.verdict["valid"] for run in members]
        records.append({
            "scenario": scenario, "profile": profile, "runs": len(members), "seeds": ",".join(seeds),
            "valid/invalid/unknown": f"{valid.count(True)}/{valid.count(False)}/"
                                     f"{sum(1 for v in valid if v not in (True, False))}",
            "affected": len(pooled_rows(members)),
            **{f"recovery_{s}_ms": ms_text(pooled[s]) for s in STATISTICS},
            "run_max_p50_ms": ms_text(spread["p50"]), "run_max_max_ms": ms_text(spread["max"]),
            "duplicate_claims": sum(int(run.verdict["duplicate_claims"]) for run in members),
            "lost_sequences": sum(int(run.verdict["lost_sequences"]) for run in members),
            "zombie_writes": sum(int(run.verdict["zombie_writes"]) for run in members),
        })
    return pd.DataFrame(records)
