"""I6 no zombie write (DESIGN §11): no item is stored, and no write acknowledged, from an epoch that had
already been superseded when it was accepted, however its request was timed.

Epoch ``e`` of a pk is *superseded* from its first handover past ``e`` (DESIGN §12,
``harness.checkers.events.handovers``): an acquire ok of a higher epoch (the event's ``t``: the new owner
had its answer, so the grant had taken effect), a balance transfer of ``e`` (the giver's release ok, which
hands ``e + 1`` on before the recipient takes it up) or the burial of ``e``'s holder by a death notice.  For
a writer without epochs (``blog``) the ownership is the writer's last ``lease.acquire`` ok of the pk before
the write, and it is superseded from the next handover away from it: an acquire ok of that pk by another
consumer, a transfer by the writer or its burial.  A pk
whose history grants one epoch to two different consumers (``blog`` logs epoch 0 for every acquire), or
grants a lower epoch after a higher one, has no fencing epochs: it is judged the epoch-less way, and rules
(a), (c) and (d) do not apply to it.

The checker judges from the store's contents (``final.persisted`` items with their writer, the
``final.connection`` checkpoint fields; ``harness.ground_truth``) and the history, never from request
timing alone.  Each rule is evidence that a write was accepted after its epoch was superseded:

- **overwrite** (a): a stored message item of epoch ``e`` where a writer of epoch ``e' > e`` had an ``ok``
  ``msg.persist`` covering that seq.  That write was stored, yet the item holds ``e``: the ``e`` write landed
  after it, over the newer owner's item.  Certain, whatever the timing of either request.
- **late send** (b): a stored item whose ``sent_ms`` (the writer's clock when it built the request) is
  after the supersession by more than ``clock_tolerance_ms`` (the skew the fault model allows the writer's
  clock); or a ``msg.persist`` / ``checkpoint`` whose request was sent (``sent``, on the history's clock)
  after the supersession: outcome ``ok`` is certain, ``info`` possible.  A write built after a newer owner
  held the lease can only be accepted after it.
- **foreign epoch** (c): a stored item (message or checkpoint) whose epoch was granted (``ok``) to another
  incarnation of the pk, and never (``ok`` or ``info``) to its writer: its writer never held that epoch.
  Certain.  An epoch that no acquire in the history granted is *unexplained*: counted, not failed (an
  acquire whose answer was lost may have granted it).
- **checkpoint overwrite** (d): the connection item's checkpoint is from epoch ``e`` while a ``checkpoint``
  with outcome ``ok`` of an epoch above ``e`` exists in the history: the older owner's checkpoint landed
  after the newer one's.  Certain.

The store's contents are those of the final scan, which starts at ``run.stop`` while the fleet still runs
(else, in older histories, at the first ``final.*`` event): rules (a) and (d) and the possible late landings
weigh the scan only against writes answered before it started.  A write answered later (a takeover during
the scan rewriting what it found, as a slow backend's self-fenced owner's successor does) may be missing from
it, and an older item the scan shows is then no evidence that anything landed over it.

Streams whose messages are stored as a batch log (``logged``) have their messages judged by
``harness.checkers.log`` instead of rules (a) and (b); rule (c) and checkpoints are judged here as for any.

``zombie_writes`` counts the distinct (pk, kind, seq) written by certain findings; possible ones make the
verdict unknown.  ``late_landings`` gives the duplicate-claims checker the earliest instant each overwrite
can have landed.  A history without items or grants gives this checker nothing to judge: valid, with
``judged_items`` 0.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np
import pandas as pd

from harness.checkers.consuming import accepted_writes
from harness.checkers.events import (
    Events,
    RunInfo,
    consumer_of,
    handovers,
    run_info,
    same_consumer,
    select,
)
from harness.checkers.result import UNKNOWN, CheckResult, Row, Validity

ZOMBIE_WRITE_COLUMNS = ["pk", "kind", "seq_from", "seq_to", "writer", "epoch", "rule", "certain", "sent_t",
                        "superseded_t", "evidence"]
ITEM_COLUMNS = ["pk", "seq", "consumer", "epoch", "sent_ms"]
LANDING_COLUMNS = ["pk", "consumer", "epoch", "seq", "landed_after", "certain"]
DETAIL_ROWS = 50


def stored_items(history: Events) -> pd.DataFrame:
    """Every stored message item of ``final.persisted`` with its writer (``ITEM_COLUMNS``; consumer, epoch
    and sent_ms NaN when unknown).  Empty for a history whose final scan kept no items."""
    final = select(history, "final.persisted", ["pk", "items"], raw=["items"]).dropna(subset=["pk"])
    rows: list[dict[str, Any]] = []
    for pk, items in zip(final["pk"], final["items"], strict=True):
        if isinstance(items, list):
            rows.extend({"pk": pk, **item} for item in items if isinstance(item, dict))
    frame = pd.DataFrame(rows, columns=["pk", "seq", "worker", "gen", "epoch", "sent_ms"])
    known = frame["worker"].notna().to_numpy()
    consumers = consumer_of(frame.assign(src="?")).where(known, np.nan)
    numbers = {name: pd.to_numeric(frame[name], errors="coerce").astype("float64")
               for name in ("seq", "epoch", "sent_ms")}
    items_frame = pd.DataFrame({"pk": frame["pk"], "seq": numbers["seq"], "consumer": consumers,
                                "epoch": numbers["epoch"], "sent_ms": numbers["sent_ms"]}, columns=ITEM_COLUMNS)
    return items_frame.dropna(subset=["seq"]).reset_index(drop=True)


class _Grants:
    """The acquires of each pk (time-sorted arrays) and its handovers (``events.handovers``: acquire, transfer,
    burial), for supersession look-ups."""

    def __init__(self, history: Events) -> None:
        acquires = select(history, "lease.acquire", ["t", "src", "pk", "worker", "gen", "epoch", "outcome"])
        acquires = acquires.loc[acquires["pk"].notna() & acquires["outcome"].isin(["ok", "info"])]
        acquires = acquires.assign(consumer=consumer_of(acquires)).sort_values("t", kind="stable")
        self.by_pk: dict[str, tuple[np.ndarray, ...]] = {}
        self.unfenced: set[str] = set()
        for pk, group in acquires.groupby("pk", sort=False):
            self.by_pk[str(pk)] = (group["t"].to_numpy(), group["epoch"].to_numpy(dtype="float64"),
                                   group["consumer"].to_numpy(dtype=object), (group["outcome"] == "ok").to_numpy())
            if not _epochs_fence(*self.by_pk[str(pk)][1:]):
                self.unfenced.add(str(pk))
        self.handed: dict[str, pd.DataFrame] = {str(pk): group for pk, group
                                                in handovers(history).groupby("pk", sort=False)}

    def fencing(self, pk: str, epochs: np.ndarray) -> np.ndarray:
        """``epochs`` of writes to pk, all NaN when the pk's epochs do not fence (see the module docstring)."""
        return np.full(epochs.size, np.nan) if pk in self.unfenced else epochs

    def superseded_at(self, pk: str, consumer: str, epochs: np.ndarray, sents: np.ndarray) -> np.ndarray:
        """For writes of one consumer to one pk (their epochs, NaN when unknown, and send times): when the
        ownership each relied on was superseded (NaN: never, or the ownership is not in the history): the
        first handover past its epoch; without an epoch, the first handover away from the writer after its
        latest acquire before the write."""
        result = np.full(epochs.size, np.nan)
        handed = self.handed.get(pk)
        if handed is None:
            return result
        times, thresholds = handed["t"].to_numpy(), handed["epoch"].to_numpy(dtype="float64")
        epochs = self.fencing(pk, epochs)
        known = ~np.isnan(epochs)
        dated = ~np.isnan(thresholds)
        if known.any() and dated.any():
            order = np.argsort(thresholds[dated], kind="stable")
            by_epoch = thresholds[dated][order]
            first_t = np.minimum.accumulate(times[dated][order][::-1])[::-1]
            index = np.searchsorted(by_epoch, epochs[known], side="right")
            result[known] = np.where(index < by_epoch.size, first_t[np.minimum(index, by_epoch.size - 1)], np.nan)
        if (~known).any():
            kinds = handed["kind"].to_numpy(dtype=object)
            own = np.array([kind == "acquire" and same_consumer(str(to), consumer)
                            for kind, to in zip(kinds, handed["to"], strict=True)], dtype=bool)
            away = np.array([not o and (same_consumer(str(frm), consumer) if kind != "acquire" else True)
                             for o, kind, frm in zip(own, kinds, handed["from"], strict=True)], dtype=bool)
            own_index, away_index = np.flatnonzero(own), np.flatnonzero(away)
            following = np.searchsorted(away_index, own_index, side="right")
            next_away = np.where(following < away_index.size,
                                 times[away_index[np.minimum(following, max(away_index.size - 1, 0))]]
                                 if away_index.size else np.nan, np.nan)
            latest_own = np.searchsorted(times[own_index], sents[~known], side="right") - 1
            result[~known] = np.where(latest_own >= 0, next_away[np.maximum(latest_own, 0)]
                                      if own_index.size else np.nan, np.nan)
        return result

    def granted(self, pk: str, epoch: float) -> tuple[list[str], list[str]]:
        """The consumers granted this epoch of pk: (by ok acquires, by ok or info acquires)."""
        if pk not in self.by_pk or np.isnan(epoch):
            return [], []
        _, epochs, owners, ok = self.by_pk[pk]
        same = epochs == epoch
        return list(owners[same & ok]), list(owners[same])


