"""I1 one consumer: duplicate claims, from the upstream's sessions and the accepted writes.

Consumers are incarnations (``worker@gen``, ``harness.checkers.events``): two incarnations of one worker id
are two consumers, so a restarted or re-registered worker overlapping its own old incarnation is a claim.
Per pk, each consumer consumes during the consuming parts of its sessions (``harness.checkers.consuming``)
and when its accepted writes took effect.  Wherever two different consumers consume one pk at once there is
an overlap piece: two sessions' common time (positive length), or a write by one consumer at an instant
another consumer's session covers (length 0, but it counts).

A write took effect at an unknown instant between ``sent`` and its answer.  It is placed at the earliest
instant the evidence allows: ``sent``, or later when the store says it landed later
(``harness.checkers.zombies.late_landings``): its item stored over a newer owner's acknowledged write of the
same seq (it landed after that write was sent: certain), or its answer came after a newer owner's write of
the same seq was sent and the store does not hold its item (it may have landed then: a possible claim).  A
request frozen between ``sent`` and the moment its bytes left therefore counts where it landed, not where it
was built; one answered before any newer owner wrote its seqs stays at ``sent``.

A duplicate claim is one *pair-episode*: the pieces of one pk and one pair of consumers, merged while they
follow each other within ``merge_gap_ms`` (default one lease: a zombie flushing a burst of writes after a
takeover is one claim, not one per write); its duration is the total overlap time. An episode whose only
evidence is writes with outcome ``info`` (may have been accepted) is a *possible* claim: it makes the verdict
unknown instead of false.

Beside it, informational: zombie-connection time (session time that is not consuming, and whether another
consumer consumed meanwhile) and lease-level double ownership (two consumers both believing they owned the pk,
from ``harness.checkers.consuming.lease_beliefs``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from harness.checkers.consuming import (
    Consumption,
    Intervals,
    consumption,
    covering,
    intersect,
    lease_beliefs,
    merge_intervals,
)
from harness.checkers.events import Events, RunInfo, run_info, same_consumer
from harness.checkers.result import UNKNOWN, CheckResult, Row, Validity
from harness.checkers.zombies import late_landings

EPISODE_COLUMNS = ["pk", "worker_a", "worker_b", "start", "end", "overlap_ms", "writes", "certain"]
CLAIM_COLUMNS = ["source", "pk", "worker", "session", "start", "end", "duration_ms", "overlap"]
ZOMBIE_COLUMNS = ["pk", "worker", "session", "cause", "start", "end", "duration_ms", "overlaps_other"]
LEASE_OVERLAP_COLUMNS = ["pk", "worker_a", "worker_b", "start", "end", "duration_ms"]
DETAIL_ROWS = 50  # episodes / lease overlaps listed in the verdict details (the tables hold all)
_PIECE_COLUMNS = ["pk", "worker_a", "worker_b", "start", "end", "certain", "write"]


def check_duplicate_claims(history: Events, *, merge_gap_ms: float | None = None,
                           thaw_grace_ms: float | None = None, info: RunInfo | None = None,
                           consumed: Consumption | None = None) -> CheckResult:
    info = info if info is not None else run_info(history)
    gap = merge_gap_ms if merge_gap_ms is not None else (info.duration("lease_ms") or 0.0)
    consumed = consumed if consumed is not None else consumption(history, info, thaw_grace_ms=thaw_grace_ms)
    parts, zombies = consumed.parts, consumed.zombies
    took_effect = consumed.writes.loc[~consumed.writes["never_landed"]].reset_index(drop=True)
    writes = landed_writes(took_effect, late_landings(history, took_effect))

    pieces: list[pd.DataFrame] = []
    flagged_writes: list[np.ndarray] = []
    part_overlap = np.zeros(len(parts), dtype=bool)
    zombie_overlap_ms = np.zeros(len(zombies))
    write_groups = writes.groupby("pk", sort=False).indices
    zombie_groups = zombies.groupby("pk", sort=False).indices
    for pk, part_index in parts.groupby("pk", sort=False).indices.items():
        owners = parts["consumer"].to_numpy()[part_index]
        starts, ends = parts["start"].to_numpy()[part_index], parts["end"].to_numpy()[part_index]
        merged = {w: merge_intervals(starts[owners == w], ends[owners == w]) for w in sorted(set(owners))}
        found = _session_pieces(pk, merged)
        write_index = write_groups.get(pk)
        if write_index is not None:
            write_pieces, inside = _write_pieces(pk, merged, writes.iloc[write_index])
            if inside.any():
                found.append(write_pieces)
                flagged_writes.append(write_index[inside])
        if found:
            pk_pieces = pd.concat(found, ignore_index=True)
            pieces.append(pk_pieces)
            part_overlap[part_index] = _touched(owners, starts, ends, pk_pieces)
        if pk in zombie_groups:
            index = zombie_groups[pk]
            zombie_overlap_ms[index] = _overlap_with_others(zombies.iloc[index], merged)
    all_pieces = pd.concat(pieces, ignore_index=True) if pieces else pd.DataFrame(columns=_PIECE_COLUMNS)
    episodes = _episodes(all_pieces, gap)

    beliefs = lease_beliefs(history, info)
    lease_rows, belief_overlap = _lease_overlaps(beliefs)
    flagged = np.concatenate(flagged_writes) if flagged_writes else np.empty(0, dtype=int)
    claims = _claim_rows(parts, part_overlap, beliefs, belief_overlap, writes.iloc[np.unique(flagged)])
    zombie_rows = [
        {"pk": z.pk, "worker": z.consumer, "session": z.session, "cause": z.cause, "start": z.start,
         "end": z.end, "duration_ms": z.end - z.start, "overlaps_other": bool(overlap > 0)}
        for z, overlap in zip(zombies.itertuples(index=False), zombie_overlap_ms, strict=True)
    ]

    certain = episodes.loc[episodes["certain"]]
    possible = episodes.loc[~episodes["certain"]]
    valid: Validity = False if len(certain) else (UNKNOWN if len(possible) else True)
    zombie_ms = float((zombies["end"] - zombies["start"]).sum())
    details: dict[str, Any] = {
        "duplicate_claims": len(certain),
        "duplicate_overlap_ms": float(certain["overlap_ms"].sum()),
        "possible_claims": len(possible),
        "merge_gap_ms": gap,
        "claims": episodes.head(DETAIL_ROWS).to_dict("records"),
        "sessions": len(consumed.sessions),
        "accepted_writes": int(writes["certain"].sum()),
        "zombie_sessions": int(zombies[["pk", "session"]].drop_duplicates().shape[0]),
        "zombie_ms": zombie_ms,
        "zombie_overlapping_ms": float(zombie_overlap_ms.sum()),
        "lease_overlaps": len(lease_rows),
        "lease_overlap_ms": float(sum(r["duration_ms"] for r in lease_rows)),
        "lease_overlap_examples": lease_rows[:DETAIL_ROWS],
    }
    tables = {
        "claims": claims,
        "episodes": episodes.to_dict("records"),
        "zombies": zombie_rows,
        "lease_overlaps": lease_rows,
    }
    return CheckResult("duplicate_claims", valid, details, tables)


def landed_writes(writes: pd.DataFrame, landings: pd.DataFrame) -> pd.DataFrame:
    """The accepted writes placed where the store says they landed (``zombies.late_landings``): the last write
    of a landing's writer (same pk, consumer and epoch) covering its seq is moved to ``landed_after`` when
    that is certain, and gets a copy there with ``certain`` false when it is only possible (never past its
    answer)."""
    if landings.empty or writes.empty:
        return writes
    times = writes["t"].to_numpy(dtype="float64").copy()
    answered = writes["answered_t"].to_numpy(dtype="float64")
    copies: list[int] = []
    copy_times: list[float] = []
    for landing in landings.itertuples(index=False):
        mine = np.flatnonzero((writes["pk"] == landing.pk).to_numpy() & (writes["consumer"] == landing.consumer)
                              .to_numpy() & (writes["epoch"] == landing.epoch).to_numpy()
                              & (writes["seq_from"] <= landing.seq).to_numpy() & (writes["seq_to"] >= landing.seq)
                              .to_numpy() & (writes["type"] == "msg.persist").to_numpy())
        if not mine.size:
            continue
        last = mine[np.argmax(answered[mine])]
        landed = max(times[last], min(float(landing.landed_after), answered[last]))
        if landing.certain:
            times[last] = landed
        else:
            copies.append(int(last))
            copy_times.append(landed)
    placed = writes.assign(t=times)
    if not copies:
        return placed
    possible = placed.iloc[copies].assign(t=copy_times, certain=False)
    return pd.concat([placed, possible], ignore_index=True)


def _session_pieces(pk: str, merged: dict[str, Intervals]) -> list[pd.DataFrame]:
    names = sorted(merged)
    found = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if same_consumer(a, b):
                continue
            start, end = intersect(merged[a], merged[b])
            if start.size:
                found.append(pd.DataFrame({"pk": pk, "worker_a": a, "worker_b": b, "start": start, "end": end,
                                           "certain": True, "write": False}, columns=_PIECE_COLUMNS))
    return found


def _write_pieces(pk: str, merged: dict[str, Intervals],
                  writes: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Writes at instants another worker's consuming parts cover, as pieces (one per covering worker); and
    which writes those were."""
    times = writes["t"].to_numpy()
    codes, names = pd.factorize(writes["consumer"].to_numpy(dtype=object), use_na_sentinel=False)
    labels = np.asarray(names, dtype=object).astype(str)
    writers = labels[codes]
    certain = writes["certain"].to_numpy()
    inside = np.zeros(len(writes), dtype=bool)
    found: list[pd.DataFrame] = []
    for name, intervals in merged.items():
        others = np.array([not same_consumer(writer, name) for writer in labels], dtype=bool)[codes]
        hit = others & covering(intervals, times)
        if hit.any():
            pairs = np.sort(np.stack([writers[hit], np.full(int(hit.sum()), name, dtype=object)]), axis=0)
            found.append(pd.DataFrame({"pk": pk, "worker_a": pairs[0], "worker_b": pairs[1],
                                       "start": times[hit], "end": times[hit], "certain": certain[hit],
                                       "write": True}, columns=_PIECE_COLUMNS))
            inside |= hit
    frame = pd.concat(found, ignore_index=True) if found else pd.DataFrame(columns=_PIECE_COLUMNS)
    return frame, inside


