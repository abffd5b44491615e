"""One run's headline: the one-screen summary (verdict, recovery against its bounds, the invariants'
counts, the fault model, outcomes) and the checker table, one row per checker with the numbers behind it."""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.checkers.events import select
from harness.checkers.result import Row
from harness.checkers.verdict import OUTCOMES
from harness.report.bounds import bound_texts, published_bound_text
from harness.report.model import RunData
from harness.report.text import ms_text, seconds_text, seed_text, short, verdict_word

STATISTICS = ("p50", "p95", "max")


def judged_rows(run: RunData) -> list[Row]:
    """Phase rows that count for statistics (the checkers leave out connections STOPPED mid-recovery)."""
    return [row for row in run.analysis.phases if not row["stopped"]]


def headline(run: RunData) -> list[tuple[str, str]]:
    """The one-screen summary of a run, as (label, text) lines."""
    verdict, info = run.verdict, run.info
    failed = [name for name, check in verdict["checkers"].items() if check["valid"] is not True]
    verdict_line = verdict_word(verdict["valid"])
    if failed:
        verdict_line += " (" + ", ".join(f"{name}: {verdict_word(verdict['checkers'][name]['valid'])}"
                                         for name in failed) + ")"
    if verdict["fault_model"]["flag"]:
        verdict_line += f", under faults {verdict['fault_model']['flag']}"
    recovery = verdict["recovery_ms"]
    rows = judged_rows(run)
    recovery_line = " · ".join(f"{s} {seconds_text(recovery.get(s))}" for s in STATISTICS)
    bounds = bound_texts(run)
    if bounds:
        judged = [r for r in rows if r["within_bound"] is not None]
        over = sum(1 for r in judged if not r["within_bound"])
        recovery_line += " against " + "; ".join(f"{label} {text}" for label, text in bounds.items())
        recovery_line += f": {over} of {len(judged)} over the bound"
    else:
        recovery_line += " (the run sets no bound)"
    unrecovered = sum(1 for r in rows if not r["recovered"])
    recovery_line += f"; {len(rows)} affected, {unrecovered} never recovered"
    claims = verdict["checkers"]["duplicate_claims"]
    sequences = verdict["checkers"]["sequences"]
    lines = [
        ("Scenario", f"{info.scenario or '?'}{_load(run)} (seed {seed_text(info.seed)})"),
        ("Profile", info.profile or "?"),
        ("Time scale", _timescale_line(run)),
        ("Verdict", verdict_line),
        ("Recovery", recovery_line),
        ("Duplicate claims", f"{verdict['duplicate_claims']} ({ms_text(verdict['duplicate_overlap_ms'])} ms "
                             f"overlap; {claims.get('possible_claims', 0)} possible; zombie time "
                             f"{ms_text(claims.get('zombie_ms'))} ms)"),
        ("Lost sequences", f"{verdict['lost_sequences']} (duplicate deliveries "
                           f"{verdict['duplicate_deliveries']}; {sequences.get('unseen_at_end', 0)} unseen "
                           f"at the end; {sequences.get('possibly_persisted', 0)} possibly persisted)"),
        ("Zombie writes", zombie_writes_text(verdict["checkers"]["zombie_writes"])),
        ("Fault model", fault_model_text(verdict["fault_model"])),
        ("Outcomes", outcomes_text(verdict["outcomes"])),
        ("Run", f"{info.connections if info.connections is not None else '?'} connections, "
                f"{info.workers if info.workers is not None else '?'} workers, "
                f"{len(run.events):,} events, {(info.end_t - run.origin_t) / 1000:.1f} s; "
                f"{run.run_dir}"),
    ]
    published = published_bound_text(run)
    if published is not None:
        lines.insert(5, ("Published bound", f"lease + reconcile = {published}"))
    saved = run.saved_verdict
    if saved is not None and saved.get("valid") != verdict["valid"]:
        lines.append(("Note", f"verdict.json says {verdict_word(saved.get('valid'))}; this report re-ran the "
                              f"checkers on the history and found {verdict_word(verdict['valid'])}"))
    return lines