def _epochs_fence(epochs: np.ndarray, owners: np.ndarray, ok: np.ndarray) -> bool:
    """Whether the epochs granted (ok; in time order) never went down and none went to two different
    consumers."""
    granted = ok & ~np.isnan(epochs)
    if np.any(np.diff(epochs[granted]) < 0):
        return False
    for epoch in np.unique(epochs[granted]):
        holders = owners[granted & (epochs == epoch)]
        if any(not same_consumer(holders[0], other) for other in holders[1:]):
            return False
    return True


def check_zombie_writes(history: Events, *, info: RunInfo | None = None, writes: pd.DataFrame | None = None,
                        logged: Collection[str] = ()) -> CheckResult:
    """``writes``: ``consuming.accepted_writes(history)`` when already computed; ``logged``: the pks whose
    messages are stored as a batch log, judged by ``harness.checkers.log`` instead of rules (a) and (b): what
    an earlier holder stored before the new owner's takeover mark is part of the log, whenever it landed."""
    info = info if info is not None else run_info(history)
    tolerance = info.duration("clock_tolerance_ms") or 0.0
    grants = _Grants(history)
    items = stored_items(history)
    writes = writes if writes is not None else accepted_writes(history)
    seen = scanned_writes(history, writes)
    unlogged_items = items.loc[~items["pk"].isin(list(logged)).to_numpy()]
    unlogged_writes = writes.loc[~(writes["pk"].isin(list(logged)).to_numpy()
                                   & (writes["type"] == "msg.persist").to_numpy())]
    findings: list[Row] = []
    findings.extend(_overwrites(unlogged_items, scanned_writes(history, unlogged_writes), grants))
    findings.extend(_late_sends(unlogged_items, unlogged_writes, grants, tolerance))
    foreign, unexplained = _foreign_epochs(items, _checkpoints(history), grants)
    findings.extend(foreign)
    findings.extend(_checkpoint_overwrites(history, seen, grants))
    findings.sort(key=lambda row: (str(row["pk"]), row["seq_from"] if row["seq_from"] is not None else -1))

    certain = [row for row in findings if row["certain"]]
    possible = [row for row in findings if not row["certain"]]
    count = len({(row["pk"], row["kind"], seq) for row in certain
                 for seq in (_seqs(row["seq_from"], row["seq_to"]) or [None])})
    valid: Validity = False if certain else (UNKNOWN if possible else True)
    details: dict[str, Any] = {
        "zombie_writes": count,
        "findings": len(certain),
        "possible": len(possible),
        "by_rule": {rule: sum(1 for row in certain if row["rule"] == rule)
                    for rule in ("overwrite", "late_send", "foreign_epoch", "checkpoint_overwrite")},
        "unexplained_epochs": unexplained,
        "judged_items": len(items),
        "clock_tolerance_ms": tolerance,
        "examples": findings[:DETAIL_ROWS],
    }
    return CheckResult("zombie_writes", valid, details, {"zombie_writes": findings})


