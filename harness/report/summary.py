"""The report's words and tables: the headline of a run, the checkers' row tables made readable (times as
seconds since the run started, durations in ms), and for several runs the per-run list, the profile
comparison (with the blog/hardened ratio) and the aggregate over trials and seeds.

Bounds are stated as computed: a run's bound at its own time scale, and beside it the bound its scenario
file computed for the same settings at time scale 1 (``run.start``'s ``bound_scale1_ms``; never the bound
divided by the scale: part of a bound, the work allowance, is not scaled).  A run that did not record the
scale-1 figure gets none.

Statistics over pooled runs use the checkers' own ``summarise`` and ``phase_stats`` on the checkers' phase
rows; nothing is recomputed from the raw history.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from fleet.config import PROFILES, FleetConfig
from fleet.errors import ConfigError
from harness.checkers.events import RunInfo, select, worker_of
from harness.checkers.recovery import PHASES, phase_stats
from harness.checkers.result import Row, summarise
from harness.checkers.verdict import OUTCOMES
from harness.report.model import RunData

MAX_TABLE_ROWS = 100
MAX_RANGE_TEXT = 80
STATISTICS = ("p50", "p95", "max")


# ----------------------------------------------------------------------------------------------- formatting

def verdict_word(valid: Any) -> str:
    if valid is True:
        return "valid"
    if valid is False:
        return "INVALID"
    return "unknown"


def status_of(valid: Any) -> str:
    """A CSS class / badge name for a verdict: pass, fail or unknown."""
    return "pass" if valid is True else ("fail" if valid is False else "unknown")


def number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float | np.integer | np.floating) and value == value:
        return float(value)
    return None


def ms_text(value: Any) -> str:
    """A duration in ms for tables: one decimal, empty when absent."""
    found = number(value)
    return "" if found is None else f"{found:.1f}"


def seconds_text(ms: Any) -> str:
    """A duration in ms as seconds for sentences: ``2.40 s`` (``–`` when absent)."""
    found = number(ms)
    if found is None:
        return "–"
    return f"{found / 1000:.2f} s" if abs(found) < 100_000 else f"{found / 1000:.0f} s"


def seed_text(seed: Any) -> str:
    """A seed as written in run.start (a whole float read back from the history shows as an int)."""
    if seed is None:
        return "?"
    if isinstance(seed, float) and seed.is_integer():
        return str(int(seed))
    return str(seed)


def natural(text: str) -> list[Any]:
    """Sort key: seed 2 before seed 10, worker-2 before worker-10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _short(value: float) -> str:
    """A number of seconds without trailing zeros: 2.2, 22, 0.05."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


def bound_text(ms: float, timescale: float | None, scale_one_ms: float | None = None) -> str:
    """``2.7 s at time scale 0.1 (22.5 s at scale 1)``; the scale-1 figure only when it was computed
    (``scale_one_ms``), and none at scale 1 or without a scale."""
    text = f"{_short(ms / 1000)} s"
    if timescale is None or timescale <= 0:
        return text
    text += f" at time scale {_short(timescale)}"
    if timescale != 1 and scale_one_ms is not None:
        text += f" ({_short(scale_one_ms / 1000)} s at scale 1)"
    return text


def run_config(info: RunInfo, timescale: float | None = None) -> FleetConfig | None:
    """The run's settings (``run.start``'s effective durations divided by its time scale) at ``timescale``
    (default: the run's own), or None when the run does not say enough."""
    if not info.timescale or info.timescale <= 0 or info.profile not in PROFILES:
        return None
    names = {f.name for f in dataclasses.fields(FleetConfig)}
    unscaled: dict[str, Any] = {name: round(ms / info.timescale) for name in info.config
                if name.endswith("_ms") and name in names and (ms := info.duration(name)) is not None}
    try:
        return FleetConfig(profile=info.profile, timescale=timescale or info.timescale,  # type: ignore[arg-type]
                           worker_id="report", **unscaled)
    except (ConfigError, TypeError, ValueError):
        return None


def _labelled(bound: Any) -> dict[str, float]:
    """A recorded bound by label: ``"bound"`` for one number, else one per fault kind."""
    if isinstance(bound, dict):
        return {f"bound ({kind})": float(v) for kind, v in bound.items() if number(v) is not None}
    found = number(bound)
    return {"bound": found} if found is not None else {}


def bounds_of(run: RunData) -> dict[str, float]:
    """The run's recovery bounds by label."""
    return _labelled(run.info.bound_ms)


def bounds_at_scale_one(run: RunData) -> dict[str, float]:
    """The same bounds as the run's scenario file computed them for time scale 1, by label."""
    return _labelled(run.info.bound_scale1_ms)


def bound_texts(run: RunData) -> dict[str, str]:
    """``bounds_of`` as sentences, with the scale-1 figure where the run recorded it."""
    scale_one = bounds_at_scale_one(run)
    return {label: bound_text(ms, run.info.timescale, scale_one.get(label))
            for label, ms in bounds_of(run).items()}


def published_bound_ms(run: RunData) -> float | None:
    """The published worst case, lease + reconcile, from the run's (already scaled) config."""
    lease, reconcile = run.info.duration("lease_ms"), run.info.duration("reconcile_ms")
    return lease + reconcile if lease is not None and reconcile is not None else None


def published_at_scale_one(run: RunData) -> float | None:
    """Lease + reconcile computed for the run's settings at time scale 1."""
    config = run_config(run.info, 1.0)
    return config.scaled_ms(config.lease_ms + config.reconcile_ms) if config is not None else None


def published_bound_text(run: RunData) -> str | None:
    ms = published_bound_ms(run)
    return None if ms is None else bound_text(ms, run.info.timescale, published_at_scale_one(run))


def relative(run: RunData, t: Any) -> str:
    found = number(t)
    return "" if found is None else f"{(found - run.origin_t) / 1000:.3f}"


def _clip(text: Any) -> str:
    found = "" if text is None else str(text)
    return found if len(found) <= MAX_RANGE_TEXT else found[:MAX_RANGE_TEXT - 1] + "…"


# ------------------------------------------------------------------------------------------------- headline

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
    scale = "?" if info.timescale is None else _short(info.timescale)
    named = [(label, info.duration(key)) for label, key in
             (("lease", "lease_ms"), ("heartbeat", "heartbeat_ms"), ("reconcile", "reconcile_ms"))]
    durations = ", ".join(f"{label} {_short(ms / 1000)} s" for label, ms in named if ms is not None)
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


# ------------------------------------------------------------------------------------------- display tables

def capped(frame: pd.DataFrame, what: str, csv: str | None = None) -> tuple[pd.DataFrame, str | None]:
    """At most ``MAX_TABLE_ROWS`` rows, and a note saying what was left out."""
    if len(frame) <= MAX_TABLE_ROWS:
        return frame, None
    where = f"; every row is in {csv}" if csv else ""
    return frame.head(MAX_TABLE_ROWS), f"first {MAX_TABLE_ROWS} of {len(frame)} {what}{where}"


def faults_table(run: RunData) -> pd.DataFrame:
    listed = run.verdict["checkers"]["recovery"].get("faults", [])
    return pd.DataFrame([{
        "fault": f["fault"], "kind": f["kind"], "target": f["target"], "start_s": relative(run, f["start_t"]),
        "stop_s": relative(run, f["stop_t"]), "affected": f["affected"]} for f in listed],
        columns=["fault", "kind", "target", "start_s", "stop_s", "affected"])


REQUEST_COUNTERS = ("coordination", "messages")


def requests_table(run: RunData) -> tuple[pd.DataFrame, str | None]:
    """Per worker, the AWS requests its adapter counted (``requests`` events: cumulative per process, so a
    drop in the total starts a new incarnation and each incarnation's last event counts) and, where the
    events carry ``errors`` ({code: count}), the errors and the error rate; with a note when they do not."""
    frame = select(run.events, "requests", ["src", "worker", *REQUEST_COUNTERS, "errors"],
                   raw=[*REQUEST_COUNTERS, "errors"])
    columns = ["worker", "requests", "errors", "error_rate", "errors_by_code"]
    if frame.empty:
        return pd.DataFrame(columns=columns), None
    frame = frame.assign(worker=worker_of(frame))
    totals: dict[str, list[float]] = {}  # worker -> [requests, errors]
    codes: dict[str, dict[str, float]] = {}
    has_errors = False
    for worker, group in frame.groupby("worker", sort=False):
        last: dict[str, Any] | None = None
        previous = -1.0
        for row in group.to_dict("records"):
            total = sum(number(row[name]) or 0.0 for name in REQUEST_COUNTERS)
            if last is not None and total < previous:
                _add_counts(totals, codes, str(worker), last)  # the process restarted: its last count stands
            last, previous = row, total
        if last is not None:
            _add_counts(totals, codes, str(worker), last)
        has_errors = has_errors or any(isinstance(v, dict) for v in group["errors"])
    records = []
    for worker in sorted(totals, key=natural):
        requests, errors = totals[worker]
        by_code = ", ".join(f"{code} {count:g}" for code, count in sorted(codes[worker].items()))
        records.append({"worker": worker, "requests": f"{requests:g}",
                        "errors": f"{errors:g}" if has_errors else "",
                        "error_rate": f"{errors / requests:.1%}" if has_errors and requests else "",
                        "errors_by_code": by_code})
    note = None if has_errors else ("the workers' requests events carry no errors field: error counts and "
                                    "rates are not shown")
    return pd.DataFrame(records, columns=columns), note


def _add_counts(totals: dict[str, list[float]], codes: dict[str, dict[str, float]], worker: str,
                row: dict[str, Any]) -> None:
    counts = totals.setdefault(worker, [0.0, 0.0])
    counts[0] += sum(number(row[name]) or 0.0 for name in REQUEST_COUNTERS)
    errors = row["errors"] if isinstance(row["errors"], dict) else {}
    mine = codes.setdefault(worker, {})
    for code, count in errors.items():
        found = number(count) or 0.0
        counts[1] += found
        mine[str(code)] = mine.get(str(code), 0.0) + found


def phases_table(run: RunData) -> pd.DataFrame:
    """Affected connections, slowest first: times of each phase from t0 (ms), gap, recovery, bound."""
    rows = sorted(run.analysis.phases, key=lambda r: -(number(r["recovery_ms"]) or float("inf")))
    records = []
    for r in rows:
        record: dict[str, Any] = {"fault": f"{r['fault']} {r['fault_kind']}", "pk": r["pk"],
                                  "old → new": f"{r['old_worker']} → {r['new_worker']}",
                                  "t0_s": relative(run, r["t0"])}
        record.update({f"{p}_ms": ms_text(r[f"{p}_ms"]) for p in PHASES})
        within = r["within_bound"]
        record.update({"gap_ms": ms_text(r["gap_ms"]), "recovery_ms": ms_text(r["recovery_ms"]),
                       "bound_ms": ms_text(r["bound_ms"]),
                       "within_bound": "" if within is None else ("yes" if within else "NO"),
                       "notes": ", ".join([*(k.replace("_", " ") for k in ("stopped", "reconnect_in_place")
                                              if r[k]), *([] if r["disrupted"] else ["not disrupted"])])})
        records.append(record)
    columns = ["fault", "pk", "old → new", "t0_s", *(f"{p}_ms" for p in PHASES), "gap_ms", "recovery_ms",
               "bound_ms", "within_bound", "notes"]
    return pd.DataFrame(records, columns=columns)


def episodes_table(run: RunData) -> pd.DataFrame:
    rows = run.analysis.table("episodes")
    return pd.DataFrame([{
        "pk": r["pk"], "workers": f"{r['worker_a']} + {r['worker_b']}", "start_s": relative(run, r["start"]),
        "end_s": relative(run, r["end"]), "overlap_ms": ms_text(r["overlap_ms"]), "writes": r["writes"],
        "certain": "yes" if r["certain"] else "possible"} for r in rows],
        columns=["pk", "workers", "start_s", "end_s", "overlap_ms", "writes", "certain"])


def overlapping_claims_table(run: RunData) -> pd.DataFrame:
    """The ownership intervals (both sources) and writes that overlapped another worker's."""
    rows = [r for r in run.analysis.claims if r["overlap"]]
    return pd.DataFrame([{
        "source": r["source"], "pk": r["pk"], "worker": r["worker"], "session": r["session"] or "",
        "start_s": relative(run, r["start"]), "end_s": relative(run, r["end"]),
        "duration_ms": ms_text(r["duration_ms"])} for r in rows],
        columns=["source", "pk", "worker", "session", "start_s", "end_s", "duration_ms"])


def lease_overlaps_table(run: RunData) -> pd.DataFrame:
    rows = run.analysis.table("lease_overlaps")
    return pd.DataFrame([{
        "pk": r["pk"], "workers": f"{r['worker_a']} + {r['worker_b']}", "start_s": relative(run, r["start"]),
        "end_s": relative(run, r["end"]), "duration_ms": ms_text(r["duration_ms"])} for r in rows],
        columns=["pk", "workers", "start_s", "end_s", "duration_ms"])


def zombies_table(run: RunData) -> pd.DataFrame:
    rows = run.analysis.table("zombies")
    return pd.DataFrame([{
        "pk": r["pk"], "worker": r["worker"], "session": r["session"], "cause": r["cause"],
        "start_s": relative(run, r["start"]), "end_s": relative(run, r["end"]),
        "duration_ms": ms_text(r["duration_ms"]), "overlaps_other": "yes" if r["overlaps_other"] else "no"}
        for r in rows], columns=["pk", "worker", "session", "cause", "start_s", "end_s", "duration_ms",
                                 "overlaps_other"])


def zombie_writes_table(run: RunData) -> pd.DataFrame:
    """The zombie-write findings (I6), certain and possible, in the checker's order (by pk and seq)."""
    rows = run.analysis.table("zombie_writes")
    return pd.DataFrame([{
        "pk": r["pk"], "kind": r["kind"], "seqs": _seq_range(r["seq_from"], r["seq_to"]), "writer": r["writer"],
        "epoch": "" if r["epoch"] is None else r["epoch"], "rule": str(r["rule"]).replace("_", " "),
        "certain": "yes" if r["certain"] else "possible", "sent_s": relative(run, r["sent_t"]),
        "superseded_s": relative(run, r["superseded_t"]), "evidence": r["evidence"]} for r in rows],
        columns=["pk", "kind", "seqs", "writer", "epoch", "rule", "certain", "sent_s", "superseded_s", "evidence"])


def _seq_range(seq_from: Any, seq_to: Any) -> str:
    if seq_from is None:
        return ""
    return str(seq_from) if seq_to in (None, seq_from) else f"{seq_from}-{seq_to}"


def outcomes_table(run: RunData) -> pd.DataFrame:
    """Per event type with an outcome, how many events had each (failing types first)."""
    outcomes: dict[str, dict[str, int]] = run.verdict["outcomes"]
    others = sorted({name for counts in outcomes.values() for name in counts} - set(OUTCOMES))
    columns = ["event", *OUTCOMES, *others]
    rows = [{"event": kind, **{name: counts.get(name, 0) for name in columns[1:]}}
            for kind, counts in sorted(outcomes.items(), key=lambda item: (-item[1].get("fail", 0), item[0]))]
    return pd.DataFrame(rows, columns=columns)


def sequences_table(run: RunData) -> pd.DataFrame:
    """Per connection, the streams with something to say first (lost, duplicated, possibly persisted)."""
    rows = sorted(run.analysis.sequences,
                  key=lambda r: (-(r["lost"] + r["duplicated"] + r["possibly_persisted"]), str(r["pk"])))
    columns = ["pk", "emitted", "persisted", "lost", "lost_ranges", "duplicated", "duplicated_ranges",
               "unseen_at_end", "possibly_persisted", "out_of_order", "head_seq"]
    return pd.DataFrame([{c: (_clip(r[c]) if c.endswith("_ranges") else ("" if r[c] is None else r[c]))
                          for c in columns} for r in rows], columns=columns)


def stops_table(run: RunData) -> pd.DataFrame:
    rows = run.analysis.table("stops")
    return pd.DataFrame([{
        "pk": r["pk"], "stop_s": relative(run, r["stop_t"]), "sessions": r["sessions"],
        "closed_s": relative(run, r["closed_t"]), "latency_ms": ms_text(r["latency_ms"]),
        "bound_ms": ms_text(r["bound_ms"]),
        "within_bound": "" if r["within_bound"] is None else ("yes" if r["within_bound"] else "NO")}
        for r in rows],
        columns=["pk", "stop_s", "sessions", "closed_s", "latency_ms", "bound_ms", "within_bound"])


# ------------------------------------------------------------------------------------------- several runs

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
