"""Tests of harness.region.routing_control: failovers are serialised, so two that overlap never leave both
regions On; a later change supersedes one still waiting (for its wait, or for its target after it)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fleet.region_gate import OFF, ON
from harness.region.routing_control import HOLD, READY_EVERY_S, RoutingControls, SafetyRuleViolation

EAST, WEST = "us-east-1", "us-west-2"


@pytest.fixture
def controls() -> Iterator[RoutingControls]:
    authority = RoutingControls([EAST, WEST], EAST, lambda *_, **__: None, {})
    yield authority


def _scripted_waits(monkeypatch: pytest.MonkeyPatch, script: dict[str, Callable[[], None]]) -> list[float]:
    """Replace the authority's wait by ``script[thread name]`` (each failover runs in a named thread), so
    the test chooses the interleaving; returns the durations asked for."""
    asked: list[float] = []

    def wait(seconds: float) -> None:
        asked.append(seconds)
        script[threading.current_thread().name]()

    monkeypatch.setattr(time, "sleep", wait)
    return asked


def test_two_overlapping_failovers_never_leave_both_regions_on(controls: RoutingControls,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A turns east Off and waits; B turns west Off and waits; A's wait ends (it would turn west On); then
    B's (it would turn east On).  Serialised, the later change (B's) wins and A's does nothing."""
    a_waiting, b_waiting = threading.Event(), threading.Event()
    a = threading.Thread(target=controls.fail_over, args=(EAST, WEST, 1.0), name="A")
    b = threading.Thread(target=controls.fail_over, args=(WEST, EAST, 1.0), name="B")

    def a_waits() -> None:
        a_waiting.set()
        assert b_waiting.wait(10)

    def b_waits() -> None:
        b_waiting.set()
        a.join(10)  # A has done whatever it does after its wait

    _scripted_waits(monkeypatch, {"A": a_waits, "B": b_waits})
    a.start()
    assert a_waiting.wait(10)
    b.start()
    a.join(10)
    b.join(10)
    assert not a.is_alive() and not b.is_alive()
    assert regions(controls) == {EAST: ON, WEST: OFF}


def test_a_failover_turns_the_new_region_on_after_the_wait_it_was_given(controls: RoutingControls,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, str]] = []
    asked = _scripted_waits(monkeypatch, {"C": lambda: seen.append(dict(controls.states))})
    change = threading.Thread(target=controls.fail_over, args=(EAST, WEST, 2.5), name="C")
    change.start()
    change.join(10)
    assert asked == [2.5]
    assert seen == [{EAST: OFF, WEST: OFF, HOLD: ON}]  # during the wait, neither region: the hold
    assert controls.states == {EAST: OFF, WEST: ON, HOLD: OFF}


def test_every_change_is_in_the_history_with_its_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[dict[str, Any]] = []
    authority = RoutingControls([EAST, WEST], EAST, lambda kind, **fields: events.append({"type": kind, **fields}), {})
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    authority.fail_over(EAST, WEST, 1.0)
    assert [(e["region"], e["state"], e.get("generation")) for e in events] == [
        (EAST, ON, 0), (WEST, OFF, 0), (HOLD, OFF, 0), (EAST, OFF, 1), (HOLD, ON, 1), (WEST, ON, 1), (HOLD, OFF, 1)]


def test_the_assertion_rule_refuses_a_change_that_leaves_no_control_on(controls: RoutingControls) -> None:
    with pytest.raises(SafetyRuleViolation):
        controls.set({EAST: OFF})
    assert controls.states == {EAST: ON, WEST: OFF, HOLD: OFF}
    controls.set({EAST: OFF, HOLD: ON})  # with the hold: allowed
    controls.set({WEST: ON, HOLD: OFF})
    assert controls.states == {EAST: OFF, WEST: ON, HOLD: OFF}


def regions(controls: RoutingControls) -> dict[str, str]:
    return {region: controls.states[region] for region in (EAST, WEST)}