def late_landings(history: Events, writes: pd.DataFrame | None = None) -> pd.DataFrame:
    """Writes that landed, or may have landed, after a newer owner's acknowledged write of the same seq had
    been sent (``LANDING_COLUMNS``; ``landed_after``: that write's ``sent``):

    - ``certain``: the stored item is the older write's (rule a: it landed over the newer one);
    - possible (``certain`` false): the older write (epoch below the newer one's, both ``ok``) was answered
      only after the newer one was sent, and the store does not hold the older write's item: whichever
      landed first, the older one may have landed while the newer owner consumed.  Judged only when the
      final scan kept the items' writers (older histories: no such row).

    ``writes``: ``consuming.accepted_writes(history)`` when already computed."""
    items = stored_items(history)
    writes = scanned_writes(history, writes if writes is not None else accepted_writes(history))
    grants = _Grants(history)
    rows = [{"pk": r["pk"], "consumer": r["writer"], "epoch": r["epoch"], "seq": r["seq_from"],
             "landed_after": r["superseded_t"], "certain": True} for r in _overwrites(items, writes, grants)]
    rows.extend(_interleaved(items, writes.loc[~writes["pk"].isin(grants.unfenced)]))
    return pd.DataFrame(rows, columns=LANDING_COLUMNS)


def scan_start(history: Events) -> float:
    """When the final scan began: ``run.stop``'s ``t``, else the first ``final.*`` event's (inf: no scan)."""
    for types in ("run.stop", ["final.persisted", "final.connection"]):
        times = select(history, types, ["t"])["t"]
        if len(times):
            return float(times.min())
    return float("inf")


