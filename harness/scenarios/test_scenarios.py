"""The chaos scenarios as CI gates: every scenario on ``hardened`` and ``blog``, ids like ``crash-hardened``
(``pytest harness/scenarios -k crash``).

``hardened`` must be valid: no duplicate claim, no lost sequence, recovery within its bound.  ``blog`` is
measured; where the published design is known to break an invariant the test asserts that the checkers
report that specific finding.  ``unsafe`` shows the duplicate-claims checker catches double ownership.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.checkers.verdict import write_verdict
from harness.scenarios.catalog import HANDOFF_BOUND_MS, SCENARIOS

pytestmark = pytest.mark.e2e
RunScenario = Callable[..., dict[str, Any]]


def _history(run_dir: str) -> list[dict[str, Any]]:
    events = []
    for path in sorted(Path(run_dir, "history").glob("*.jsonl")):
        events += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(events, key=lambda e: e["t"])


def _takeovers_during(events: list[dict[str, Any]], kind: str) -> int:
    """Streams of the faulted worker acquired by another worker while the fault lasted."""
    start = next(e for e in events if e["type"] == "fault.start" and e["kind"] == kind)
    stop = next(e for e in events if e["type"] == "fault.stop" and e["kind"] == kind)
    return sum(1 for e in events if e["type"] == "lease.acquire" and e.get("outcome") == "ok"
               and e.get("worker") != start["target"] and start["t"] < e["t"] < stop["t"])


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_hardened(scenario: RunScenario, name: str) -> None:
    verdict = scenario(name, "hardened")
    failing = {k: v for k, v in verdict["checkers"].items() if v["valid"] is not True}
    assert verdict["duplicate_claims"] == 0, failing
    assert verdict["lost_sequences"] == 0, failing
    assert verdict["valid"] is True, failing


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_blog(scenario: RunScenario, name: str) -> None:
    verdict = scenario(name, "blog")
    assert set(verdict["checkers"]) >= {"duplicate_claims", "sequences", "recovery", "bounds", "stop"}
    events = _history(verdict["run_dir"])
    if name == "crash":
        # the published worker subscribes live: what was emitted while nobody owned the stream is gone
        assert verdict["lost_sequences"] > 0
        assert verdict["recovery_ms"]["max"] is not None
    elif name == "graceful":
        # released leases wait for the next reconcile, one page every reconcile interval
        assert verdict["phases_ms"]["claim"]["max"] > HANDOFF_BOUND_MS
        acquired_after_release = [e for e in events if e["type"] == "lease.acquire" and e.get("outcome") == "ok"
                                  and e["t"] > next(f["t"] for f in events if f["type"] == "fault.start")]
        assert acquired_after_release and all(e["via"] == "reconcile" for e in acquired_after_release)
    elif name in ("pause", "partition_aws") and _takeovers_during(events, name):
        # the zombie owner keeps consuming after its stream was taken over
        assert verdict["duplicate_claims"] > 0


@pytest.mark.parametrize("name", ["crash", "pause"])
def test_unsafe_is_flagged(scenario: RunScenario, name: str) -> None:
    verdict = scenario(name, "unsafe")
    assert verdict["duplicate_claims"] > 0
    assert verdict["checkers"]["duplicate_claims"]["valid"] is False
    assert verdict["valid"] is False


def test_a_dropped_message_is_flagged(scenario: RunScenario, tmp_path: Path) -> None:
    verdict = scenario("crash", "hardened")
    assert verdict["lost_sequences"] == 0
    copy = tmp_path / "dropped"
    shutil.copytree(verdict["run_dir"], copy)
    harness_file = copy / "history" / "harness.jsonl"
    lines = harness_file.read_text().splitlines()
    for i, line in enumerate(lines):
        event = json.loads(line)
        if event["type"] == "final.persisted" and len(event["seqs"]) > 10:
            dropped = event["seqs"].pop(len(event["seqs"]) // 2)
            lines[i] = json.dumps(event)
            break
    harness_file.write_text("\n".join(lines) + "\n")
    tampered = write_verdict(copy)
    assert tampered["lost_sequences"] == 1
    assert tampered["checkers"]["sequences"]["valid"] is False
    assert str(dropped) in json.dumps(tampered["checkers"]["sequences"])
