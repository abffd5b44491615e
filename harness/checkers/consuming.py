"""Who consumed which stream when, read from the history alone: the evidence behind I1, recovery gaps and
STOP latency.  Every session, part, write and belief carries its ``worker`` (the process, which faults act
on) and its ``consumer`` (the incarnation ``worker@gen``: ``harness.checkers.events.consumer_of``).

- Sessions: ``sub.open`` paired with ``sub.close`` (by pk and session id, in order); a session still open at
  the end runs to the last event.
- Consuming parts of a session (DESIGN §6): the session minus its zombie-connection time, which is
  (1) for reason ``keepalive_timeout``, the tail from ``last_pong_t`` (the client had stopped reading);
  (2) the windows when its worker was frozen by a pause fault (frames queued in a frozen process's socket
  are not read); (3) after such a freeze, the rest of the session when the worker closed it within
  ``thaw_grace_ms`` of waking with no write accepted meanwhile (it woke fenced and left without reading).
- Accepted writes: ``msg.persist`` / ``checkpoint`` with outcome ``ok`` (certain) or ``info`` (may have been
  accepted), each with the interval in which it took effect: from ``sent`` (the request was built) to ``t``
  (its answer was read).  A log write of unknown outcome (it names its item's number ``b``) is settled by the
  stream's stored log (``final.log``), whose items are never overwritten: its own item at that number means it
  landed (certain); another writer's item there means it never did (``never_landed``: no evidence of
  consuming, though still an attempt, which I5 counts as a drain at work).
- Lease beliefs: when a consumer believed it owned a pk, from ``lease.acquire`` ok to ``lease.lost``,
  ``lease.release``, ``ws.close`` (unless a ``ws.open`` follows before anything else: reconnect in place),
  the end of its process (``worker.stop``, a new ``worker.start``, a kill fault) or the end of the run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.checkers.events import (
    CRASH_FAULTS,
    FREEZE_FAULTS,
    Events,
    RunInfo,
    consumer_of,
    fault_windows,
    faults,
    holder_of,
    run_info,
    same_consumer,
    select,
    split_consumer,
    worker_of,
)

Interval = tuple[float, float]
Intervals = tuple[np.ndarray, np.ndarray]

SESSION_COLUMNS = ["pk", "session", "worker", "consumer", "open_t", "close_t", "end_t", "reason",
                   "last_pong_t", "open_at_end"]
PART_COLUMNS = ["pk", "worker", "consumer", "session", "start", "end"]
ZOMBIE_COLUMNS = ["pk", "worker", "consumer", "session", "start", "end", "cause"]
WRITE_COLUMNS = ["t", "answered_t", "pk", "worker", "consumer", "type", "epoch", "seq_from", "seq_to", "certain",
                 "never_landed"]
BELIEF_COLUMNS = ["pk", "worker", "consumer", "epoch", "start", "end", "ended_by"]


@dataclass(frozen=True)
class Consumption:
    """Sessions, their consuming and zombie parts, and accepted writes (columns: the ``*_COLUMNS`` lists)."""

    sessions: pd.DataFrame
    parts: pd.DataFrame
    zombies: pd.DataFrame
    writes: pd.DataFrame


def consumption(history: Events, info: RunInfo | None = None, *, thaw_grace_ms: float | None = None,
                writes: pd.DataFrame | None = None) -> Consumption:
    """Cut every upstream session into consuming and zombie parts.  ``thaw_grace_ms`` defaults to the
    run's ``heartbeat_ms`` (0 without one: no thaw rule); ``writes``, when the caller has them, are the
    history's ``accepted_writes``."""
    info = info if info is not None else run_info(history)
    grace = thaw_grace_ms if thaw_grace_ms is not None else (info.duration("heartbeat_ms") or 0.0)
    session_frame = sessions(history, info)
    write_frame = writes if writes is not None else accepted_writes(history)
    frozen = fault_windows(faults(history), FREEZE_FAULTS, info.last_t)
    took_effect = write_frame.loc[~write_frame["never_landed"]]
    write_times = {key: np.sort(took_effect["t"].to_numpy()[index])
                   for key, index in took_effect.groupby(["pk", "worker"], sort=False).indices.items()}
    parts: list[tuple[object, ...]] = []
    zombies: list[tuple[object, ...]] = []
    for s in session_frame.itertuples(index=False):
        kept: list[Interval] = [(s.open_t, s.end_t)] if s.end_t > s.open_t else []
        if s.reason == "keepalive_timeout" and not np.isnan(s.last_pong_t):
            kept, cut = _cut(kept, max(s.last_pong_t, s.open_t), s.end_t)
            zombies.extend((s.pk, s.worker, s.consumer, s.session, a, b, "keepalive_timeout") for a, b in cut)
        for freeze_start, freeze_stop in frozen.get(s.worker, []):
            kept, cut = _cut(kept, freeze_start, freeze_stop)
            zombies.extend((s.pk, s.worker, s.consumer, s.session, a, b, "frozen") for a, b in cut)
            woke_then_left = (not s.open_at_end and freeze_start < s.end_t
                              and s.open_t <= freeze_stop < s.end_t and s.end_t - freeze_stop <= grace)
            if woke_then_left and not _any_between(write_times.get((s.pk, s.worker)), freeze_stop, s.end_t):
                kept, cut = _cut(kept, freeze_stop, s.end_t)
                zombies.extend((s.pk, s.worker, s.consumer, s.session, a, b, "thaw_close") for a, b in cut)
        parts.extend((s.pk, s.worker, s.consumer, s.session, a, b) for a, b in kept)
    return Consumption(
        sessions=session_frame,
        parts=pd.DataFrame(parts, columns=PART_COLUMNS).astype({"start": "float64", "end": "float64"}),
        zombies=pd.DataFrame(zombies, columns=ZOMBIE_COLUMNS).astype({"start": "float64", "end": "float64"}),
        writes=write_frame,
    )