def scanned_writes(history: Events, writes: pd.DataFrame) -> pd.DataFrame:
    """The ``writes`` answered before the final scan began: those the scan must reflect."""
    return writes.loc[writes["answered_t"].to_numpy() < scan_start(history)]


def _interleaved(items: pd.DataFrame, writes: pd.DataFrame) -> list[Row]:
    """The possible late landings of ``late_landings``."""
    if items.empty or items["consumer"].isna().all():
        return []
    holder = {(pk, seq): (consumer, epoch) for pk, seq, consumer, epoch
              in zip(items["pk"], items["seq"], items["consumer"], items["epoch"], strict=True)}
    ok = writes.loc[writes["certain"].to_numpy() & (writes["type"] == "msg.persist").to_numpy()
                    & writes["epoch"].notna().to_numpy()]
    rows: list[Row] = []
    for pk, index in ok.groupby("pk", sort=False).indices.items():
        group = ok.iloc[index]
        sent, answered = group["t"].to_numpy(), group["answered_t"].to_numpy()
        epochs, first, last = group["epoch"].to_numpy(), group["seq_from"].to_numpy(), group["seq_to"].to_numpy()
        consumers = group["consumer"].to_numpy(dtype=object)
        for a in range(len(group)):
            newer = np.flatnonzero((epochs > epochs[a]) & (sent < answered[a]) & (first <= last[a])
                                   & (last >= first[a]))
            for b in newer[np.argsort(sent[newer], kind="stable")]:
                seqs = range(int(max(first[a], first[b])), int(min(last[a], last[b])) + 1)
                unheld = [q for q in seqs if holder.get((pk, float(q))) != (consumers[a], epochs[a])]
                if unheld:
                    rows.append({"pk": pk, "consumer": consumers[a], "epoch": epochs[a], "seq": unheld[0],
                                 "landed_after": max(sent[a], sent[b]), "certain": False})
                    break
    return rows


