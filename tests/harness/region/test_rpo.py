"""Tests of harness.region.rpo over literal histories: each checker counts what the primary acknowledged and
the standby lacks, and counts nothing when the standby has it (so each can fail)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.region.rpo import lost_control_writes, lost_messages

CUT = 10_000.0


def history(*events: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(list(events))


def persist(t: float, src: str, pk: str, first: int, last: int) -> dict[str, Any]:
    return {"t": t, "src": src, "type": "msg.persist", "outcome": "ok", "pk": pk, "seq_from": first, "seq_to": last}


def event(t: float, src: str, kind: str, pk: str, status: int = 200) -> dict[str, Any]:
    return {"t": t, "src": src, "type": "event", "kind": kind, "pk": pk, "status": status}


def test_messages_acknowledged_in_the_primary_and_absent_in_the_standby_are_lost() -> None:
    frame = history(persist(9_000, "east-worker-1", "CONN#a", 1, 10), persist(9_500, "east-worker-1", "CONN#a", 11, 12),
                    persist(11_000, "east-worker-1", "CONN#a", 13, 14),  # after the cut: never acknowledged
                    persist(9_000, "west-worker-1", "CONN#b", 1, 5))     # the standby's own: not judged
    result = lost_messages(frame, CUT, "east", {"CONN#a": set(range(1, 11))})
    assert result == {"lost": 2, "skipped_by_checkpoint": 0, "streams": {"CONN#a": [11, 12]}}
    assert lost_messages(frame, CUT, "east", {"CONN#a": set(range(1, 13))})["lost"] == 0


def test_starts_and_stops_acknowledged_near_the_cut_and_missing_or_reverted_in_the_standby_are_counted() -> None:
    frame = history(event(9_000, "east-router", "START", "CONN#a"),      # lost: no item in the standby
                    event(9_200, "east-router", "STOP", "CONN#b"),       # reverted: the standby has STARTED
                    event(9_300, "east-router", "START", "CONN#c"),      # replicated: fine
                    event(1_000, "east-router", "START", "CONN#d"),      # outside the window
                    event(9_400, "east-router", "START", "CONN#e"),
                    event(12_000, "west-router", "STOP", "CONN#e"),      # a later event decides
                    event(9_500, "east-router", "START", "CONN#f", status=503))  # never acknowledged
    standby = {"CONN#b": "STARTED", "CONN#c": "STARTED", "CONN#e": "STOPPED"}
    result = lost_control_writes(frame, CUT, "east", 5_000, standby)
    assert (result["starts"], result["stops"]) == (1, 1)
    assert {(w["pk"], w["how"]) for w in result["writes"]} == {("CONN#a", "lost"), ("CONN#b", "reverted")}
    caught_up = {**standby, "CONN#a": "STARTED", "CONN#b": "STOPPED"}
    assert lost_control_writes(frame, CUT, "east", 5_000, caught_up)["writes"] == []


def test_a_checkpoint_that_reached_the_standby_before_the_messages_it_covers_is_detected() -> None:
    """The standby resumed from seq 13 (its checkpoint said 12) while 11 and 12 never arrived: skipped."""
    opened = {"t": 12_000, "src": "west-worker-1", "type": "ws.open", "outcome": "ok", "pk": "CONN#a",
              "from_seq": 13}
    frame = history(persist(9_000, "east-worker-1", "CONN#a", 1, 10), persist(9_500, "east-worker-1", "CONN#a", 11, 12),
                    opened)
    result = lost_messages(frame, CUT, "east", {"CONN#a": set(range(1, 11)) | {13, 14}})
    assert (result["lost"], result["skipped_by_checkpoint"]) == (2, 2)
    replayed = {**opened, "from_seq": 11}  # resumed from what it had: the replay brings 11 and 12 back
    assert lost_messages(history(*frame.to_dict("records")[:2], replayed), CUT, "east",
                         {"CONN#a": set(range(1, 11))})["skipped_by_checkpoint"] == 0
