"""The typed history's columns: read a piece at a time, they hold exactly what the parsed events hold, in
history order, whatever the pieces' sizes and however a field's kinds mix across them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.history import HistoryError, read_history, read_typed_history
from harness.history_columns import NUMBERS, OBJECTS, TEXT, TypeColumnsBuilder

VALUES = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["ok", "fail", "info", "CONN#a", "worker-1", ""]),
    st.booleans(),
    st.none(),
    st.lists(st.integers(0, 9), max_size=3),
    st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 9), max_size=2),
)
EVENTS = st.lists(
    st.fixed_dictionaries(
        {"t": st.integers(0, 20), "type": st.sampled_from(["emit", "msg.persist", "lease.renew"]),
         "src": st.sampled_from(["upstream", "worker-1", "worker-2"])},
        optional={"pk": st.sampled_from(["CONN#a", "CONN#b"]), "seq": VALUES, "outcome": VALUES,
                  "items": VALUES},
    ),
    min_size=1, max_size=40,
)


def same(a: Any, b: Any) -> bool:
    """Equal as parsed values, a missing value being NaN; ints and floats are told apart."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def write(run: Path, files: dict[str, list[dict[str, Any]]]) -> None:
    (run / "history").mkdir(parents=True, exist_ok=True)
    for name, events in files.items():
        (run / "history" / name).write_text("".join(json.dumps(e) + "\n" for e in events))


@settings(max_examples=60, deadline=None)
@given(first=EVENTS, second=EVENTS, piece_bytes=st.sampled_from([1, 60, 200, 1 << 20]))
def test_columns_hold_each_events_values_in_history_order(tmp_path_factory: Any, first: list[dict[str, Any]],
                                                           second: list[dict[str, Any]], piece_bytes: int) -> None:
    run = tmp_path_factory.mktemp("run")
    write(run, {"a.jsonl": first, "b.jsonl": second})
    frame = read_history(run)  # the parsed events, merged and sorted by t (ties: file then line order)
    merged = sorted([*first, *second], key=lambda e: e["t"])

    typed = read_typed_history(run, piece_bytes=piece_bytes)

    for kind, positions in typed.positions.items():
        expected = [merged[i] for i in positions.tolist()]
        assert all(e["type"] == kind for e in expected) and frame["type"].iloc[positions].eq(kind).all()
        assert typed.times[kind].tolist() == [float(e["t"]) for e in expected]
        names = set().union(*expected)
        assert set(typed.columns[kind]) == names
        for name in names:
            got = typed.columns[kind][name].raw().tolist()
            assert all(same(g, e.get(name, math.nan)) for g, e in zip(got, expected, strict=True)), (kind, name)


def test_a_field_that_is_a_number_in_one_piece_and_text_in_another_is_read_as_objects() -> None:
    builder = TypeColumnsBuilder()
    builder.add([{"seq": 1}, {"seq": 2.5}], {})
    builder.add([{"seq": "x"}, {}], {})
    builder.add([{"seq": 2**60 + 1}], {})

    column = builder.build()["seq"]

    assert column.kind == OBJECTS
    assert [v if v == v else "nan" for v in column.raw().tolist()] == [1, 2.5, "x", "nan", 2**60 + 1]


def test_numbers_keep_ints_apart_from_floats_and_text_shares_one_object_per_string() -> None:
    builder = TypeColumnsBuilder()
    builder.add([{"n": 1, "s": "ok"}, {"n": 2.0, "s": "fail"}], {})
    builder.add([{"s": "ok"}, {"n": 3, "s": "fail"}], {})

    columns = builder.build()

    assert columns["n"].kind == NUMBERS and columns["s"].kind == TEXT
    assert [type(v).__name__ for v in columns["n"].raw().tolist()] == ["int", "float", "float", "int"]
    assert np.isnan(columns["n"].values[2])
    texts = columns["s"].raw()
    assert texts.tolist() == ["ok", "fail", "ok", "fail"] and texts[0] is texts[2] and texts[1] is texts[3]


def test_read_in_small_pieces_a_truncated_last_line_is_dropped_and_a_bad_one_is_named_by_its_line(
        tmp_path: Path) -> None:
    lines = [json.dumps({"t": i, "src": "worker-1", "type": "emit", "seq": i}) for i in range(200)]
    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "worker-1.jsonl").write_text("\n".join(lines) + '\n{"t": 200, "src": "wo')

    typed = read_typed_history(tmp_path, piece_bytes=100)

    assert typed.columns["emit"]["seq"].raw().tolist() == list(range(200))
    assert [(d["line"], d["text"]) for d in typed.dropped_lines] == [(201, '{"t": 200, "src": "wo')]
    lines[150] = "not json"
    (tmp_path / "history" / "worker-1.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(HistoryError, match=r"worker-1.jsonl: line 151: not a JSON event"):
        read_typed_history(tmp_path, piece_bytes=100)


def test_a_history_shared_with_a_forked_reader_reads_the_same(tmp_path: Path, monkeypatch: Any) -> None:
    files = {f"worker-{n}.jsonl": [{"t": (i * 7 + n) % 50, "src": f"worker-{n}", "type": kind, "pk": f"CONN#{i % 3}",
                                    "seq": i, **({"items": [i]} if i % 5 == 0 else {})}
                                   for i in range(300) for kind in ("msg.persist", "lease.renew")[: 1 + i % 2]]
             for n in range(1, 5)}
    write(tmp_path, files)
    alone = read_typed_history(tmp_path, piece_bytes=500)
    forked: list[bool] = []
    monkeypatch.setattr("harness.history._may_fork", lambda size: forked.append(True) or True)

    shared = read_typed_history(tmp_path, piece_bytes=500)

    assert forked and list(shared.columns) == list(alone.columns)
    for kind, columns in alone.columns.items():
        assert shared.positions[kind].tolist() == alone.positions[kind].tolist()
        for name, column in columns.items():
            assert all(same(a, b) for a, b in zip(shared.columns[kind][name].raw().tolist(), column.raw().tolist(),
                                                  strict=True)), (kind, name)
