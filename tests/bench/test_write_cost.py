"""``bench/write_cost.py``'s figures from records (no fleet started): the counters' span around the window,
the deltas of the cumulative counters, the messages stored in a span, the per-message figures and dollars,
the summary line, and the options it refuses."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from bench.write_cost import (
    counter_delta,
    counter_span,
    parse_args,
    per_message,
    profile_line,
    stored_between,
    summary,
)


def requests_frame(rows: list[tuple[float, dict[str, int], dict[str, float]]]) -> pd.DataFrame:
    return pd.DataFrame({"t": [r[0] for r in rows], "operations": [r[1] for r in rows], "units": [r[2] for r in rows]})


def test_the_span_is_the_last_counters_at_or_before_each_end_of_the_window() -> None:
    frame = requests_frame([(1000.0, {}, {}), (6000.0, {}, {}), (11000.0, {}, {}), (16000.0, {}, {})])
    assert counter_span(frame, 6000.0, 15000.0) == (1, 2)
    assert counter_span(frame, 6500.0, 16000.0) == (1, 3)
    assert counter_span(frame, 500.0, 15000.0) is None  # nothing before the window
    assert counter_span(frame, 6500.0, 7000.0) is None  # the same event at both ends


def test_counter_deltas_take_missing_keys_as_zero() -> None:
    assert counter_delta({"PutItem messages": 10, "GetItem coordination": 2},
                         {"PutItem messages": 25, "Query coordination": 1}) == {
        "GetItem coordination": -2.0, "PutItem messages": 15.0, "Query coordination": 1.0}
    assert counter_delta(float("nan"), {"write messages": 1.5}) == {"write messages": 1.5}


def test_stored_counts_the_seqs_of_ok_writes_answered_inside_the_span() -> None:
    persists = pd.DataFrame({
        "t": [1000.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0],
        "seq_from": [1, 2, 3, 9, "x", 20],
        "seq_to": [1, 2, 7, 9, 4, 20],
        "outcome": ["ok", "ok", "ok", "fenced", "ok", "ok"],
    })
    # (1000, 5000]: seqs 2 and 3..7 (the fenced write and the malformed row are not stored messages)
    assert stored_between(persists, 1000.0, 5000.0) == 6
    assert stored_between(persists, 5000.0, 6000.0) == 1


def test_per_message_figures_and_list_price() -> None:
    # 1000 stored over a 10 s span; 1200 requests; 1000 + 400 write units, 100 read units; 2 s CPU in 20 s
    m = per_message({"PutItem messages": 1000, "UpdateItem coordination": 200},
                    {"write messages": 1000.0, "write coordination": 400.0, "read coordination": 100.0,
                     "reported write messages": 1000.0}, 1000, cpu_s=2.0, window_s=20.0, span_s=10.0)
    assert m["requests"] == pytest.approx(1.2)
    assert m["write_units"] == pytest.approx(1.4)  # reported units are not added to the computed ones
    assert m["message_write_units"] == pytest.approx(1.0)
    assert m["read_units"] == pytest.approx(0.1)
    assert m["cpu_us"] == pytest.approx(1000.0)  # 0.1 core over 10 s = 1 s for 1000 messages
    assert m["usd_per_million"] == pytest.approx(1.4 * 0.625 + 0.1 * 0.125)
    assert set(per_message({}, {}, 0, 1.0, 1.0, 1.0).values()) == {None}


def result(profile: str, usd: float | None) -> dict[str, Any]:
    per = {"requests": 1.0, "write_units": 1.25, "message_write_units": 1.0, "read_units": 0.02,
           "cpu_us": 2100.0, "usd_per_million": usd}
    return {"profile": profile, "n": 50, "held": 50, "span_s": 20.0, "stored": 5000,
            "operations": {"PutItem messages": 5000.0, "GetItem coordination": 0.0},
            "units": {"write messages": 5000.0}, "per_message": per,
            "delays": {"p50_s": 0.01, "p99_s": 0.2, "persisted": 4990, "emitted": 5000}}


def test_the_summary_line_names_both_profiles_and_their_dollars() -> None:
    args = parse_args(["--n", "50", "--rate", "5"])
    line = summary([result("blog", 0.8), result("hardened", None)], args)
    assert line.startswith("write cost: N=50 rate=5/s on dynalite blog: 1.000 req, 1.250 WU (1.000 msg WU), "
                           "0.020 RU, 2100 us")
    assert "$0.800 per million messages; hardened:" in line and line.endswith("$n/a per million messages")
    full = profile_line(result("blog", 0.8))
    assert "requests: PutItem messages 5000;" in full and "GetItem" not in full  # zero counts left out


@pytest.mark.parametrize("argv", [["--n", "0"], ["--rate", "0"], ["--hold", "nan"], ["--grace", "-1"],
                                  ["--set", "no_such_setting=1"], ["--dynamodb", "dynamodb-local"]])
def test_bad_options_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        parse_args(argv)
    assert refused.value.code == 2 and "error:" in capsys.readouterr().err
