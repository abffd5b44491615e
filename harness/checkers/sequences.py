"""I2 nothing lost and I3 no duplicate persistence, per stream, from the history alone.

- Emitted: the upstream's ``emit`` events, counted only while the pk's desired state was STARTED
  (START .. STOP accepted by the router, or ``conn.started`` .. ``conn.stopped``:
  ``harness.checkers.events.desired_states``; a pk with no such event is STARTED throughout, one whose first
  such event is a STOP was STARTED until then).
- Persisted: ``final.persisted`` (the store's contents at the end, one entry per stored item) when the history
  has any (then a pk without one stored nothing), else the ranges of ``msg.persist`` events with outcome ok.
- Lost: emitted while STARTED and never persisted, up to a horizon; seqs emitted after it are *unseen at the
  end*, reported apart.  The horizon is ``run.stop``'s ``settled_t`` when the runner recorded one (its
  settle phase waited, up to a bound, until everything emitted before that instant was stored: a stream
  still catching up after its last fault is lagging, not losing), else ``settle_ms`` before the end
  (``run.stop``, else the last event); ``settle_ms`` defaults to one lease (``config.lease_ms`` of
  ``run.start``).  Without ``final.persisted``,
  a lost seq that an ``msg.persist`` with outcome info covers may have been stored: it makes the verdict
  unknown, not false.
- Behind, not lost: a missing seq the store had not reached at the final scan, which the fleet would still
  store.  Only with the final scan (``final.persisted`` and the stream's ``final.connection``): either a
  write answered ok after the scan began (``run.stop``) covers it (it landed after the scan read), or
  nothing stored of its stream follows it, the stream's checkpoint (``last_seq``, where a resume starts
  after) is below it, and no upstream session asked for it and was served from above it (``replay_from``:
  the replay no longer held it).  Every other missing seq is a *gap*, lost for good: the stored log or the
  checkpoint moved past it, or the upstream can no longer replay it.  ``lost_sequences`` counts gaps;
  ``behind_at_end`` the others, which make the verdict unknown (the lag is the recovery checkers' to
  judge, e.g. a store slowed by a loaded machine), never valid.
- Duplicated: extra copies stored (a seq stored twice counts once); from ``msg.persist`` alone, a seq written
  ok twice counts (an idempotent re-write must report outcome fail, or the run must write final.persisted).
- Out of order (informational): a consumer (incarnation) persisting a lower seq after a higher one within one
  ownership (one ``lease.acquire`` ok and epoch).
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np
import pandas as pd

from harness.checkers.events import (
    STARTED,
    STOPPED,
    Events,
    RunInfo,
    consumer_of,
    desired_states,
    run_info,
    select,
)
from harness.checkers.result import UNKNOWN, CheckResult, Row, Validity

SEQUENCE_COLUMNS = ["pk", "emitted", "persisted", "stored", "lost", "lost_ranges", "behind", "behind_ranges",
                    "unseen_at_end", "possibly_persisted", "duplicated", "duplicated_ranges", "out_of_order",
                    "head_seq"]
DETAIL_RANGES = 200  # lost / duplicated ranges listed in the verdict details (the rows hold all)
SEQ_BITS = 32


def check_sequences(history: Events, *, settle_ms: float | None = None,
                    info: RunInfo | None = None) -> CheckResult:
    info = info if info is not None else run_info(history)
    settle = settle_ms if settle_ms is not None else (info.duration("lease_ms") or 0.0)
    horizon = info.settled_t if info.settled_t is not None and settle_ms is None else info.end_t - settle
    emits = select(history, "emit", ["t", "pk", "seq"]).dropna(subset=["pk", "seq"])
    final = select(history, "final.persisted", ["pk", "seqs"], raw=["seqs"]).dropna(subset=["pk"])
    persists = select(history, "msg.persist", ["t", "src", "pk", "worker", "gen", "epoch", "seq_from", "seq_to",
                                               "outcome"]).dropna(subset=["pk", "seq_from", "seq_to"])
    heads = select(history, "final.emitted", ["pk", "head_seq"]).dropna(subset=["pk"])
    emits, bad_emits = _sequence_numbers(emits, ["seq"])
    persists, bad_persists = _sequence_numbers(persists, ["seq_from", "seq_to"])
    source = "final.persisted" if len(final) else "msg.persist"

    pk_names = pd.Index(pd.unique(np.concatenate([
        emits["pk"].to_numpy(), final["pk"].to_numpy(), persists["pk"].to_numpy(), heads["pk"].to_numpy()])))
    emitted_keys = _keys(pk_names, emits["pk"], emits["seq"].to_numpy())
    emitted_keys, first = np.unique(emitted_keys, return_index=True)
    started = _started(history, emits)[first]
    unseen = emits["t"].to_numpy()[first] > horizon

    ok = persists.loc[persists["outcome"] == "ok"]
    if source == "final.persisted":
        stored_keys = _final_keys(pk_names, final)
        maybe_keys = np.empty(0, dtype="int64")
    else:
        stored_keys = _range_keys(pk_names, ok)
        maybe_keys = np.unique(_range_keys(pk_names, persists.loc[persists["outcome"] == "info"]))
    stored_unique, stored_counts = np.unique(stored_keys, return_counts=True)

    found = _member(emitted_keys, stored_unique)
    missing = started & ~found
    lost_any = missing & ~unseen
    possibly = lost_any & _member(emitted_keys, maybe_keys)
    lost = lost_any & ~possibly
    if source == "final.persisted":
        behind = lost & _behind(history, pk_names, emitted_keys, stored_unique, ok, info)
        lost &= ~behind
    else:
        behind = np.zeros(len(emitted_keys), dtype=bool)
    unseen_missing = missing & unseen
    dup_keys = stored_unique[stored_counts > 1]
    dup_extra = stored_counts[stored_counts > 1] - 1
    ooo = _out_of_order(history, ok)

    n = len(pk_names)
    code_of = emitted_keys >> SEQ_BITS
    lost_ranges = _ranges(emitted_keys[lost])
    behind_ranges = _ranges(emitted_keys[behind])
    dup_ranges = _ranges(dup_keys)
    per_pk = {
        "emitted": np.bincount(code_of[started], minlength=n),
        "persisted": np.bincount(stored_unique >> SEQ_BITS, minlength=n),
        "stored": np.bincount(stored_keys >> SEQ_BITS, minlength=n),
        "lost": np.bincount(code_of[lost], minlength=n),
        "behind": np.bincount(code_of[behind], minlength=n),
        "unseen_at_end": np.bincount(code_of[unseen_missing], minlength=n),
        "possibly_persisted": np.bincount(code_of[possibly], minlength=n),
        "duplicated": np.bincount(dup_keys >> SEQ_BITS, weights=dup_extra, minlength=n).astype("int64"),
    }
    head = dict(zip(heads["pk"], heads["head_seq"], strict=True))
    rows: list[Row] = []
    for code, pk in enumerate(pk_names):
        rows.append({
            "pk": pk,
            **{name: int(values[code]) for name, values in per_pk.items()},
            "lost_ranges": _format(lost_ranges.get(code, [])),
            "behind_ranges": _format(behind_ranges.get(code, [])),
            "duplicated_ranges": _format(dup_ranges.get(code, [])),
            "out_of_order": int(ooo.get(pk, 0)),
            "head_seq": int(head[pk]) if pd.notna(head.get(pk)) else None,
        })
    rows.sort(key=lambda row: str(row["pk"]))
    totals = {name: int(values.sum()) for name, values in per_pk.items()}

    valid: Validity
    if emits.empty:
        valid, reason = UNKNOWN, "no emit events: nothing to compare with"
    elif bad_emits + bad_persists:
        valid, reason = UNKNOWN, (f"{bad_emits + bad_persists} emit or msg.persist events carry a seq that is not "
                                  f"a whole number below 2^{SEQ_BITS}: they were left out")
    elif totals["lost"] or totals["duplicated"]:
        valid, reason = False, "sequences lost or stored more than once"
    elif totals["possibly_persisted"]:
        valid, reason = UNKNOWN, "some seqs are missing unless a write with an unknown outcome landed"
    elif totals["behind"]:
        valid, reason = UNKNOWN, ("behind at the final scan: some seqs were not stored yet, though the fleet "
                                  "would still store them (not lost; the lag is the recovery checkers')")
    else:
        valid, reason = True, "every seq emitted while STARTED was persisted once"
    details: dict[str, Any] = {
        "reason": reason,
        "source": source,
        "settle_ms": settle,
        "horizon_t": horizon,
        "emitted": totals["emitted"],
        "persisted": totals["persisted"],
        "lost_sequences": totals["lost"],
        "behind_at_end": totals["behind"],
        "unseen_at_end": totals["unseen_at_end"],
        "possibly_persisted": totals["possibly_persisted"],
        "duplicate_deliveries": totals["duplicated"],
        "out_of_order": int(sum(ooo.values())),
    }
    for name, ranges in (("lost_ranges", lost_ranges), ("behind_ranges", behind_ranges),
                         ("duplicated_ranges", dup_ranges)):
        details[name], details[f"{name}_truncated"] = _detail_ranges(ranges, pk_names)
    return CheckResult("sequences", valid, details, {"sequences": rows})


def _behind(history: Events, pk_names: pd.Index, emitted_keys: np.ndarray, stored_unique: np.ndarray,
            ok: pd.DataFrame, info: RunInfo) -> np.ndarray:
    """For each emitted key, whether the fleet would still store it (see the module docstring: behind)."""
    landed_late = (ok.loc[ok["t"] > info.stop_t] if info.stop_t is not None else ok.iloc[:0])
    late = _member(emitted_keys, np.unique(_range_keys(pk_names, landed_late)))
    codes, seqs = emitted_keys >> SEQ_BITS, emitted_keys & ((1 << SEQ_BITS) - 1)
    n = len(pk_names)
    top = np.full(n, -1, dtype="int64")
    np.maximum.at(top, stored_unique >> SEQ_BITS, stored_unique & ((1 << SEQ_BITS) - 1))
    items = select(history, "final.connection", ["pk", "last_seq"]).dropna(subset=["pk"])
    checkpoint = np.full(n, np.nan)
    known = pk_names.get_indexer(items["pk"])
    checkpoint[known[known >= 0]] = pd.to_numeric(items["last_seq"], errors="coerce").fillna(0).to_numpy()[known >= 0]
    opens = select(history, "sub.open", ["pk", "from_seq", "replay_from"]).dropna(subset=["pk"])
    served_from = pd.to_numeric(opens["replay_from"], errors="coerce")
    short = opens.loc[served_from > opens["from_seq"]]
    unreplayed = pd.DataFrame({"pk": short["pk"], "seq_from": short["from_seq"],
                               "seq_to": served_from.loc[short.index] - 1})
    gone = _member(emitted_keys, np.unique(_range_keys(pk_names, unreplayed)))
    tail = (seqs > top[codes]) & (seqs > checkpoint[codes]) & ~gone  # NaN checkpoint (no item): never
    return np.asarray(late | tail)


def _sequence_numbers(frame: pd.DataFrame, columns: list[str]) -> tuple[pd.DataFrame, int]:
    """The rows whose ``columns`` are all whole numbers in [0, 2^SEQ_BITS), and how many others there were."""
    values = frame[columns].to_numpy(dtype="float64")
    good = ((values >= 0) & (values < 2**SEQ_BITS) & (values == np.floor(values))).all(axis=1)
    return frame.loc[good], int((~good).sum())


def _keys(pk_names: pd.Index, pks: pd.Series | np.ndarray, seqs: np.ndarray) -> np.ndarray:
    """One int64 per (pk, seq): the pk's code in the high bits, the seq in the low ones."""
    codes = np.asarray(pk_names.get_indexer(pks), dtype="int64")
    return np.asarray((codes << SEQ_BITS) | seqs.astype("int64"), dtype="int64")