def _episodes(pieces: pd.DataFrame, gap: float) -> pd.DataFrame:
    """Merge the pieces of each (pk, pair) that follow each other within ``gap`` into episodes."""
    if pieces.empty:
        return pd.DataFrame(columns=EPISODE_COLUMNS).astype({"certain": bool})
    keys = ["pk", "worker_a", "worker_b"]
    pieces = pieces.astype({"start": "float64", "end": "float64"})
    pieces = pieces.sort_values([*keys, "start"], kind="stable")
    reach = pieces.groupby(keys, sort=False)["end"].cummax()
    before = reach.groupby([pieces[k] for k in keys], sort=False).shift()
    pieces["episode"] = (before.isna() | (pieces["start"] > before + gap)).cumsum()
    pieces["overlap_ms"] = pieces["end"] - pieces["start"]
    grouped = pieces.groupby("episode", sort=True)
    episodes = grouped.agg(pk=("pk", "first"), worker_a=("worker_a", "first"), worker_b=("worker_b", "first"),
                           start=("start", "min"), end=("end", "max"), overlap_ms=("overlap_ms", "sum"),
                           writes=("write", "sum"), certain=("certain", "any"))
    episodes["writes"] = episodes["writes"].astype("int64")
    episodes["certain"] = episodes["certain"].astype(bool)
    return episodes.reset_index(drop=True)[EPISODE_COLUMNS]


