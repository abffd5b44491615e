"""Tests of harness.region.regions' failover as the automation runs it, its parts replaced by literal ones (no
region started): after the activation wait it waits for what the new region lacks of the old region's writes
while the old region's DynamoDB answers, up to its bound, and the history says how long and, at the bound,
what was still lacking."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.region.regions import AWS_REGIONS, RegionsSpec, TwoRegions
from harness.region.routing_control import RoutingControls

LACKED = {"table": "wsfleet-messages", "key": {"pk": "CONN#a", "sk": 9}, "age_ms": 180.0, "held": None,
          "coming": {"pk": "CONN#a", "sk": 9}}


class Lacking:
    """Global Tables as a failover reads them: at each read, how many writes the new region still lacks (the
    last count repeats)."""

    def __init__(self, counts: list[int]) -> None:
        self.counts = counts

    def missing(self, region: str) -> list[dict[str, Any]]:
        count = self.counts.pop(0) if len(self.counts) > 1 else self.counts[0]
        return [LACKED] * count


@pytest.fixture
def failing_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., list[dict[str, Any]]]]:
    """Runs one failover from east to west with the activation wait of 2 s, on a clock that moves only when
    the failover waits (``time.sleep``), and returns the route53 history it wrote (its outcome first)."""
    clock = [1_000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(time, "sleep", lambda seconds: clock.__setitem__(0, clock[0] + seconds))
    opened: list[RoutingControls] = []

    def run(counts: list[int], answering: set[str], replication_wait_s: float | None = None) -> list[dict[str, Any]]:
        spec = RegionsSpec(run_dir=tmp_path / str(len(opened)), activation_wait_s=2.0,
                           replication_wait_s=replication_wait_s)
        regions = TwoRegions(spec)
        regions.controls = RoutingControls(list(AWS_REGIONS.values()), AWS_REGIONS["east"], regions.route53.emit, {})
        opened.append(regions.controls)
        regions.tables = Lacking(counts)  # type: ignore[assignment]
        monkeypatch.setattr(regions, "store_answers", lambda region: region in answering)
        monkeypatch.setattr(regions, "_reapply_journal", lambda region: None)
        outcome = regions.fail_over("east", "west")
        regions.route53.close()
        lines = (spec.run_dir / "history" / "route53.jsonl").read_text().splitlines()
        return [{"outcome": outcome}, *(json.loads(line) for line in lines)]

    yield run
    for controls in opened:
        for server in controls.servers:
            server.server_close()


def told(history: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k not in ("t", "src", "type")} for e in history if e.get("type") == kind]


def test_a_gray_failover_waits_until_the_primarys_last_writes_have_landed(failing_over: Any) -> None:
    """The primary's DynamoDB answers (a gray failure), and the standby lacks 3, then 2, then none of its
    writes: the standby turns On only then, two polls (100 ms) after the activation wait."""
    history = failing_over([3, 2, 0], answering={"east", "west"})
    assert history[0] == {"outcome": "activated"}
    assert told(history, "failover.unreplicated") == []
    missing = told(history, "activation.missing")
    decided_ms = missing[0].pop("decided_ms")  # the last looks, made before the On they allowed
    assert missing == [{"region": "us-west-2", "generation": 1, "other": "us-east-1", "items": [], "waited_ms": 100.0}]
    on = [e["t"] for e in history[1:] if e.get("type") == "gate.state" and e["state"] == "On"
          and e["region"] == "us-west-2"]
    assert len(on) == 1 and decided_ms <= on[0]


def test_a_failover_whose_primarys_store_is_out_activates_at_once(failing_over: Any) -> None:
    history = failing_over([3], answering={"west"})
    assert history[0] == {"outcome": "activated"}
    assert told(history, "failover.unreplicated") == []
    [lacked] = told(history, "activation.missing")
    assert (len(lacked["items"]), lacked["waited_ms"]) == (3, 0.0)


def test_a_failover_whose_replication_wait_reaches_its_bound_activates_and_says_what_was_lacking(
        failing_over: Any) -> None:
    """A replication pause: the 3 writes never land.  At the bound (0.22 s: the fifth poll, 250 ms) the
    standby turns On anyway, and the history says so; a bound of 0 waits for nothing and says nothing."""
    history = failing_over([3], answering={"east", "west"}, replication_wait_s=0.22)
    assert history[0] == {"outcome": "activated"}
    assert told(history, "failover.unreplicated") == [{"region": "us-west-2", "generation": 1, "other": "us-east-1",
                                                       "waited_ms": 250.0, "items": [LACKED] * 3}]
    assert [m["waited_ms"] for m in told(history, "activation.missing")] == [250.0]
    unsafe = failing_over([3], answering={"east", "west"}, replication_wait_s=0.0)
    assert told(unsafe, "failover.unreplicated") == []
    assert [m["waited_ms"] for m in told(unsafe, "activation.missing")] == [0.0]
