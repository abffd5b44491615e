"""RPO as data lost: checkers over a region run's history and what the standby stored, pure (a history frame
and table contents in, counts and the lost items out).

- ``lost_messages``: the sequences the primary's workers had stored, acknowledged (``msg.persist`` ok,
  src ``<primary>-...``) before the cut, that the standby's messages table lacks once the standby has
  taken over and replication has delivered what it could: written in the primary, never replicated, and
  not stored again by the standby (the upstream's replay did not reach back to them).  Those below the
  sequence the standby first resumed the stream from (its first ``ws.open`` ``from_seq`` after the cut)
  are counted apart (``skipped_by_checkpoint``): a checkpoint that reached the standby before the
  messages it covers made it resume past them.
- ``lost_control_writes``: the STARTs and STOPs the primary's router acknowledged (``event`` status 2xx,
  src ``<primary>-router``) within ``window_ms`` before the cut, whose effect the standby's connections
  table does not show: a START whose item is absent or not STARTED, a STOP whose item is still STARTED,
  unless a later acknowledged event of the same stream (in either region) explains it.  Lost means the
  write never reached the standby; reverted, that an older image overwrote it there.

Both are zero by construction only when replication had caught up at the cut; each literal test of
tests/harness/region/test_rpo.py shows them counting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd


def lost_messages(history: pd.DataFrame, cut_ms: float, primary: str,
                  standby_stored: Mapping[str, set[int]]) -> dict[str, Any]:
    """``standby_stored``: stream pk -> the sequences the standby's messages table holds."""
    persisted = history[(history["type"] == "msg.persist") & (history["outcome"] == "ok")
                        & history["src"].astype(str).str.startswith(f"{primary}-") & (history["t"] < cut_ms)]
    lost: dict[str, list[int]] = {}
    for row in persisted.itertuples():
        missing = [seq for seq in range(int(row.seq_from), int(row.seq_to) + 1)
                   if seq not in standby_stored.get(str(row.pk), set())]
        if missing:
            lost.setdefault(str(row.pk), []).extend(missing)
    opens = history[(history["type"] == "ws.open") & (history["outcome"] == "ok") & (history["t"] > cut_ms)
                    & ~history["src"].astype(str).str.startswith(f"{primary}-")].sort_values("t")
    resumed_from = opens.groupby("pk")["from_seq"].first().to_dict() if not opens.empty else {}
    skipped = sum(1 for pk, seqs in lost.items() for seq in set(seqs) if seq < resumed_from.get(pk, 0))
    return {"lost": sum(len(set(seqs)) for seqs in lost.values()), "skipped_by_checkpoint": skipped,
            "streams": {pk: sorted(set(seqs)) for pk, seqs in sorted(lost.items())}}


def lost_control_writes(history: pd.DataFrame, cut_ms: float, primary: str, window_ms: float,
                        standby_states: Mapping[str, str]) -> dict[str, Any]:
    """``standby_states``: stream pk -> the desired state the standby's connections table holds (absent:
    no item)."""
    events = history[(history["type"] == "event") & history["status"].between(200, 299)
                     & history["kind"].isin(["START", "STOP"])].sort_values("t")
    latest = events.groupby("pk").tail(1).set_index("pk")
    near = events[events["src"].astype(str).str.startswith(f"{primary}-") & (events["t"] < cut_ms)
                  & (events["t"] >= cut_ms - window_ms)]
    counts = {"START": 0, "STOP": 0}
    found: list[dict[str, Any]] = []
    for row in near.itertuples():
        if latest.loc[row.pk, "t"] != row.t:
            continue  # a later acknowledged event of the stream decides its state
        state = standby_states.get(str(row.pk))
        wanted = "STARTED" if row.kind == "START" else "STOPPED"
        if state != wanted and not (row.kind == "STOP" and state is None):
            counts[str(row.kind)] += 1
            found.append({"pk": row.pk, "kind": row.kind, "acknowledged_ms": row.t,
                          "standby": state or "absent", "how": "lost" if state is None else "reverted"})
    return {"starts": counts["START"], "stops": counts["STOP"], "writes": found}