def _touched(owners: np.ndarray, starts: np.ndarray, ends: np.ndarray, pieces: pd.DataFrame) -> np.ndarray:
    """For each consuming part, whether an overlap piece of its worker touches it."""
    touched = np.zeros(owners.size, dtype=bool)
    if pieces.empty:
        return touched
    for name in set(owners):
        mine = (pieces["worker_a"] == name) | (pieces["worker_b"] == name)
        if not mine.any():
            continue
        p_start = pieces.loc[mine, "start"].to_numpy(dtype="float64")
        p_end = pieces.loc[mine, "end"].to_numpy(dtype="float64")
        rows = np.flatnonzero(owners == name)
        near = (p_start[None, :] <= ends[rows, None]) & (p_end[None, :] >= starts[rows, None])
        touched[rows] = near.any(axis=1)
    return touched


def _overlap_with_others(zombies: pd.DataFrame, merged: dict[str, Intervals]) -> np.ndarray:
    """For each zombie part, how long another worker was consuming during it."""
    result = np.zeros(len(zombies))
    rows = zip(zombies["consumer"], zombies["start"], zombies["end"], strict=True)
    for i, (owner, start, end) in enumerate(rows):
        others = [merged[name] for name in merged if not same_consumer(name, owner)]
        if others:
            union = merge_intervals(np.concatenate([s for s, _ in others]),
                                    np.concatenate([e for _, e in others]))
            piece_start, piece_end = intersect((np.array([start]), np.array([end])), union)
            result[i] = float((piece_end - piece_start).sum())
    return result


