"""Tests of fleet.control_journal: which journal entries a connections table is re-applied from, and the dated
desired-state write (pure)."""

from __future__ import annotations

from fleet.control_journal import Entry, dated, journal_item, to_reapply
from fleet.expr import Update, Write


def test_the_journal_entries_a_table_disagrees_with_are_re_applied_in_the_journal_order() -> None:
    items = [
        {"pk": "CTL#a", "event_type": "STOP", "journal_ms": 30},
        {"pk": "CONN#a", "desired_state": "STARTED", "desired_at_ms": 25},  # reverted to the START before
        {"pk": "CTL#g", "event_type": "START", "journal_ms": 40},
        {"pk": "CONN#g", "desired_state": "STOPPED", "desired_at_ms": 50},  # a STOP whose entry is in flight
        {"pk": "CTL#b", "event_type": "START", "journal_ms": 20, "ws_url": "ws://h/b"},  # no item: lost
        {"pk": "CTL#c", "event_type": "STOP", "journal_ms": 10},  # no item: a STOP of nothing (404)
        {"pk": "CTL#d", "event_type": "START", "journal_ms": 5}, {"pk": "CONN#d", "desired_state": "STARTED"},
        {"pk": "CTL#e", "event_type": "STOP", "journal_ms": 1}, {"pk": "CONN#e", "desired_state": "STOPPED"},
        {"pk": "CONN#f", "desired_state": "STARTED"},  # never journalled (before the journal was on)
    ]
    assert to_reapply(items) == [Entry("START", "b", "ws://h/b", 20), Entry("STOP", "a", None, 30)]


def test_a_journal_item_names_its_stream_and_a_dated_write_sets_desired_at_ms() -> None:
    assert journal_item(Entry("START", "c1", "ws://h/c1", 7)) == {
        "pk": "CTL#c1", "event_type": "START", "journal_ms": 7, "ws_url": "ws://h/c1"}
    assert journal_item(Entry("STOP", "c1", None, 8)) == {"pk": "CTL#c1", "event_type": "STOP", "journal_ms": 8}
    write = Write(key={"pk": "CONN#c1"}, update=Update(set={"desired_state": "STOPPED"}))
    assert dated(write, None) == write
    assert dated(write, 8).update.set == {"desired_state": "STOPPED", "desired_at_ms": 8}