def _finding(pk: Any, kind: str, seq_from: Any, seq_to: Any, writer: Any, epoch: Any, rule: str, certain: bool,
             sent_t: Any, superseded_t: Any, evidence: str) -> Row:
    values = (pk, kind, _int(seq_from), _int(seq_to), writer, _int(epoch), rule, certain, _float(sent_t),
              _float(superseded_t), evidence)
    return dict(zip(ZOMBIE_WRITE_COLUMNS, values, strict=True))


def _overwrites(items: pd.DataFrame, writes: pd.DataFrame, grants: _Grants) -> list[Row]:
    """Rule (a)."""
    newer = writes.loc[writes["certain"].to_numpy() & (writes["type"] == "msg.persist").to_numpy()
                       & writes["epoch"].notna().to_numpy() & ~writes["pk"].isin(grants.unfenced).to_numpy()]
    newer = newer.sort_values("t", kind="stable")
    found: list[Row] = []
    if newer.empty or items.empty:
        return found
    columns = {name: newer[name].to_numpy() for name in ("t", "pk", "consumer", "epoch", "seq_from", "seq_to")}
    by_pk = newer.groupby("pk", sort=False).indices
    for item in items.loc[items["epoch"].notna()].itertuples(index=False):
        index = by_pk.get(item.pk)
        if index is None:
            continue
        index = np.sort(index)
        hit = index[(columns["epoch"][index] > item.epoch) & (columns["seq_from"][index] <= item.seq)
                    & (columns["seq_to"][index] >= item.seq)]
        if hit.size:
            first = hit[0]
            found.append(_finding(
                item.pk, "message", item.seq, item.seq, item.consumer, item.epoch, "overwrite", True,
                item.sent_ms, columns["t"][first],
                f"stored from epoch {_int(item.epoch)} although {columns['consumer'][first]} (epoch "
                f"{_int(columns['epoch'][first])}) wrote this seq with outcome ok (sent at {columns['t'][first]:.0f})"))
    return found


def _late_sends(items: pd.DataFrame, writes: pd.DataFrame, grants: _Grants, tolerance: float) -> list[Row]:
    """Rule (b), on stored items (their ``sent_ms``) and on acknowledged writes (their ``sent``)."""
    found: list[Row] = []
    dated = items.loc[items["sent_ms"].notna()]
    for item in _after_supersession(dated, "sent_ms", grants, tolerance):
        found.append(_finding(
            item.pk, "message", item.seq, item.seq, item.consumer, item.epoch, "late_send", True,
            item.sent_ms, item.superseded_t,
            f"stored item built at {item.sent_ms:.0f}, {item.sent_ms - item.superseded_t:.0f} ms after its "
            f"ownership was superseded (clock tolerance {tolerance:.0f} ms)"))
    for write in _after_supersession(writes, "t", grants, 0.0):
        kind = "checkpoint" if write.type == "checkpoint" else "message"
        found.append(_finding(
            write.pk, kind, write.seq_from, write.seq_to, write.consumer, write.epoch, "late_send",
            bool(write.certain), write.t, write.superseded_t,
            f"{write.type} sent at {write.t:.0f}, {write.t - write.superseded_t:.0f} ms after its ownership was "
            f"superseded; outcome {'ok' if write.certain else 'info (may have landed)'}"))
    return found