def sessions(history: Events, info: RunInfo) -> pd.DataFrame:
    """Upstream sessions, ``sub.open`` paired with ``sub.close``, sorted by pk then open time."""
    opens = select(history, "sub.open", ["t", "src", "pk", "session", "worker", "gen"])
    closes = select(history, "sub.close", ["t", "src", "pk", "session", "worker", "gen", "reason", "last_pong_t"])
    opens, closes = (_numbered(opens), _numbered(closes))
    both = opens.merge(closes, on=["pk", "session", "nth"], how="outer", suffixes=("_open", "_close"))
    worker = both["worker_open"].where(both["worker_open"].notna(), both["worker_close"]).fillna("?")
    gen = both["gen_open"].where(both["gen_open"].notna(), both["gen_close"])
    frame = pd.DataFrame({
        "pk": both["pk"],
        "session": both["session"],
        "worker": worker,
        "consumer": consumer_of(pd.DataFrame({"worker": worker, "src": worker, "gen": gen})),
        "open_t": both["t_open"].fillna(info.first_t),
        "close_t": both["t_close"],
        "end_t": both["t_close"].fillna(info.last_t),
        "reason": both["reason"],
        "last_pong_t": both["last_pong_t"],
        "open_at_end": both["t_close"].isna(),
    }, columns=SESSION_COLUMNS)
    return frame.sort_values(["pk", "open_t"], kind="stable").reset_index(drop=True)


def _numbered(frame: pd.DataFrame) -> pd.DataFrame:
    """Session events with a pk, numbered per (pk, session id) so a reused id pairs in order."""
    frame = frame.dropna(subset=["pk"]).assign(session=lambda f: f["session"].fillna("?"))
    return frame.assign(nth=frame.groupby(["pk", "session"], sort=False).cumcount())


