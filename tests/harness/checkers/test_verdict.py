"""The composed verdict, verdict.json, the row tables, and the speed on a ten-minute history."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.checkers import TABLE_COLUMNS, VERDICT_KEYS, analyse, check_run, compose, write_verdict
from harness.checkers.events import read_events
from harness.checkers.result import UNKNOWN
from harness.history import HistoryError
from tests.harness.report.histories import add_storm, add_zombie_writes, small_run

PK = "CONN#a"


@pytest.mark.parametrize(("validities", "expected"), [
    ([], True),
    ([True, True], True),
    ([True, UNKNOWN], UNKNOWN),
    ([UNKNOWN, False, True], False),
    ([False, True], False),
])
def test_false_beats_unknown_beats_true(validities, expected) -> None:
    assert compose(validities) == expected


def healthy(build, **start):
    """One stream, consumed and persisted by worker-1 throughout; ``start``: more ``run.start`` fields."""
    build.run_start(bound_ms=5000, **start).at(0, "conn.started", "harness", pk=PK)
    build.acquire(50, PK, "worker-1", 2050).session(PK, "worker-1", 60, 1200)
    for seq in range(1, 11):
        build.emit(PK, seq, seq * 100).persist(seq * 100 + 5, PK, "worker-1", seq)
    return build.at(5000, "run.stop", "harness").at(5001, "final.persisted", "harness", pk=PK,
                                                    seqs=list(range(1, 11)))


def write_run(run_dir: Path, events: list[dict]) -> Path:
    folder = run_dir / "history"
    folder.mkdir(parents=True)
    for src in {e["src"] for e in events}:
        lines = [json.dumps(e) for e in events if e["src"] == src]
        (folder / f"{src}.jsonl").write_text("\n".join(lines) + "\n")
    return run_dir


def test_a_healthy_run_is_valid_and_the_verdict_has_exactly_the_design_keys(build) -> None:
    verdict = analyse(healthy(build).frame()).verdict

    assert tuple(verdict) == VERDICT_KEYS
    assert verdict["valid"] is True
    assert (verdict["scenario"], verdict["profile"], verdict["timescale"], verdict["workers"]) == (
        "test", "blog", 0.1, 2)
    assert verdict["config"]["lease_ms"] == 2000
    counts = verdict["duplicate_claims"], verdict["lost_sequences"], verdict["duplicate_deliveries"]
    assert counts == (0, 0, 0)
    assert verdict["recovery_ms"] == {"p50": None, "p95": None, "max": None}
    assert set(verdict["phases_ms"]) == {"detect", "claim", "connect", "resume", "caught_up", "gap"}
    assert set(verdict["checkers"]) == {"duplicate_claims", "sequences", "recovery", "bounds", "stop",
                                        "zombie_writes", "handshakes", "balance"}
    assert verdict["zombie_writes"] == 0
    assert verdict["outcomes"] == {"lease.acquire": {"ok": 1, "fail": 0, "info": 0},
                                   "msg.persist": {"ok": 10, "fail": 0, "info": 0}}
    assert verdict["fault_model"] == {"stated": None, "within": None, "flag": None}
    assert all(checker["valid"] is True for checker in verdict["checkers"].values())


def test_one_failing_checker_fails_the_run(build) -> None:
    healthy(build).session(PK, "worker-2", 1000, 1500)

    verdict = analyse(build.frame()).verdict

    assert verdict["valid"] is False
    assert verdict["duplicate_claims"] == 1 and verdict["duplicate_overlap_ms"] == 200
    assert verdict["checkers"]["duplicate_claims"]["valid"] is False
    assert verdict["checkers"]["sequences"]["valid"] is True


def test_an_undecided_checker_makes_the_run_unknown(build) -> None:
    healthy(build).session(PK, "worker-2", 1300, 1500).persist(1400, PK, "worker-1", 10, outcome="info")

    verdict = analyse(build.frame()).verdict

    assert verdict["valid"] == UNKNOWN
    assert verdict["checkers"]["duplicate_claims"]["possible_claims"] == 1


def test_outcomes_are_counted_per_event_type(build) -> None:
    healthy(build).persist(1500, PK, "worker-1", 11, outcome="info").persist(1600, PK, "worker-1", 11,
                                                                            outcome="fail")
    build.acquire(1700, PK, "worker-2", 3700, outcome="fail")

    outcomes = analyse(build.frame()).verdict["outcomes"]

    assert outcomes["msg.persist"] == {"ok": 10, "fail": 1, "info": 1}
    assert outcomes["lease.acquire"] == {"ok": 1, "fail": 1, "info": 0}


def test_a_violation_outside_the_fault_model_is_flagged_and_still_invalid(build) -> None:
    build.run_start(bound_ms=5000, fault_model="outside: clock_skew 1000 ms > tolerance 100 ms")
    build.session(PK, "worker-1", 100, 1500).session(PK, "worker-2", 1000, 2000)

    verdict = analyse(build.frame()).verdict

    assert verdict["valid"] is False
    assert verdict["fault_model"] == {"stated": "outside: clock_skew 1000 ms > tolerance 100 ms", "within": False,
                                      "flag": "outside the fault model"}


def test_a_violation_within_the_fault_model_is_not_flagged(build) -> None:
    build.run_start(bound_ms=5000, fault_model="within")
    build.session(PK, "worker-1", 100, 1500).session(PK, "worker-2", 1000, 2000)

    verdict = analyse(build.frame()).verdict

    assert verdict["valid"] is False and verdict["fault_model"]["flag"] is None
    assert verdict["fault_model"]["within"] is True


I1_ONLY = "outside for I1: ECS reports a running task stopped (zombie of worker-1)"


def test_a_duplicate_claim_under_a_schedule_outside_for_i1_only_is_flagged_and_still_invalid(build) -> None:
    healthy(build, fault_model=I1_ONLY).session(PK, "worker-2", 1000, 1500)

    verdict = analyse(build.frame()).verdict

    assert verdict["valid"] is False and verdict["duplicate_claims"] == 1
    assert verdict["fault_model"]["flag"] == "outside the fault model"


def test_a_zombie_write_under_a_schedule_outside_for_i1_only_is_not_excused(build) -> None:
    healthy(build, fault_model=I1_ONLY).acquire(2000, PK, "worker-2", 4000, epoch=2)
    build.persist(2600, PK, "worker-1", 11, sent=2500)

    verdict = analyse(build.frame()).verdict

    assert verdict["valid"] is False and verdict["zombie_writes"] == 1
    assert (verdict["fault_model"]["within"], verdict["fault_model"]["flag"]) == (False, None)


def test_a_zombie_write_makes_the_verdict_invalid(build) -> None:
    healthy(build).acquire(2000, PK, "worker-2", 4000, epoch=2).persist(2600, PK, "worker-1", 11, sent=2500)

    verdict = analyse(build.frame()).verdict

    assert verdict["valid"] is False and verdict["zombie_writes"] == 1
    assert verdict["checkers"]["zombie_writes"]["valid"] is False


def test_write_verdict_writes_strict_json_from_the_run_folder(build, tmp_path: Path) -> None:
    healthy(build).session(PK, "worker-2", 1000, 1500).fault(800, "kill", "worker-1")
    run_dir = write_run(tmp_path / "run", build.events)

    returned = write_verdict(run_dir)

    def no_constants(name: str) -> None:
        raise AssertionError(f"{name} in verdict.json")

    text = (run_dir / "verdict.json").read_text()
    assert json.loads(text, parse_constant=no_constants) == returned == check_run(run_dir)
    assert tuple(returned) == VERDICT_KEYS and returned["valid"] is False


def test_check_run_refuses_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="no history/ folder"):
        check_run(tmp_path)


def test_the_row_tables_have_their_columns_even_when_empty(build) -> None:
    analysis = analyse(healthy(build).frame())

    for name, columns in TABLE_COLUMNS.items():
        assert list(analysis.frame(name).columns) == columns
    assert analysis.phases == []
    assert [row["source"] for row in analysis.claims] == ["lease", "upstream"]
    assert analysis.sequences[0]["pk"] == PK
    with pytest.raises(KeyError, match="no table"):
        analysis.table("nope")


def test_a_run_read_from_its_files_gets_its_verdict(tmp_path: Path) -> None:
    small_run(tmp_path, recovery_ms=9000.0)
    add_zombie_writes(tmp_path, count=2)
    add_storm(tmp_path)

    by_type = analyse(read_events(tmp_path)).verdict

    assert by_type["valid"] is False and by_type["zombie_writes"] == 2 and by_type["lost_sequences"] == 3


def ten_minute_history(run_dir: Path, streams: int = 100, seqs: int = 5000, rate_ms: float = 100.0) -> int:
    """Writes about a million events as a run's history files and returns how many: every stream emits
    ``seqs`` seqs at 10/s; worker-1 owns the even streams and worker-2 the odd ones; worker-1 is killed at
    250 s and worker-2 takes its streams 2.1 s later and persists their backlog at once."""
    t0, kill = 1.7e12, 1.7e12 + 250_000.0
    takeover = kill + 2_100.0
    pks = np.array([f"CONN#{i:04d}" for i in range(streams)], dtype=object)
    offsets = np.arange(streams) * (rate_ms / streams)
    seq = np.tile(np.arange(1, seqs + 1), streams)
    stream = np.repeat(np.arange(streams), seqs)
    emit_t = t0 + seq * rate_ms + offsets[stream]
    killed = stream % 2 == 0
    late = killed & (emit_t >= kill)
    persist_t = np.where(late, np.maximum(emit_t, takeover + 200.0) + 5.0, emit_t + 5.0)
    writer = np.where(killed & ~late, "worker-1", "worker-2")
    writer[stream % 2 == 1] = "worker-2"
    frames = [
        pd.DataFrame({"t": emit_t, "src": "upstream", "type": "emit", "pk": pks[stream], "seq": seq}),
        pd.DataFrame({"t": persist_t, "src": writer, "type": "msg.persist", "pk": pks[stream],
                      "worker": writer, "epoch": np.where(late, 2, 1), "seq_from": seq, "seq_to": seq,
                      "outcome": "ok"}),
    ]
    renew_t = np.arange(t0 + 500.0, t0 + seqs * rate_ms, 1000.0)
    owner = np.where(np.arange(streams) % 2 == 0, "worker-1", "worker-2")
    renew_pk = np.tile(np.arange(streams), renew_t.size)
    renew_at = np.repeat(renew_t, streams)
    alive = (owner[renew_pk] == "worker-2") | (renew_at < kill)
    frames.append(pd.DataFrame({"t": renew_at[alive], "src": owner[renew_pk][alive], "type": "lease.renew",
                                "pk": pks[renew_pk][alive], "worker": owner[renew_pk][alive], "outcome": "ok",
                                "expires_ms": renew_at[alive] + 2000.0}))
    events: list[dict] = [
        {"t": t0, "src": "harness", "type": "run.start", "scenario": "big", "profile": "blog",
         "timescale": 0.1, "config": {"lease_ms": 2000.0, "heartbeat_ms": 500.0, "desired_check_ms": 1000.0},
         "connections": streams, "workers": 2, "bound_ms": 10_000.0},
        {"t": kill, "src": "nemesis", "type": "fault.start", "kind": "kill", "target": "worker-1"},
        {"t": t0 + seqs * rate_ms + 1_000.0, "src": "harness", "type": "run.stop"},
    ]
    for i, pk in enumerate(pks):
        events += [
            {"t": t0 + 1.0, "src": "harness", "type": "conn.started", "pk": pk},
            {"t": t0 + 2.0, "src": owner[i], "type": "lease.acquire", "pk": pk, "worker": owner[i],
             "epoch": 1, "outcome": "ok", "expires_ms": t0 + 2002.0},
            {"t": t0 + 3.0, "src": "upstream", "type": "sub.open", "pk": pk, "session": f"s{i}",
             "worker": owner[i]},
        ]
        if i % 2 == 0:
            events += [
                {"t": kill + 5.0, "src": "upstream", "type": "sub.close", "pk": pk, "session": f"s{i}",
                 "worker": "worker-1", "reason": "error", "last_pong_t": kill - 100.0},
                {"t": takeover, "src": "worker-2", "type": "lease.acquire", "pk": pk, "worker": "worker-2",
                 "epoch": 2, "outcome": "ok", "expires_ms": takeover + 2000.0},
                {"t": takeover + 100.0, "src": "upstream", "type": "sub.open", "pk": pk, "session": f"t{i}",
                 "worker": "worker-2"},
            ]
    folder = run_dir / "history"
    folder.mkdir(parents=True)
    for number, frame in enumerate(frames):
        frame.to_json(folder / f"part-{number}.jsonl", orient="records", lines=True, double_precision=15)
    (folder / "events.jsonl").write_text("".join(json.dumps(event) + "\n" for event in events))
    return sum(len(frame) for frame in frames) + len(events)


def test_a_ten_minute_history_of_a_hundred_streams_is_judged(tmp_path: Path) -> None:
    """A history of a million events is judged right (how fast: ``python -m bench.report_speed``)."""
    assert ten_minute_history(tmp_path) > 1_000_000
    analysis = analyse(read_events(tmp_path))
    verdict = analysis.verdict
    assert verdict["valid"] is True, verdict["checkers"]
    assert verdict["checkers"]["sequences"]["emitted"] == 500_000
    assert len(analysis.phases) == 50
    assert {row["claim_t"] - row["t0"] for row in analysis.phases} == {2100.0}
    assert verdict["phases_ms"]["connect"]["max"] == 2200.0


@pytest.mark.parametrize(("verdict", "line"), [
    ({"valid": True, "duplicate_claims": 0, "lost_sequences": 0, "recovery_ms": {"max": 7685.25830078125},
      "bound_ms": {"kill": 8000.0}},
     "VALID: 0 duplicate claims, 0 lost sequences, recovery max 7.69 s, bound 8.00 s"),
    ({"valid": False, "duplicate_claims": 2, "lost_sequences": 3, "recovery_ms": {"max": 81234.5},
      "bound_ms": {"pause": 2700.0, "kill": 80000.0}},
     "INVALID: 2 duplicate claims, 3 lost sequences, recovery max 81.2 s, bounds kill 80.0 s, pause 2.70 s"),
    ({"valid": "unknown", "duplicate_claims": 0, "lost_sequences": 0, "recovery_ms": {"max": None},
      "bound_ms": {}},
     "UNKNOWN: 0 duplicate claims, 0 lost sequences, no recovery measured, no bound"),
])
def test_the_verdict_line_reads_in_seconds_with_its_bounds(verdict: dict, line: str) -> None:
    from harness.checkers.verdict import verdict_line

    assert verdict_line(verdict) == line
