"""read_history: merging a run's files, tolerating a killed writer's last line, refusing garbage."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.history import (
    HistoryError,
    HistoryTail,
    HistoryWriter,
    read_history,
    read_typed_history,
)


def write_lines(run_dir: Path, name: str, lines: list[str], end: str = "\n") -> Path:
    folder = run_dir / "history"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("\n".join(lines) + end)
    return path


def event(t: float, type: str, src: str, **fields: object) -> str:
    return json.dumps({"t": t, "src": src, "type": type, **fields})


# a worker's file whose last two events tie on t with an upstream emit
WORKER_1 = [event(1.0, "worker.start", "worker-1"), event(3.0, "lease.acquire", "worker-1", pk="CONN#a"),
            event(3.0, "ws.open", "worker-1", pk="CONN#a")]


def test_files_merge_sorted_by_t_with_ties_in_file_then_line_order(tmp_path: Path) -> None:
    write_lines(tmp_path, "worker-1.jsonl", WORKER_1)
    write_lines(tmp_path, "upstream.jsonl", [event(2.0, "emit", "upstream", pk="CONN#a", seq=1),
                                             event(3.0, "emit", "upstream", pk="CONN#a", seq=2)])

    history = read_history(tmp_path)

    assert history["t"].tolist() == [1.0, 2.0, 3.0, 3.0, 3.0]
    # ties: upstream.jsonl sorts before worker-1.jsonl; within a file, line order
    assert history["type"].tolist() == ["worker.start", "emit", "emit", "lease.acquire", "ws.open"]
    assert list(history.index) == [0, 1, 2, 3, 4]


def test_the_typed_history_holds_each_type_in_merged_order_with_its_rows(tmp_path: Path) -> None:
    write_lines(tmp_path, "worker-1.jsonl", WORKER_1)
    write_lines(tmp_path, "upstream.jsonl", [event(3.0, "emit", "upstream", pk="CONN#a", seq=2),
                                             event(2.0, "emit", "upstream", pk="CONN#a", seq=1)])

    typed = read_typed_history(tmp_path)

    assert {kind: rows.tolist() for kind, rows in typed.positions.items()} == {
        "worker.start": [0], "emit": [1, 2], "lease.acquire": [3], "ws.open": [4]}
    assert typed.columns["emit"]["seq"].raw().tolist() == [1, 2] and typed.times["emit"].tolist() == [2.0, 3.0]
    merged = read_history(tmp_path)
    for kind, rows in typed.positions.items():
        assert merged.loc[rows, "type"].tolist() == [kind] * len(rows)


def test_every_field_is_a_column_and_missing_values_are_nan(tmp_path: Path) -> None:
    write_lines(tmp_path, "a.jsonl", [event(1.0, "emit", "upstream", pk="CONN#a", seq=1),
                                      event(2.0, "run.start", "harness", config={"lease_ms": 2000})])

    history = read_history(tmp_path)

    assert {"t", "src", "type", "pk", "seq", "config"} <= set(history.columns)
    assert pd.isna(history.loc[1, "seq"]) and pd.isna(history.loc[0, "config"])
    assert history.loc[1, "config"] == {"lease_ms": 2000}


def test_a_truncated_final_line_is_dropped_and_recorded(tmp_path: Path) -> None:
    lines = [event(1.0, "worker.start", "worker-2"), '{"t": 2.0, "src": "wor']
    write_lines(tmp_path, "worker-2.jsonl", lines, end="")

    history = read_history(tmp_path)
    typed = read_typed_history(tmp_path)

    assert history["type"].tolist() == ["worker.start"] and list(typed.columns) == ["worker.start"]
    [dropped] = history.attrs["dropped_lines"]
    assert dropped["file"].endswith("worker-2.jsonl") and dropped["line"] == 2
    assert typed.dropped_lines == [dropped]


def test_garbage_in_the_middle_names_the_file_and_line(tmp_path: Path) -> None:
    write_lines(tmp_path, "worker-3.jsonl", [event(1.0, "worker.start", "worker-3"), "not json at all",
                                             event(3.0, "worker.stop", "worker-3")])

    with pytest.raises(HistoryError, match=r"worker-3\.jsonl: line 2: not a JSON event"):
        read_history(tmp_path)


@pytest.mark.parametrize(("line", "complaint"), [
    ('{"src": "x", "type": "emit"}', "no numeric 't'"),
    ('{"t": "soon", "src": "x", "type": "emit"}', "no numeric 't'"),
    ('{"t": 1.0, "src": "x"}', "no 'type'"),
    ("[1, 2]", "must be a JSON object"),
])
def test_an_event_without_its_required_fields_is_refused(tmp_path: Path, line: str, complaint: str) -> None:
    write_lines(tmp_path, "nemesis.jsonl", [event(0.5, "fault.start", "nemesis"), line,
                                            event(2.0, "fault.stop", "nemesis")])

    for read in (read_history, read_typed_history):
        with pytest.raises(HistoryError, match=rf"nemesis\.jsonl: line 2: .*{complaint}"):
            read(tmp_path)


def test_a_file_without_times_is_refused(tmp_path: Path) -> None:
    write_lines(tmp_path, "router.jsonl", ['{"src": "router", "type": "event"}'])

    with pytest.raises(HistoryError, match=r"router\.jsonl: line 1: the event has no numeric 't'"):
        read_history(tmp_path)


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    write_lines(tmp_path, "a.jsonl", [event(1.0, "emit", "upstream"), "", "  ", event(2.0, "emit", "up")])

    assert len(read_history(tmp_path)) == 2


def test_a_folder_that_is_not_a_run_is_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="no history/ folder"):
        read_history(tmp_path)
    (tmp_path / "history").mkdir()
    with pytest.raises(HistoryError, match=r"holds no \*\.jsonl files"):
        read_history(tmp_path)


def test_what_the_writer_writes_reads_back(tmp_path: Path) -> None:
    writer = HistoryWriter(str(tmp_path / "history" / "worker-1.jsonl"), "worker-1")
    writer.emit("lease.acquire", pk="CONN#a", worker="worker-1", epoch=3, outcome="ok", expires_ms=5.0)
    writer.emit("ws.close", pk="CONN#a", worker="worker-1", reason=None)
    writer.close()

    history = read_history(tmp_path)

    assert history["type"].tolist() == ["lease.acquire", "ws.close"]
    assert history.loc[0, "epoch"] == 3 and pd.isna(history.loc[1, "epoch"])
    assert "reason" not in history.columns  # None fields are not written


def test_a_history_of_no_events_has_the_required_columns(tmp_path: Path) -> None:
    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "idle.jsonl").write_text("")
    frame = read_history(tmp_path)

    assert list(frame.columns) == ["t", "src", "type"] and frame.empty


def test_a_tail_reads_only_whole_new_lines_of_the_files_it_matches(tmp_path: Path) -> None:
    """What a runner waits on (the workers' msg.persist reports): each look returns what was appended since
    the last, a line still being written waits for its end, and other files and lines are skipped."""
    folder = tmp_path / "history"
    folder.mkdir()
    worker, router = folder / "worker-1.jsonl", folder / "router.jsonl"
    worker.write_text('{"t":1,"type":"msg.persist","seq_to":3}\n{"t":2,"type":"lease.renew"}\n{"t":3,"ty')
    router.write_text('{"t":1,"type":"msg.persist","seq_to":99}\n')
    tail = HistoryTail(tmp_path, "worker-*.jsonl", types={"msg.persist"})

    assert [e["seq_to"] for e in tail.new_events()] == [3]
    with worker.open("a") as file:
        file.write('pe":"msg.persist","seq_to":4}\n')
    assert [e["seq_to"] for e in tail.new_events()] == [4]
    assert tail.new_events() == []


def test_a_tail_picks_events_by_their_parsed_type_not_by_the_text_of_the_line(tmp_path: Path) -> None:
    """JSON may be spaced, and a field's text may quote another type: neither fools the tail."""
    folder = tmp_path / "history"
    folder.mkdir()
    (folder / "worker-1.jsonl").write_text(
        '{"t": 1, "type": "msg.persist", "seq_to": 5}\n'
        '{"t":2,"type":"ws.close","reason":"{\\"type\\":\\"msg.persist\\",\\"seq_to\\":9}"}\n')
    tail = HistoryTail(tmp_path, "worker-*.jsonl", types={"msg.persist"})

    assert [e["seq_to"] for e in tail.new_events()] == [5]
    assert [e["type"] for e in HistoryTail(tmp_path).new_events()] == ["msg.persist", "ws.close"]