def _after_supersession(frame: pd.DataFrame, sent: str, grants: _Grants, margin: float) -> list[Any]:
    """The rows of ``frame`` (pk, consumer, epoch and a send time column) sent more than ``margin`` after
    their ownership was superseded, as named tuples with ``superseded_t``."""
    if frame.empty:
        return []
    superseded = np.full(len(frame), np.nan)
    epochs = frame["epoch"].to_numpy(dtype="float64")
    sents = frame[sent].to_numpy(dtype="float64")
    for (pk, consumer), index in frame.groupby(["pk", "consumer"], sort=False, dropna=False).indices.items():
        superseded[index] = grants.superseded_at(str(pk), str(consumer), epochs[index], sents[index])
    late = ~np.isnan(superseded) & (sents > superseded + margin)
    return list(frame.assign(superseded_t=superseded).loc[late].itertuples(index=False))


def _checkpoints(history: Events) -> pd.DataFrame:
    """The checkpoint on each connection item at the end (``final.connection``), as items."""
    final = select(history, "final.connection", ["pk", "last_seq", "ckpt_worker", "ckpt_gen", "ckpt_epoch"])
    final = final.loc[final["pk"].notna() & final["ckpt_worker"].notna()]
    frame = pd.DataFrame({"worker": final["ckpt_worker"], "src": "?", "gen": final["ckpt_gen"]})
    return pd.DataFrame({"pk": final["pk"], "seq": pd.to_numeric(final["last_seq"], errors="coerce"),
                         "consumer": consumer_of(frame),
                         "epoch": pd.to_numeric(final["ckpt_epoch"], errors="coerce")}).reset_index(drop=True)


def _foreign_epochs(items: pd.DataFrame, checkpoints: pd.DataFrame, grants: _Grants) -> tuple[list[Row], int]:
    """Rule (c) over message items and the final checkpoints; and how many epochs no acquire granted."""
    found: list[Row] = []
    unexplained = 0
    for kind, frame in (("message", items), ("checkpoint", checkpoints)):
        judged = frame["epoch"].notna() & frame["consumer"].notna() & ~frame["pk"].isin(grants.unfenced)
        for item in frame.loc[judged].itertuples(index=False):
            by_ok, by_any = grants.granted(item.pk, item.epoch)
            if not by_any:
                unexplained += 1
            elif by_ok and not any(same_consumer(owner, item.consumer) for owner in by_any):
                found.append(_finding(
                    item.pk, kind, item.seq, item.seq, item.consumer, item.epoch, "foreign_epoch", True, None, None,
                    f"epoch {_int(item.epoch)} was granted to {', '.join(sorted(set(by_ok)))}, never to the writer"))
    return found, unexplained


def _checkpoint_overwrites(history: Events, writes: pd.DataFrame, grants: _Grants) -> list[Row]:
    """Rule (d)."""
    found: list[Row] = []
    newer = writes.loc[writes["certain"].to_numpy() & (writes["type"] == "checkpoint").to_numpy()]
    for item in _checkpoints(history).itertuples(index=False):
        if np.isnan(item.epoch) or item.pk in grants.unfenced:
            continue
        hit = newer.loc[(newer["pk"] == item.pk) & (newer["epoch"] > item.epoch)]
        if len(hit):
            first = hit.sort_values("t", kind="stable").iloc[0]
            found.append(_finding(
                item.pk, "checkpoint", item.seq, item.seq, item.consumer, item.epoch, "checkpoint_overwrite", True,
                None, first["t"],
                f"the connection item's checkpoint is from epoch {_int(item.epoch)} although {first['consumer']} "
                f"checkpointed under epoch {_int(first['epoch'])} with outcome ok"))
    return found


def _seqs(seq_from: int | None, seq_to: int | None) -> range:
    if seq_from is None:
        return range(0)
    return range(seq_from, (seq_to if seq_to is not None else seq_from) + 1)


def _int(value: Any) -> int | None:
    return None if value is None or value != value else int(value)


def _float(value: Any) -> float | None:
    return None if value is None or value != value else float(value)
