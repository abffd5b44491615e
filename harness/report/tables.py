"""One run's row tables for display: the checkers' rows made readable (times as seconds since the run
started, durations in ms), capped at ``MAX_TABLE_ROWS`` with a note naming the CSV that holds every row;
faults, AWS requests and errors per worker, recovery phases, claims, lease overlaps, zombies, zombie writes,
outcomes, sequences and STOPs."""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.checkers.events import select, worker_of
from harness.checkers.recovery import PHASES
from harness.checkers.verdict import OUTCOMES
from harness.report.model import RunData
from harness.report.text import ms_text, natural, number

MAX_TABLE_ROWS = 100


MAX_RANGE_TEXT = 80


def relative(run: RunData, t: Any) -> str:
    found = number(t)
    return "" if found is None else f"{(found - run.origin_t) / 1000:.3f}"


def _clip(text: Any) -> str:
    found = "" if text is None else str(text)
    return found if len(found) <= MAX_RANGE_TEXT else found[:MAX_RANGE_TEXT - 1] + "…"


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