def accepted_writes(history: Events) -> pd.DataFrame:
    """``msg.persist`` and ``checkpoint`` events with outcome ok (``certain``) or info.

    A write took effect at some instant between its request was sent (``sent``, when the writer recorded
    it) and its answer (``t``).  Here ``t`` is ``sent`` (the earliest instant it can have been accepted;
    the event's ``t`` when it has no ``sent``) and ``answered_t`` the event's ``t`` (the latest)."""
    frame = select(history, ["msg.persist", "checkpoint"],
                   ["t", "sent", "src", "pk", "worker", "gen", "type", "epoch", "seq_from", "seq_to", "seq",
                    "outcome", "b"])
    frame = frame.loc[frame["outcome"].isin(["ok", "info"]) & frame["pk"].notna()]
    landed = _landed_by_the_log(history, frame)
    certain = (frame["outcome"] == "ok") | landed.eq(True)
    is_checkpoint = (frame["type"] == "checkpoint").to_numpy()
    return pd.DataFrame({
        "t": frame["sent"].fillna(frame["t"]).clip(upper=frame["t"]),
        "answered_t": frame["t"],
        "pk": frame["pk"],
        "worker": worker_of(frame),
        "consumer": consumer_of(frame),
        "type": frame["type"],
        "epoch": frame["epoch"],
        "seq_from": np.where(is_checkpoint, frame["seq"], frame["seq_from"]),
        "seq_to": np.where(is_checkpoint, frame["seq"], frame["seq_to"]),
        "certain": certain.to_numpy(dtype=bool),
        "never_landed": landed.eq(False).to_numpy(dtype=bool),
    }, columns=WRITE_COLUMNS).reset_index(drop=True)


def _landed_by_the_log(history: Events, writes: pd.DataFrame) -> pd.Series:
    """Per write: True when it is of unknown outcome and the stored log holds its own item at its number,
    False when another item holds that number, None (NA) otherwise (answered, no number, or no log read)."""
    verdicts = pd.Series(pd.NA, index=writes.index, dtype="object")
    unknown = writes.loc[(writes["outcome"] == "info") & writes["b"].notna()]
    if unknown.empty:
        return verdicts
    stored: dict[tuple[str, int], tuple[str, object, object, object]] = {}
    for pk, entries in select(history, "final.log", ["pk", "entries"], raw=["entries"]).itertuples(index=False):
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("batch"), int):
                stored[(str(pk), entry["batch"])] = (holder_of(entry), entry.get("epoch"), entry.get("seq_from"),
                                                     entry.get("seq_to"))
    for index, consumer, pk, b, epoch, seq_from, seq_to in zip(
            unknown.index, consumer_of(unknown), unknown["pk"], unknown["b"], unknown["epoch"],
            unknown["seq_from"], unknown["seq_to"], strict=True):
        item = stored.get((str(pk), int(b)))
        if item is not None:
            verdicts[index] = item == (consumer, epoch, seq_from, seq_to)
    return verdicts