def test_fresh_state_for_the_next_run_supersedes_a_failover_still_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch's run ended while its failover waited: the next run's fresh controls (east On) stay as they
    are when that wait ends, and the next run's history has its own initial states."""
    last, next_run = [], []
    authority = RoutingControls([EAST, WEST], EAST, lambda kind, **fields: last.append(fields), {})
    authority.down(1)

    def next_run_begins() -> None:
        authority.fresh(EAST, lambda kind, **fields: next_run.append(fields))

    _scripted_waits(monkeypatch, {"D": next_run_begins})
    waiting = threading.Thread(target=authority.fail_over, args=(EAST, WEST, 1.0), name="D")
    waiting.start()
    waiting.join(10)
    assert authority.states == {EAST: ON, WEST: OFF, HOLD: OFF} and authority.out == set()
    assert [(e["region"], e["state"]) for e in next_run] == [(EAST, ON), (WEST, OFF), (HOLD, OFF)]
    assert [(e["region"], e["state"]) for e in last][-2:] == [(EAST, OFF), (HOLD, ON)]


def test_a_failover_whose_target_cannot_take_the_activation_after_the_wait_gives_up_and_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The target is read again after the wait (``ready``): unfit, it stays Off with the hold On (no region
    active, nothing consumes), and the history says the failover gave up."""
    events: list[dict[str, Any]] = []
    authority = RoutingControls([EAST, WEST], EAST, lambda kind, **fields: events.append({"type": kind, **fields}), {})
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    assert authority.fail_over(EAST, WEST, 1.0, ready=lambda: False) == "abandoned"
    assert authority.states == {EAST: OFF, WEST: OFF, HOLD: ON}
    assert events[-1] == {"type": "failover.abandoned", "region": WEST, "generation": 1}
    assert authority.fail_over(WEST, EAST, 1.0, ready=lambda: True) == "activated"
    assert authority.states == {EAST: ON, WEST: OFF, HOLD: OFF}


def test_the_activation_is_told_at_the_instant_the_new_region_turns_on_and_only_then(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``activated`` runs with the failover's generation while the new region is On and before any other
    change (what the region holds then is what it starts from); a failover that gave up or was superseded
    activates nothing."""
    authority = RoutingControls([EAST, WEST], EAST, lambda *_, **__: None, {})
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    told: list[tuple[int, dict[str, str]]] = []

    def activated(generation: int) -> None:
        told.append((generation, dict(authority.states)))

    assert authority.fail_over(EAST, WEST, 1.0, ready=lambda: False, activated=activated) == "abandoned"
    assert told == []
    assert authority.fail_over(WEST, EAST, 1.0, activated=activated) == "activated"
    assert told == [(2, {EAST: ON, WEST: OFF, HOLD: OFF})]


def test_after_its_wait_a_failover_asks_its_target_again_until_it_may_turn_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``ready`` not yet (None: the target still lacks the old region's writes) keeps both regions Off and
    the hold On, asking again every ``READY_EVERY_S``; once it says yes the target turns On."""
    authority = RoutingControls([EAST, WEST], EAST, lambda *_, **__: None, {})
    asked = _scripted_waits(monkeypatch, {"F": lambda: None})
    seen: list[dict[str, str]] = []
    answers = iter([None, None, True])

    def ready() -> bool | None:
        seen.append(regions(authority))
        return next(answers)

    outcome: list[str] = []
    change = threading.Thread(target=lambda: outcome.append(authority.fail_over(EAST, WEST, 2.0, ready)), name="F")
    change.start()
    change.join(10)
    assert outcome == ["activated"]
    assert asked == [2.0, READY_EVERY_S, READY_EVERY_S]
    assert seen == [{EAST: OFF, WEST: OFF}] * 3
    assert authority.states == {EAST: OFF, WEST: ON, HOLD: OFF}


def test_a_failover_waiting_for_its_target_is_superseded_by_a_later_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """While A waits for its target (replication not drained), B moves the activation back: A stops asking
    and turns nothing On."""
    authority = RoutingControls([EAST, WEST], EAST, lambda *_, **__: None, {})
    polls: list[int] = []

    def a_waits() -> None:
        polls.append(len(polls))
        if len(polls) == 2:  # A's first poll: B runs to its end meanwhile
            b = threading.Thread(target=authority.fail_over, args=(WEST, EAST, 1.0), name="B")
            b.start()
            b.join(10)

    _scripted_waits(monkeypatch, {"A": a_waits, "B": lambda: None})
    asked_a: list[None] = []
    outcome: list[str] = []
    a = threading.Thread(target=lambda: outcome.append(authority.fail_over(
        EAST, WEST, 1.0, lambda: asked_a.append(None))), name="A")
    a.start()
    a.join(10)
    assert outcome == ["superseded"]
    assert len(asked_a) == 2 and len(polls) == 2
    assert authority.states == {EAST: ON, WEST: OFF, HOLD: OFF}