def _final_keys(pk_names: pd.Index, final: pd.DataFrame) -> np.ndarray:
    listed = [seqs if isinstance(seqs, list | tuple | np.ndarray) else [] for seqs in final["seqs"]]
    lengths = np.array([len(seqs) for seqs in listed], dtype="int64")
    flat = np.fromiter(chain.from_iterable(listed), dtype=object, count=int(lengths.sum()))
    values = pd.to_numeric(pd.Series(flat, dtype=object), errors="coerce").to_numpy(dtype="float64")
    pks = np.repeat(final["pk"].to_numpy(dtype=object), lengths)
    known = ~np.isnan(values)
    return _keys(pk_names, pks[known], values[known])


def _range_keys(pk_names: pd.Index, writes: pd.DataFrame) -> np.ndarray:
    """Every (pk, seq) key the seq_from..seq_to ranges of these writes cover, once per write."""
    first = writes["seq_from"].to_numpy().astype("int64")
    lengths = np.maximum(writes["seq_to"].to_numpy().astype("int64") - first + 1, 0)
    total = int(lengths.sum())
    which = np.repeat(np.arange(len(writes)), lengths)
    offsets = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    codes = np.asarray(pk_names.get_indexer(writes["pk"]), dtype="int64")
    return np.asarray((codes[which] << SEQ_BITS) | (first[which] + offsets), dtype="int64")


