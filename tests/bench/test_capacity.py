"""``bench/capacity.py``'s figures from records (no fleet started): emission-to-persistence delays from
hand-made ``emit`` and ``msg.persist`` rows, the per-stream figures, the DynamoDB request rates from the
worker's cumulative counters, the summary line, the options it refuses, and the progress it gives while
STARTing (through a real HTTP server)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from bench import capacity
from bench.capacity import (
    Delays,
    cpu_per_stream,
    emit_to_persist,
    first_opened_ms,
    live_count,
    nearest_rank,
    parse_args,
    request_rates,
    rss_per_stream_kb,
    summary,
)

START, END, GRACE = 1_000_000.0, 1_010_000.0, 5_000.0


def emits(*rows: tuple[float, str, float]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["t", "pk", "seq"])


def persists(*rows: tuple[float, str, float, float, str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["t", "pk", "seq_from", "seq_to", "outcome"])


def test_each_message_counts_from_its_emission_to_the_first_ok_write_covering_it() -> None:
    e = emits((START + 0, "CONN#a", 1), (START + 100, "CONN#a", 2), (START + 200, "CONN#b", 1))
    p = persists(
        (START + 900, "CONN#a", 1, 2, "fail"),   # refused: not a persistence
        (START + 1200, "CONN#a", 1, 2, "ok"),    # covers a:1 and a:2
        (START + 3000, "CONN#a", 2, 2, "ok"),    # a later rewrite of a:2 changes nothing
        (START + 700, "CONN#b", 1, 1, "ok"),
    )
    got = emit_to_persist(e, p, START, END, GRACE)
    assert (got.emitted, got.persisted) == (3, 3)
    # delays 1.2, 1.1, 0.5 s
    assert got.p50_s == pytest.approx(1.1)
    assert got.p99_s == pytest.approx(1.2)
    assert got.max_s == pytest.approx(1.2)
    assert got.share == 1.0


def test_only_emits_inside_the_window_count_and_writes_after_end_plus_grace_are_not_persisted() -> None:
    e = emits((START - 1, "CONN#a", 1),              # before the window: left out
              (START + 10, "CONN#a", 2),
              (END, "CONN#a", 3),                     # the window's end is inside
              (END + 1, "CONN#a", 4))                 # after it: left out
    p = persists((START + 20, "CONN#a", 1, 2, "ok"),
                 (END + GRACE + 1, "CONN#a", 3, 4, "ok"))  # answered too late for the window
    got = emit_to_persist(e, p, START, END, GRACE)
    assert (got.emitted, got.persisted) == (2, 1)
    assert got.share == 0.5
    assert got.p99_s == pytest.approx(0.01)


def test_a_write_for_another_stream_or_with_a_bad_seq_covers_nothing() -> None:
    e = emits((START, "CONN#a", 5), (START, "CONN#b", float("nan")), (START, "CONN#b", 1.5))
    p = persists((START + 1, "CONN#c", 5, 5, "ok"),       # another stream
                 (START + 1, "CONN#a", 6, 4, "ok"),       # an empty range
                 (START + 1, "CONN#a", float("nan"), 5, "ok"))
    got = emit_to_persist(e, p, START, END, GRACE)
    assert got == Delays(1, 0, None, None, None)
    assert emit_to_persist(emits(), persists(), START, END, GRACE) == Delays(0, 0, None, None, None)
    assert Delays(0, 0, None, None, None).share is None


def test_many_streams_and_long_batches_match_a_plain_loop() -> None:
    rng = np.random.default_rng(7)
    rows_e, rows_p = [], []
    for stream in range(30):
        pk, seq, t = f"CONN#s{stream}", 1, START - 2000.0
        while seq < 60:
            size = int(rng.integers(1, 25))
            for k in range(size):
                rows_e.append((t + 100.0 * k, pk, float(seq + k)))
            answered = t + 100.0 * size + float(rng.integers(5, 8000))
            rows_p.append((answered, pk, float(seq), float(seq + size - 1), "ok" if rng.random() > 0.1 else "info"))
            seq, t = seq + size, t + 100.0 * size
    got = emit_to_persist(emits(*rows_e), persists(*rows_p), START, END, GRACE)
    delays = []
    window = [r for r in rows_e if START <= r[0] <= END]
    for emitted_at, stream_pk, emitted_seq in window:
        answers = [p[0] for p in rows_p if p[1] == stream_pk and p[2] <= emitted_seq <= p[3] and p[4] == "ok"
                   and p[0] <= END + GRACE]
        if answers:
            delays.append((min(answers) - emitted_at) / 1000.0)
    assert got.emitted == len(window) and got.persisted == len(delays) > 0
    assert got.max_s == pytest.approx(max(delays))
    assert got.p99_s == pytest.approx(nearest_rank(np.array(delays), 99))


def test_nearest_rank_and_per_stream_figures() -> None:
    values = np.arange(1.0, 101.0)
    assert (nearest_rank(values, 50), nearest_rank(values, 99), nearest_rank(np.empty(0), 99)) == (50.0, 99.0, None)
    assert rss_per_stream_kb(100 * 1024 * 1024, 110 * 1024 * 1024, 1000) == pytest.approx(10.24)
    assert rss_per_stream_kb(1.0, 2.0, 0) is None
    assert cpu_per_stream(6.0, 30.0, 1000) == pytest.approx(0.0002)  # 20 % of a core over 1000 streams
    assert cpu_per_stream(6.0, 30.0, 0) is None


def test_request_rates_from_the_cumulative_counters_around_the_window() -> None:
    requests = pd.DataFrame({
        "t": [START - 2000, START - 500, START + 5000, END - 100, END + 3000],
        "held": [10, 10, 10, 10, 10],
        "coordination": [5, 10, 20, 30, 99],
        "messages": [np.nan, 100, 5000, 10_100, 20_000],
    })
    rates = request_rates(requests, START, END)
    span = (END - 100 - (START - 500)) / 1000.0
    assert rates == {"coordination": pytest.approx(20 / span), "messages": pytest.approx(10_000 / span)}
    assert request_rates(requests.iloc[:0], START, END) == {}
    assert request_rates(requests.iloc[2:], START, END) == {}  # nothing before the window


def test_streams_owned_from_the_simulators_sessions() -> None:
    streams = {
        "c1": {"sessions": [{"opened": 500.0, "closed": 600.0}, {"opened": 700.0, "closed": None}]},
        "c2": {"sessions": [{"opened": 400.0, "closed": 450.0}]},
        "c3": {"sessions": []},
    }
    assert first_opened_ms(streams, ["c1", "c2", "c3", "c4"]) == {"c1": 500.0, "c2": 400.0}
    assert live_count(streams, ["c1", "c2", "c3"]) == 1


def result(profile: str, rss: float, cpu: float, p99: float | None, held: int = 1000) -> dict[str, Any]:
    return {"profile": profile, "n": 1000, "held": held, "accepted": 1000, "owned": held, "owned_all_s": 4.0,
            "own_timeout_s": 300.0, "rss_kb_per_stream": rss, "cpu_per_stream": cpu,
            "delays": {"p99_s": p99, "share": 0.5 if p99 is None else 1.0}}


def test_the_summary_names_both_profiles_and_their_ratio() -> None:
    args = parse_args([])
    line = summary([result("hardened", 20.0, 0.0002, 0.5), result("blog", 10.0, 0.0004, 2.0)], args)
    assert line.startswith("capacity: N=1000 rate=1/s hardened: RSS 20.0 KB/stream, CPU 20.0 %core/1000 streams, "
                           "owned all in 4.0 s, emit->persist p99 0.50 s (100.0 % persisted); blog: RSS 10.0")
    assert line.endswith("; ratio hardened/blog: RSS 2.00, CPU 0.50, p99 0.25")
    one = summary([result("hardened", 20.0, 0.0002, None, held=900)], args)
    assert "p99 n/a s (50.0 % persisted) [900 of 1000 held]" in one and "ratio" not in one
    refusing = {**result("hardened", 20.0, 0.0002, 0.5), "refused": {"answered 503: busy": 3}}
    assert summary([refusing], args).endswith("(100.0 % persisted) [3 STARTs refused]")


@pytest.mark.parametrize("argv", [
    ["--n", "0"],
    ["--rate", "0"],
    ["--hold", "-1"],
    ["--timescale", "nan"],
    ["--own-timeout", "0"],
    ["--settle", "-1"],
    ["--profile", "bogus"],
    ["--set", "profile=blog"],
    ["--set", "max_connections=many"],
])
def test_bad_options_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2


def test_defaults_and_the_profiles_measured() -> None:
    args = parse_args([])
    assert (args.n, args.rate, args.hold, args.timescale, args.own_timeout) == (1000, 1.0, 30.0, 1.0, 300.0)
    assert args.profiles == ["hardened", "blog"]
    assert parse_args(["--skip-blog"]).profiles == ["hardened"]
    assert parse_args(["--profile", "blog"]).profiles == ["blog"]
    assert parse_args(["--set", "lease_ms=30000"]).overrides == {"lease_ms": 30000}


class _RouterRefusingStarts(BaseHTTPRequestHandler):
    """The simulator's control API (creating a stream: 200) and a router that refuses every START (400), on
    one real HTTP server."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        refused = self.path == "/events"
        body = json.dumps({"error": "no capacity"} if refused else {}).encode()
        self.send_response(400 if refused else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_starting_says_how_many_starts_were_answered_and_refused_as_it_goes(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A bench STARTing thousands of streams through a router that refuses them says so while it STARTs,
    not only at the end."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RouterRefusingStarts)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    cluster = SimpleNamespace(upstream_control_url=url, upstream_url=url, router_url=url)
    monkeypatch.setattr(capacity, "PROGRESS_S", 0.0)
    try:
        accepted, refused, _ = capacity.start_streams(cluster, [f"c{i}" for i in range(6)], 2,  # type: ignore[arg-type]
                                                      deadline=time.monotonic() + 60.0)
    finally:
        server.shutdown()

    assert accepted == [] and sum(refused.values()) == 6
    lines = [line for line in capsys.readouterr().err.splitlines() if "STARTs answered" in line]
    assert lines and "refused" in lines[-1] and "no capacity" in lines[-1]