def _lease_overlaps(beliefs: pd.DataFrame) -> tuple[list[Row], np.ndarray]:
    """Pieces where two workers both believed they owned a pk; and which beliefs overlap another."""
    rows: list[Row] = []
    overlapping = np.zeros(len(beliefs), dtype=bool)
    for pk, index in beliefs.groupby("pk", sort=True).indices.items():
        owners = beliefs["consumer"].to_numpy()[index]
        starts, ends = beliefs["start"].to_numpy()[index], beliefs["end"].to_numpy()[index]
        names = sorted(set(owners))
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if same_consumer(a, b):
                    continue
                piece_start, piece_end = intersect(merge_intervals(starts[owners == a], ends[owners == a]),
                                                   merge_intervals(starts[owners == b], ends[owners == b]))
                for s, e in zip(piece_start.tolist(), piece_end.tolist(), strict=True):
                    rows.append({"pk": pk, "worker_a": a, "worker_b": b, "start": s, "end": e,
                                 "duration_ms": e - s})
                    hit = np.isin(owners, [a, b]) & (starts < e) & (ends > s)
                    overlapping[index[hit]] = True
    return rows, overlapping


def _claim_rows(parts: pd.DataFrame, part_overlap: np.ndarray, beliefs: pd.DataFrame,
                belief_overlap: np.ndarray, flagged_writes: pd.DataFrame) -> list[Row]:
    """Every consuming interval (upstream session parts, lease beliefs) and every write that overlapped
    another worker's consumption, with an ``overlap`` flag."""
    frames = [
        pd.DataFrame({"source": "upstream", "pk": parts["pk"], "worker": parts["consumer"],
                      "session": parts["session"], "start": parts["start"], "end": parts["end"],
                      "overlap": part_overlap}),
        pd.DataFrame({"source": "lease", "pk": beliefs["pk"], "worker": beliefs["consumer"], "session": None,
                      "start": beliefs["start"], "end": beliefs["end"], "overlap": belief_overlap}),
        pd.DataFrame({"source": "write", "pk": flagged_writes["pk"], "worker": flagged_writes["consumer"],
                      "session": None, "start": flagged_writes["t"], "end": flagged_writes["t"],
                      "overlap": True}),
    ]
    present = [frame for frame in frames if len(frame)]
    rows = pd.concat(present, ignore_index=True) if present else pd.DataFrame(columns=CLAIM_COLUMNS)
    rows["duration_ms"] = rows["end"] - rows["start"]
    rows = rows.sort_values(["pk", "start"], kind="stable")[CLAIM_COLUMNS]
    records: list[Row] = rows.astype(object).where(rows.notna(), None).to_dict("records")
    return records
