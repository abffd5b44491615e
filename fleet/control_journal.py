"""The router's control journal, pure (items in, items and decisions out; ``fleet.router`` does the I/O).

With a standby region (``control_journal`` on), Global Tables resolve conflicts per item, last writer wins, and
workers write the connection item too: a STOP acknowledged just before a cut, not yet replicated, would be
overwritten everywhere by the standby's later lease writes of an item that still says STARTED.  So the router
first puts each START and STOP in its stream's journal item (``journal_item``: ``CTL#<id>`` in the connections
table, written by routers only), then makes the desired-state write dated as the entry (``dated``:
``desired_at_ms``).  When a region is activated its router re-applies each entry its connection item disagrees
with and predates (``to_reapply``), as of the entry's date and without a new journal write (either would win
last-writer-wins over a later event's entry or state still on its way from the other region).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from fleet.expr import Write
from fleet.schema import CONN_PREFIX, JOURNAL_PREFIX, conn_pk, journal_pk


@dataclass(frozen=True)
class Entry:
    """One journalled control write: ``ws_url`` is set exactly when ``kind`` is START."""

    kind: str
    connection_id: str
    ws_url: str | None
    journal_ms: int


def journal_item(entry: Entry) -> dict[str, Any]:
    """The journal item of ``entry`` (plain values)."""
    item: dict[str, Any] = {"pk": journal_pk(entry.connection_id), "event_type": entry.kind,
                            "journal_ms": entry.journal_ms}
    if entry.ws_url is not None:
        item["ws_url"] = entry.ws_url
    return item


def dated(write: Write, desired_at_ms: int | None) -> Write:
    """``write`` also setting ``desired_at_ms`` (None: unchanged, no journal)."""
    if desired_at_ms is None:
        return write
    return replace(write, update=replace(write.update, set={**write.update.set, "desired_at_ms": desired_at_ms}))


def to_reapply(items: Iterable[Mapping[str, Any]]) -> list[Entry]:
    """From the connections table's items (plain values): each stream's journal entry that its connection item
    disagrees with (a START whose item is absent or not STARTED, a STOP whose item is not STOPPED) and whose
    desired state is older (``desired_at_ms``, absent: older): the journal entry of a newer desired state can
    arrive after it, as replication keeps order per item only.  In the order of the journal's dates."""
    journal: list[Mapping[str, Any]] = []
    desired: dict[str, tuple[str, float]] = {}
    for item in items:
        pk = str(item.get("pk", ""))
        if pk.startswith(JOURNAL_PREFIX):
            journal.append(item)
        elif pk.startswith(CONN_PREFIX):
            desired[pk] = (str(item.get("desired_state", "")), float(item.get("desired_at_ms", -math.inf)))
    entries: list[Entry] = []
    for item in sorted(journal, key=lambda e: float(e.get("journal_ms", 0))):
        connection_id = str(item["pk"])[len(JOURNAL_PREFIX):]
        kind, journal_ms = str(item.get("event_type")), int(item.get("journal_ms", 0))
        state, desired_at = desired.get(conn_pk(connection_id), (None, -math.inf))
        if desired_at >= journal_ms:
            continue  # a newer desired state, whose journal entry has not arrived yet
        if kind == "START" and state != "STARTED":
            entries.append(Entry("START", connection_id, str(item.get("ws_url", "")), journal_ms))
        elif kind == "STOP" and state not in (None, "STOPPED"):
            entries.append(Entry("STOP", connection_id, None, journal_ms))
    return entries