def _member(keys: np.ndarray, sorted_unique: np.ndarray) -> np.ndarray:
    if sorted_unique.size == 0:
        return np.zeros(keys.size, dtype=bool)
    index = np.minimum(np.searchsorted(sorted_unique, keys), sorted_unique.size - 1)
    return np.asarray(sorted_unique[index] == keys)


def _started(history: Events, emits: pd.DataFrame) -> np.ndarray:
    """For each emit, whether its pk's desired state was certainly STARTED then (a STOP, answered or of unknown
    outcome, may have landed from when it was sent: what follows it is not required)."""
    conn = desired_states(history, earliest_stops=True)
    if conn.empty or emits.empty:
        return np.ones(len(emits), dtype=bool)
    probe = pd.DataFrame({"t": emits["t"].to_numpy(), "pk": emits["pk"].to_numpy(dtype=object),
                          "order": np.arange(len(emits))}).sort_values("t", kind="stable")
    states = pd.DataFrame({"t": conn["t"], "pk": conn["pk"].to_numpy(dtype=object), "state": conn["type"]})
    joined = pd.merge_asof(probe, states, on="t", by="pk", direction="backward")
    first_state = states.groupby("pk", sort=False)["state"].first()
    before_first = joined["pk"].map(first_state)
    started = np.where(joined["state"].notna(), joined["state"] == STARTED,
                       before_first.isna() | (before_first == STOPPED))
    result = np.empty(len(emits), dtype=bool)
    result[joined["order"].to_numpy()] = started
    return result


