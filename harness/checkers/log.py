"""I6 and I2/I3 on the fenced batch log (DESIGN §12), judged from the stored log as the final scan found it
(``final.log``: each stream's entries in batch order; ``final.persisted``: the items that could not be read)
and the history's handovers, never from fleet code.

A *holder* is one take-up of a stream: a consumer (``worker@gen``) at an epoch, and its take-up number
(``take``, when the log records it: one incarnation may take a stream up twice at one epoch, an adoption
after a release whose answer was lost, and the later take fences the earlier).  Holders are ordered by
(epoch, take).  With a standby region the log's keys are in segments, one region's each (``batch`` =
``(segment << 32) | n``, ``harness.message_log.log_position``): a region's take-up after another region's
opens a new segment, and the rules below hold within each segment (two regions' epochs are not ordered: the
region gate parts them), with the segments' own rules where they meet.  Rules, each a finding per log entry:

- **epoch_decrease** (I6): along a segment of a stream's log, an entry whose epoch is below an earlier entry's.
- **after_mark** (I6): after a holder's takeover mark, an entry of an earlier holder: one that appeared before
  that mark, or of a lower (epoch, take).  The earlier holder's write was accepted after the later one took over.
- **unmarked** (I6): an entry of a new holder (none before it) that is a batch, not a mark: the new owner
  stored before marking its takeover; and a segment after the first that does not open with a mark.
- **misplaced_mark**: a mark whose seq_to is not the last seq stored before it (the new owner resumes from
  it: above, sequences are skipped; below, stored twice).  The log's first entry sets where it starts (a
  first mark may resume after a checkpoint).  A mark opening a segment may be below it: the other region's
  batches that had not reached the new region when it took the stream up are stored before it in key order.
- **hole**: a batch number missing below a stored one within its segment (a writer puts batch n only after
  n - 1 exists; a segment starts at 1).
- **unreadable**: a stored item neither layout explains (``final.persisted``'s ``unreadable``).
- **duplicate** (I3): a seq stored by more than one batch of one segment, named with the batches.  A seq
  stored once in each of several segments is no finding: a region activated before the other's last batches
  reached it resumed after the tail it could read and stored them again (nothing acknowledged is lost, and
  each region's copy is its own, not one write applied twice); ``across_segments`` counts such seqs.
- **gap** (I2): seqs emitted while the stream was STARTED and never stored (the sequences checker's lost
  ranges, ``harness.checkers.sequences``), placed in the log between the batches around them.

``zombie_entries`` counts the distinct entries (pk, batch) with a finding of the first three rules.
Supersession is dated at every handover (``events.handovers``: acquire, transfer, burial), and, for a take
the log numbers, at every later take's mark at the same epoch (its ``log.mark`` ok, which carries ``take``:
a re-adoption moves no epoch, so no handover dates it): each finding of a holder gives when its take was first
superseded (``superseded_t``) beside the entry's ``written_ms``.
A history without ``final.log`` has no log to judge: valid, with ``logs`` 0 (the verdict runs this checker
only where ``applies``: a log, or an unreadable item, is there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.checkers.events import Events, handovers, holder_of, select
from harness.checkers.result import CheckResult, Row
from harness.message_log import log_position

LOG_COLUMNS = ["pk", "rule", "batch", "seq_from", "seq_to", "holder", "epoch", "written_ms", "superseded_t",
               "evidence"]
ZOMBIE_RULES = ("epoch_decrease", "after_mark", "unmarked")
RULES = (*ZOMBIE_RULES, "misplaced_mark", "hole", "unreadable", "duplicate", "gap")
DETAIL_ROWS = 50


@dataclass(frozen=True)
class _Entry:
    batch: int
    kind: str
    epoch: int
    take: int  # -1 when the log does not record it
    holder: str  # worker@gen, or the worker alone
    seq_from: int
    seq_to: int
    written_ms: float | None


def logged_pks(history: Events) -> set[str]:
    """The streams whose stored messages form a batch log (they have a ``final.log``)."""
    return {str(pk) for pk in select(history, "final.log", ["pk"])["pk"].dropna()}


def applies(history: Events) -> bool:
    """Whether there is a log to judge, or a stored item neither layout explains (which fails it)."""
    unreadable = select(history, "final.persisted", ["unreadable"], raw=["unreadable"])["unreadable"]
    return bool(logged_pks(history)) or any(isinstance(u, list) and u for u in unreadable)


def check_log(history: Events, lost_ranges: dict[str, list[tuple[int, int]]] | None = None) -> CheckResult:
    """``lost_ranges``: per pk, the seq ranges emitted while STARTED and never stored (the sequences checker's
    ``lost_ranges`` rows, parsed by ``parse_ranges``); None: no gap is judged."""
    logs = select(history, "final.log", ["pk", "entries"], raw=["entries"]).dropna(subset=["pk"])
    persisted = select(history, "final.persisted", ["pk", "unreadable"], raw=["unreadable"]).dropna(subset=["pk"])
    superseded = _Supersession(history)
    findings: list[Row] = []
    across_segments = 0
    for pk, raw in zip(logs["pk"], logs["entries"], strict=True):
        entries = [_entry(e) for e in raw if isinstance(e, dict)] if isinstance(raw, list) else []
        found = [e for e in entries if e is not None]
        findings.extend(_structure(str(pk), found, superseded))
        duplicates, across = _duplicates(str(pk), found)
        findings.extend(duplicates)
        across_segments += across
        findings.extend(_gaps(str(pk), found, (lost_ranges or {}).get(str(pk), [])))
    for pk, unreadable in zip(persisted["pk"], persisted["unreadable"], strict=True):
        for item in unreadable if isinstance(unreadable, list) else []:
            findings.append(_row(pk, "unreadable", item.get("sk"), None, None, None, None, None, None,
                                 f"stored item sk {item.get('sk')}: {item.get('problem')}"))
    findings.sort(key=lambda row: (str(row["pk"]), row["batch"] if row["batch"] is not None else -1))
    by_rule = {rule: sum(1 for row in findings if row["rule"] == rule) for rule in RULES}
    details: dict[str, Any] = {
        "logs": len(logs),
        "entries": int(sum(len(raw) for raw in logs["entries"] if isinstance(raw, list))),
        "zombie_entries": len({(row["pk"], row["batch"]) for row in findings if row["rule"] in ZOMBIE_RULES}),
        "by_rule": by_rule,
        "across_segments": across_segments,
        "examples": findings[:DETAIL_ROWS],
    }
    return CheckResult("log", not findings, details, {"log": findings})


def parse_ranges(text: Any) -> list[tuple[int, int]]:
    """``"3-5,9"`` (the sequences checker's ranges) as [(3, 5), (9, 9)]."""
    ranges: list[tuple[int, int]] = []
    for part in str(text or "").split(","):
        if part:
            low, _, high = part.partition("-")
            ranges.append((int(low), int(high or low)))
    return ranges


class _Supersession:
    """When each take of a pk was first superseded: the first handover past its epoch (acquire, transfer,
    burial), or the first mark stored by a later take at its epoch."""

    def __init__(self, history: Events) -> None:
        self.by_pk = {str(pk): (group["epoch"].to_numpy(dtype="float64"), group["t"].to_numpy(dtype="float64"))
                      for pk, group in handovers(history).groupby("pk", sort=False)}
        marks = select(history, "log.mark", ["t", "pk", "epoch", "take", "outcome"])
        marks = marks.loc[(marks["outcome"] == "ok") & marks["pk"].notna() & marks["take"].notna()]
        self.marks = {str(pk): (group["epoch"].to_numpy(dtype="float64"), group["take"].to_numpy(dtype="float64"),
                                group["t"].to_numpy(dtype="float64"))
                      for pk, group in marks.groupby("pk", sort=False)}

    def at(self, pk: str, epoch: int, take: int) -> float | None:
        epochs, times = self.by_pk.get(pk, (np.empty(0), np.empty(0)))
        past = times[epochs > epoch]
        if take >= 0:  # the log numbers this take: a later take's mark at its epoch supersedes it too
            mark_epochs, takes, mark_times = self.marks.get(pk, (np.empty(0), np.empty(0), np.empty(0)))
            past = np.concatenate([past, mark_times[(mark_epochs == epoch) & (takes > take)]])
        return float(past.min()) if past.size else None


def _entry(raw: dict[str, Any]) -> _Entry | None:
    numbers = [raw.get(name) for name in ("batch", "epoch", "seq_from", "seq_to")]
    if not all(isinstance(n, int) for n in numbers) or raw.get("kind") not in ("batch", "mark"):
        return None  # decoded by the reader: what it could not read is in final.persisted's unreadable
    batch, epoch, seq_from, seq_to = (int(n) for n in numbers)  # type: ignore[arg-type]
    holder = holder_of(raw)
    written, take = raw.get("written_ms"), raw.get("take")
    return _Entry(batch, str(raw["kind"]), epoch, take if isinstance(take, int) else -1, holder, seq_from, seq_to,
                  float(written) if isinstance(written, int | float) else None)


def _row(pk: Any, rule: str, batch: Any, seq_from: Any, seq_to: Any, holder: Any, epoch: Any, written: Any,
         superseded: Any, evidence: str) -> Row:
    return dict(zip(LOG_COLUMNS, (pk, rule, batch, seq_from, seq_to, holder, epoch, written, superseded, evidence),
                    strict=True))


def _structure(pk: str, entries: list[_Entry], superseded: _Supersession) -> list[Row]:
    """epoch_decrease, after_mark, unmarked, misplaced_mark and hole along one log."""
    found: list[Row] = []

    def finding(rule: str, entry: _Entry, evidence: str) -> None:
        found.append(_row(pk, rule, entry.batch, entry.seq_from, entry.seq_to, entry.holder, entry.epoch,
                          entry.written_ms, superseded.at(pk, entry.epoch, entry.take), evidence))

    highest: _Entry | None = None
    mark: _Entry | None = None  # the latest mark
    current: tuple[str, int, int] | None = None  # the holder the log belongs to now: consumer, epoch, take
    seen: set[tuple[str, int, int]] = set()
    tail: int | None = None  # the last seq stored so far
    segment: int | None = None  # the segment of the entry before
    expected = 1
    for entry in entries:
        holder = (entry.holder, entry.epoch, entry.take)
        at, number = log_position(entry.batch)
        opens = segment is not None and at != segment  # the first entry of a segment after the first
        if opens:
            highest, mark, current, seen, expected = None, None, None, set(), 1
            if entry.kind != "mark":
                finding("unmarked", entry, f"{entry.holder} (epoch {entry.epoch}) opened segment {at} with a "
                                           "batch, not a takeover mark")
        segment = at
        if number != expected:
            finding("hole", entry, f"batch {entry.batch} (number {number} of segment {at}) follows number "
                                   f"{expected - 1}: numbers {expected}..{number - 1} are missing")
        expected = number + 1
        if highest is not None and entry.epoch < highest.epoch:
            finding("epoch_decrease", entry, f"epoch {entry.epoch} after batch {highest.batch}'s epoch "
                                             f"{highest.epoch}")
        earlier = current is not None and holder != current and (holder in seen or holder[1:] < current[1:])
        if earlier and mark is not None:
            finding("after_mark", entry, f"{entry.holder} (epoch {entry.epoch}) stored this {entry.kind} after "
                                         f"{mark.holder}'s takeover mark at batch {mark.batch} (epoch {mark.epoch})")
        if current is not None and holder != current and not earlier and entry.kind != "mark":
            finding("unmarked", entry, f"{entry.holder} (epoch {entry.epoch}) stored a batch without a takeover "
                                       f"mark after {current[0]} (epoch {current[1]})")
        if entry.kind == "mark" and tail is not None and (entry.seq_to > tail if opens else entry.seq_to != tail):
            finding("misplaced_mark", entry, f"the mark says the log ends at seq {entry.seq_to}; it ends at seq "
                                             f"{tail}")
        if not earlier:  # a new holder (marked or not); an earlier one's entry changes nothing
            current = holder
            mark = entry if entry.kind == "mark" else mark
        seen.add(holder)
        tail = entry.seq_to if tail is None else max(tail, entry.seq_to) if entry.kind == "batch" else tail
        highest = entry if highest is None or entry.epoch > highest.epoch else highest
    return found


def _duplicates(pk: str, entries: list[_Entry]) -> tuple[list[Row], int]:
    """Each run of seqs stored by more than one batch of one segment, with the batches that hold it; and how
    many seqs are stored more than once, each time in another segment."""
    holders: dict[int, list[int]] = {}
    for entry in entries:
        if entry.kind == "batch":
            for seq in range(entry.seq_from, entry.seq_to + 1):
                holders.setdefault(seq, []).append(entry.batch)
    twice: list[int] = []  # seqs stored twice within one segment
    across = 0  # seqs stored more than once, each time in another segment
    for seq, batches in holders.items():
        if len(batches) > 1:
            if len({log_position(b)[0] for b in batches}) < len(batches):
                twice.append(seq)
            else:
                across += 1
    twice.sort()
    rows: list[Row] = []
    for low, high in _runs(twice):
        batches = sorted({b for seq in range(low, high + 1) for b in holders[seq]})
        rows.append(_row(pk, "duplicate", batches[-1], low, high, None, None, None, None,
                         f"seqs {low}..{high} are stored by batches {', '.join(map(str, batches))}"))
    return rows, across


def _gaps(pk: str, entries: list[_Entry], lost: list[tuple[int, int]]) -> list[Row]:
    """The lost ranges, each placed between the batches around it."""
    by_end = sorted((e for e in entries if e.kind == "batch"), key=lambda e: e.seq_to)
    ends = np.array([e.seq_to for e in by_end], dtype="int64")
    rows: list[Row] = []
    for low, high in lost:
        before = int(np.searchsorted(ends, low, side="left"))
        after_batch = by_end[before - 1].batch if before > 0 else None
        where = (f"after batch {after_batch}" if after_batch is not None else "before the first batch") + (
            f", before batch {by_end[before].batch}" if before < len(by_end) else " (the log's tail)")
        rows.append(_row(pk, "gap", after_batch, low, high, None, None, None, None,
                         f"seqs {low}..{high}, emitted while STARTED, are not stored: {where}"))
    return rows


def _runs(sorted_seqs: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for seq in sorted_seqs:
        if runs and seq == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], seq)
        else:
            runs.append((seq, seq))
    return runs


def lost_by_pk(sequence_rows: list[Row]) -> dict[str, list[tuple[int, int]]]:
    """The sequences checker's rows as ``check_log``'s ``lost_ranges``."""
    return {str(row["pk"]): parse_ranges(row.get("lost_ranges")) for row in sequence_rows
            if row.get("lost_ranges")}