def lease_beliefs(history: Events, info: RunInfo | None = None) -> pd.DataFrame:
    """Intervals during which a consumer believed it owned a pk (see the module docstring)."""
    info = info if info is not None else run_info(history)
    frame = select(history, ["lease.acquire", "lease.lost", "lease.release", "ws.open", "ws.close",
                             "worker.start", "worker.stop"], ["t", "src", "type", "pk", "worker", "gen", "epoch",
                                                             "outcome"])
    frame["consumer"] = consumer_of(frame)
    frame["worker"] = worker_of(frame)
    crashes = [(f.start_t, "fault.kill", target) for f in faults(history) if f.kind in CRASH_FAULTS
               for target in f.targets]
    steps = [(e.t, e.type, e.worker, e.consumer, e.pk, e.epoch, e.outcome) for e in frame.itertuples(index=False)]
    steps.extend((t, kind, worker, worker, np.nan, np.nan, np.nan) for t, kind, worker in crashes)
    steps.sort(key=lambda step: step[0])
    active: dict[tuple[str, str], list[object]] = {}  # (pk, consumer) -> [start, epoch, suspended_at]
    rows: list[tuple[object, ...]] = []

    def end(key: tuple[str, str], t: float, why: str) -> None:
        start, epoch, suspended = active.pop(key)
        rows.append((key[0], split_consumer(key[1])[0], key[1], epoch, start,
                     suspended if suspended is not None else t, "ws.close" if suspended is not None else why))

    def held_key(pk: str, consumer: str) -> tuple[str, str] | None:
        if (pk, consumer) in active:
            return (pk, consumer)
        return next((k for k in active if k[0] == pk and same_consumer(k[1], consumer)), None)

    for t, kind, worker, consumer, pk, epoch, outcome in steps:
        if kind in ("worker.start", "worker.stop", "fault.kill"):
            for held in [k for k in active if split_consumer(k[1])[0] == worker]:
                end(held, t, kind)
            continue
        if not isinstance(pk, str):
            continue
        key = held_key(pk, consumer)
        if kind == "lease.acquire" and outcome == "ok":
            if key is not None and active[key][2] is not None:
                end(key, t, "ws.close")
                key = None
            if key is not None:
                active[key][1] = epoch
            else:
                active[(pk, consumer)] = [t, epoch, None]
        elif key is None:
            continue
        elif kind == "ws.open" and (outcome == "ok" or not isinstance(outcome, str)):
            active[key][2] = None
        elif kind == "ws.close" and active[key][2] is None:
            active[key][2] = t
        elif kind in ("lease.lost", "lease.release"):
            end(key, t, kind)
    for key in list(active):
        end(key, info.last_t, "end")
    beliefs = pd.DataFrame(rows, columns=BELIEF_COLUMNS).astype({"start": "float64", "end": "float64"})
    return beliefs.sort_values(["pk", "start"], kind="stable").reset_index(drop=True)


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """The union of intervals as sorted disjoint intervals (touching ones merge)."""
    if starts.size == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    first = np.r_[True, s[1:] > reach[:-1]]
    return s[first], np.maximum.reduceat(e, np.flatnonzero(first))


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Where two sorted disjoint interval lists overlap, as pieces of positive length."""
    a_start, a_end = a
    b_start, b_end = b
    low = np.searchsorted(b_end, a_start, side="right")
    high = np.searchsorted(b_start, a_end, side="left")
    counts = np.maximum(high - low, 0)
    total = int(counts.sum())
    if total == 0:
        return np.empty(0), np.empty(0)
    ia = np.repeat(np.arange(a_start.size), counts)
    offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    ib = np.repeat(low, counts) + offsets
    start = np.maximum(a_start[ia], b_start[ib])
    stop = np.minimum(a_end[ia], b_end[ib])
    keep = start < stop
    return start[keep], stop[keep]


def covering(intervals: Intervals, times: np.ndarray) -> np.ndarray:
    """For each time, whether a sorted disjoint interval list covers it (ends included)."""
    starts, ends = intervals
    if starts.size == 0:
        return np.zeros(times.size, dtype=bool)
    index = np.searchsorted(starts, times, side="right") - 1
    return (index >= 0) & (times <= ends[np.maximum(index, 0)])


def _cut(kept: list[Interval], a: float, b: float) -> tuple[list[Interval], list[Interval]]:
    """Remove [a, b] from the intervals: (what remains, what was removed)."""
    remain: list[Interval] = []
    removed: list[Interval] = []
    for start, stop in kept:
        low, high = max(start, a), min(stop, b)
        if low >= high:
            remain.append((start, stop))
            continue
        if start < low:
            remain.append((start, low))
        if high < stop:
            remain.append((high, stop))
        removed.append((low, high))
    return remain, removed


def _any_between(times: np.ndarray | None, a: float, b: float) -> bool:
    if times is None:
        return False
    return bool(np.searchsorted(times, b, side="right") > np.searchsorted(times, a, side="left"))