def _out_of_order(history: Events, ok: pd.DataFrame) -> dict[str, int]:
    """Per pk, how many ok writes started below a seq the same ownership had already persisted."""
    if ok.empty:
        return {}
    acquires = select(history, "lease.acquire", ["t", "src", "pk", "worker", "gen", "outcome"])
    acquires = acquires.loc[(acquires["outcome"] == "ok") & acquires["pk"].notna()]
    pk_codes, pk_names = pd.factorize(np.concatenate([ok["pk"].to_numpy(dtype=object),
                                                      acquires["pk"].to_numpy(dtype=object)]))
    owners, _ = pd.factorize(np.concatenate([consumer_of(ok).to_numpy(dtype=object),
                                             consumer_of(acquires).to_numpy(dtype=object)]))
    t = np.concatenate([ok["t"].to_numpy(dtype="float64"), acquires["t"].to_numpy(dtype="float64")])
    acquire = np.r_[np.zeros(len(ok), dtype="int64"), np.ones(len(acquires), dtype="int64")]
    # per (pk, consumer), in time order with an acquire before a write at the same instant
    order = np.lexsort((-acquire, t, owners, pk_codes))
    pk_codes, owners, acquire = pk_codes[order], owners[order], acquire[order]
    ownership = pd.Series(acquire).groupby([pk_codes, owners], sort=False).cumsum().to_numpy()
    writes = order[acquire == 0]  # rows of ok, in that order
    keys = [pk_codes[acquire == 0], owners[acquire == 0], ownership[acquire == 0],
            ok["epoch"].fillna(-1.0).to_numpy()[writes]]
    reach = pd.Series(ok["seq_to"].to_numpy(dtype="float64")[writes]).groupby(keys, sort=False).cummax()
    before = reach.groupby(keys, sort=False).shift().to_numpy()
    late = ok["seq_from"].to_numpy(dtype="float64")[writes] < before
    counts = np.bincount(keys[0][late], minlength=len(pk_names))
    return {str(pk_names[code]): int(counts[code]) for code in np.flatnonzero(counts)}


def _ranges(sorted_keys: np.ndarray) -> dict[int, list[tuple[int, int]]]:
    """Per pk code, the runs of consecutive seqs among sorted keys."""
    if sorted_keys.size == 0:
        return {}
    codes = sorted_keys >> SEQ_BITS
    seqs = sorted_keys & ((1 << SEQ_BITS) - 1)
    breaks = np.r_[True, (np.diff(codes) != 0) | (np.diff(seqs) != 1)]
    starts = np.flatnonzero(breaks)
    ends = np.r_[starts[1:] - 1, sorted_keys.size - 1]
    ranges: dict[int, list[tuple[int, int]]] = {}
    runs = zip(codes[starts].tolist(), seqs[starts].tolist(), seqs[ends].tolist(), strict=True)
    for code, low, high in runs:
        ranges.setdefault(code, []).append((low, high))
    return ranges


def _format(ranges: list[tuple[int, int]]) -> str:
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def _detail_ranges(ranges: dict[int, list[tuple[int, int]]],
                   pk_names: pd.Index) -> tuple[dict[str, Any], bool]:
    """{pk: [[first, last], ...]} for the verdict, at most ``DETAIL_RANGES`` ranges in all; and whether
    some were left out."""
    listed: dict[str, Any] = {}
    budget = DETAIL_RANGES
    for code in sorted(ranges, key=lambda c: str(pk_names[c])):
        if budget <= 0:
            return listed, True
        listed[str(pk_names[code])] = [[a, b] for a, b in ranges[code][:budget]]
        budget -= len(ranges[code])
    return listed, budget < 0