def zombie_writes_text(check: dict[str, Any]) -> str:
    """The I6 line: certain zombie writes, possible ones, and what was judged."""
    rules = ", ".join(f"{rule.replace('_', ' ')} {count}" for rule, count in check.get("by_rule", {}).items()
                      if count)
    return (f"{check.get('zombie_writes')}{f' ({rules})' if rules else ''}; {check.get('possible')} possible; "
            f"{check.get('judged_items')} stored items judged, {check.get('unexplained_epochs')} with an epoch "
            "no acquire was seen granting")


def fault_model_text(model: dict[str, Any]) -> str:
    """What the run's schedule was, against the fault model the design promises to survive."""
    stated, within = model.get("stated"), model.get("within")
    if stated is None:
        return "not stated (the run recorded no fault model)"
    if within:
        return "within the model: every fault injected is one the design promises to survive"
    why = str(stated).partition(":")[2].strip() or str(stated)
    text = f"OUTSIDE the fault model ({why}): the design does not promise to survive this run's faults"
    if model.get("flag"):
        text += "; the run is invalid under them (reported, not hidden)"
    return text


def outcomes_text(outcomes: dict[str, dict[str, int]]) -> str:
    """Events with an outcome, summed over every event type; the failing types named."""
    if not outcomes:
        return "no event carries an outcome"
    totals = {name: sum(counts.get(name, 0) for counts in outcomes.values()) for name in OUTCOMES}
    failing = sorted(((counts.get("fail", 0), kind) for kind, counts in outcomes.items() if counts.get("fail")),
                     reverse=True)
    text = " · ".join(f"{name} {totals[name]:,}" for name in OUTCOMES)
    if failing:
        text += " (fail: " + ", ".join(f"{kind} {count:,}" for count, kind in failing) + ")"
    return text


def _load(run: RunData) -> str:
    """``, 5 msg/s per stream, ...``: the load ``run.start`` names (a ``wsfleet up`` run's), or nothing."""
    load = select(run.events, "run.start", ["load"], raw=["load"])["load"]
    return f", {load.iloc[0]}" if len(load) and isinstance(load.iloc[0], str) else ""


def _timescale_line(run: RunData) -> str:
    info = run.info
    scale = "?" if info.timescale is None else short(info.timescale)
    named = [(label, info.duration(key)) for label, key in
             (("lease", "lease_ms"), ("heartbeat", "heartbeat_ms"), ("reconcile", "reconcile_ms"))]
    durations = ", ".join(f"{label} {short(ms / 1000)} s" for label, ms in named if ms is not None)
    return f"{scale}" + (f" (every duration scaled: {durations})" if durations else "")


def checker_table(run: RunData) -> pd.DataFrame:
    """One row per checker: its verdict and the numbers behind it."""
    rows = []
    for name, check in run.verdict["checkers"].items():
        rows.append({"checker": name, "valid": verdict_word(check["valid"]),
                     "details": _check_summary(name, check)})
    return pd.DataFrame(rows, columns=["checker", "valid", "details"])


def _check_summary(name: str, check: dict[str, Any]) -> str:
    if name == "duplicate_claims":
        return (f"{check.get('duplicate_claims')} claims, {ms_text(check.get('duplicate_overlap_ms'))} ms "
                f"overlap, {check.get('possible_claims')} possible; {check.get('sessions')} sessions; "
                f"lease double ownership {check.get('lease_overlaps')} "
                f"({ms_text(check.get('lease_overlap_ms'))} ms)")
    if name == "sequences":
        return (f"{check.get('reason')}; emitted {check.get('emitted')}, persisted {check.get('persisted')}, "
                f"lost {check.get('lost_sequences')}, duplicated {check.get('duplicate_deliveries')} "
                f"(from {check.get('source')})")
    if name == "recovery":
        return (f"{check.get('affected')} affected, {check.get('recovered')} recovered, "
                f"{check.get('unrecovered')} never, {check.get('stopped')} stopped")
    if name == "bounds":
        if not check.get("applies"):
            return "no bound set"
        return (f"{check.get('exceeded')} of {check.get('judged')} over the bound; max recovery "
                f"{ms_text(check.get('max_recovery_ms'))} ms")
    if name == "stop":
        return (f"{check.get('stops')} stops, {check.get('late')} late, "
                f"bound {ms_text(check.get('bound_ms'))} ms")
    if name == "zombie_writes":
        return zombie_writes_text(check)
    return ", ".join(f"{k}={v}" for k, v in check.items() if k != "valid" and not isinstance(v, list | dict))
