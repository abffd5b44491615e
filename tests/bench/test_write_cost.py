"""``bench/write_cost.py``'s figures from records (no fleet started): the counters' span inside the window,
the deltas of the cumulative counters, the messages stored in a span, the per-message figures and dollars,
the summary line, and the options it refuses."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from bench.write_cost import (
    counter_delta,
    counter_span,
    memory_summary,
    parse_args,
    per_message,
    profile_line,
    repeated_summary,
    stored_between,
    summary,
)


def requests_frame(rows: list[tuple[float, dict[str, int], dict[str, float]]]) -> pd.DataFrame:
    return pd.DataFrame({"t": [r[0] for r in rows], "operations": [r[1] for r in rows], "units": [r[2] for r in rows]})


def test_the_span_is_the_first_and_last_counters_inside_the_window() -> None:
    """Counters written before the window (while streams were still being taken up) never open the span."""
    frame = requests_frame([(1000.0, {}, {}), (6000.0, {}, {}), (11000.0, {}, {}), (16000.0, {}, {})])
    assert counter_span(frame, 6000.0, 15000.0) == (1, 2)
    assert counter_span(frame, 5500.0, 16000.0) == (1, 3)
    assert counter_span(frame, 500.0, 15000.0) == (0, 2)
    assert counter_span(frame, 6500.0, 15000.0) is None  # one event inside the window
    assert counter_span(frame, 16500.0, 20000.0) is None  # none


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


def result(profile: str, usd: float | None, requests: float = 1.0) -> dict[str, Any]:
    per = {"requests": requests, "write_units": 1.25, "message_write_units": 1.0, "read_units": 0.02,
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
    assert "$0.800 per million messages; hardened:" in line
    assert line.endswith("$n/a per million messages; ratio hardened/blog: requests 1.00, write units 1.00, "
                         "CPU 1.00, p99 1.00, $ n/a")
    assert "ratio" not in summary([result("hardened", 0.5)], args)  # no blog: nothing to compare with
    full = profile_line(result("blog", 0.8))
    assert "requests: PutItem messages 5000;" in full and "GetItem" not in full  # zero counts left out


def test_the_ratios_are_hardened_over_blog() -> None:
    line = summary([result("blog", 0.8, requests=1.2), result("hardened", 0.2, requests=0.1)],
                   parse_args(["--streams", "400"]))
    assert line.startswith("write cost: N=400 rate=5/s")
    assert line.endswith("ratio hardened/blog: requests 0.08, write units 1.00, CPU 1.00, p99 1.00, $ 0.25")


def test_repeated_runs_end_with_each_ratios_median_and_every_runs_cpu_ratio() -> None:
    def run(blog_cpu: float, hardened_cpu: float) -> list[dict[str, Any]]:
        blog, hardened = result("blog", 0.8, requests=1.2), result("hardened", 0.2, requests=0.1)
        blog["per_message"]["cpu_us"], hardened["per_message"]["cpu_us"] = blog_cpu, hardened_cpu
        return [blog, hardened]

    args = parse_args(["--streams", "400", "--repeat", "3"])
    line = repeated_summary([run(900.0, 80.0), run(800.0, 96.0), run(1000.0, 95.0)], args)
    assert line == ("write cost over 3 runs: N=400 rate=5/s on dynalite; median ratio hardened/blog: requests "
                    "0.08, write units 1.00, CPU 0.10 (each run: 0.089 0.120 0.095), p99 1.00, $ 0.25; median CPU "
                    "per stored message: hardened 95 us, blog 900 us")
    unmeasured = run(900.0, 80.0)
    unmeasured[0]["per_message"]["cpu_us"] = None
    assert "CPU n/a (each run: 0.089)" in repeated_summary([run(900.0, 80.0), unmeasured], args)


@pytest.mark.parametrize("argv", [["--repeat", "0"], ["--repeat", "2", "--memory"],
                                  ["--repeat", "2", "--profiles", "hardened"]])
def test_a_repeat_is_refused_where_it_has_no_ratio_to_take(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2


def test_the_memory_mode_defaults_to_a_low_rate_and_reports_memory_and_cores() -> None:
    args = parse_args(["--memory", "--streams", "5000", "--profiles", "hardened"])
    assert (args.n, args.rate, args.settle, args.own_timeout, args.profiles) == (5000, 0.02, 30.0, 600.0, ["hardened"])
    assert (parse_args([]).rate, parse_args([]).settle, parse_args([]).own_timeout) == (5.0, 3.0, 60.0)
    figures = {"profile": "hardened", "n": 5000, "held": 4990, "rss_kb_per_stream": 41.25, "cpu_core_share": 0.1234,
               "idle_cpu_core_share": 0.01, "rss_baseline_mb": 80.0, "rss_end_mb": 281.4}
    assert memory_summary([figures], args) == (
        "memory: N=5000 rate=0.02/s on dynalite hardened: RSS 41.2 KB per stream, CPU 0.123 cores (idle before any "
        "stream 0.010), RSS 80.0 MB before any stream, 281.4 MB at the window's end [4990 of 5000 held]")
    pinged = parse_args(["--memory", "--streams", "5000", "--profiles", "hardened", "--upstream-ping", "20"])
    assert memory_summary([figures], pinged).startswith(
        "memory: N=5000 rate=0.02/s on dynalite, upstream pings every 20 s hardened: RSS 41.2 KB")


@pytest.mark.parametrize("argv", [["--n", "0"], ["--rate", "0"], ["--hold", "nan"], ["--grace", "-1"],
                                  ["--set", "no_such_setting=1"], ["--dynamodb", "dynamodb-local"],
                                  ["--profiles", "blog,blog"], ["--profiles", "unsafe"], ["--memory", "--rate", "-1"],
                                  ["--memory", "--own-timeout", "0"], ["--upstream-ping", "0"],
                                  ["--upstream-ping", "inf"]])
def test_bad_options_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        parse_args(argv)
    assert refused.value.code == 2 and "error:" in capsys.readouterr().err
