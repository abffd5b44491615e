"""``bench/reconnect_storm.py``'s reading of the records (no fleet started): recovery times from the simulator's
session records, 429s per stream from the workers' ``ws.close`` events, the storm's handshake windows, and the
options it refuses."""

from __future__ import annotations

import pytest

from bench.reconnect_storm import parse_args, percentile, recoveries, rejections, storm_windows

TRIGGER = 1_000_000.0


def session(name: str, opened: float, closed: float | None = None, worker: str = "worker-1") -> dict[str, object]:
    return {"session": name, "worker": worker, "opened": opened, "closed": closed}


def test_a_stream_recovers_at_its_first_session_opened_after_the_trigger() -> None:
    orphan = session("s-1", TRIGGER - 5000)
    streams = {
        "c1": {"sessions": [session("s-1", TRIGGER - 5000, TRIGGER + 20), session("s-9", TRIGGER + 2500),
                            session("s-7", TRIGGER + 1500, TRIGGER + 1600)]},
        "c2": {"sessions": [session("s-2", TRIGGER - 5000)]},  # not closed yet, not reopened
    }
    got = recoveries(streams, {"c1": orphan, "c2": session("s-2", TRIGGER - 5000)}, TRIGGER)
    assert got["recovered"] == {"c1": 1.5, "c2": None}
    assert got["close_lag"] == {"c1": pytest.approx(0.02), "c2": None}


def test_429s_are_counted_per_stream_after_the_trigger_only() -> None:
    throttled = "cannot open ws://x/streams/c1: the upstream answered HTTP 429, retry after 1 s"
    events = [
        {"type": "ws.close", "t": TRIGGER - 1, "pk": "CONN#c1", "reason": throttled},
        {"type": "ws.close", "t": TRIGGER + 1, "pk": "CONN#c1", "reason": throttled},
        {"type": "ws.close", "t": TRIGGER + 2, "pk": "CONN#c1", "reason": throttled},
        {"type": "ws.close", "t": TRIGGER + 3, "pk": "CONN#c2", "reason": "the upstream answered HTTP 503"},
        {"type": "ws.open", "t": TRIGGER + 4, "pk": "CONN#c2"},
    ]
    assert rejections(events, TRIGGER) == {"c1": 2}
    assert rejections(events, TRIGGER, end_ms=TRIGGER + 1) == {"c1": 1}


def test_storm_windows_start_at_the_one_holding_the_trigger_and_count_per_second_at_scale_1() -> None:
    def window(start: float, accepted: int, rejected: int) -> dict[str, object]:
        return {"type": "handshakes", "window_start": start, "window_ms": 100.0, "attempted": accepted + rejected,
                "accepted": accepted, "rejected": rejected}

    events = [window(TRIGGER + 100, 50, 7), window(TRIGGER - 150, 500, 9), window(TRIGGER - 50, 3, 0)]
    rows = storm_windows(events, TRIGGER, timescale=0.1)
    assert [(r["from_s"], r["accepted"], r["rejected"]) for r in rows] == [(-0.05, 3, 0), (0.1, 50, 7)]
    assert rows[1]["accepted_per_s"] == pytest.approx(50.0)
    # the fleet's shutdown after the measurement hands streams off: its handshakes are not the storm's
    assert len(storm_windows([*events, window(TRIGGER + 9000, 60, 0)], TRIGGER, 0.1, end_ms=TRIGGER + 5000)) == 2


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 99), percentile([], 99)) == (50.0, 99.0, None)


@pytest.mark.parametrize("argv", [
    ["--policies", "full,bogus"],
    ["--trigger", "kill", "--workers", "1"],
    ["--set", "reconnect_policy=none"],
    ["--death-notices", "--trigger", "disconnect"],
    ["--n", "0"],
])
def test_bad_options_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2


def test_defaults_one_survivor_for_kill_and_two_workers_for_disconnect() -> None:
    assert parse_args([]).workers == 2
    assert parse_args(["--kill", "2"]).workers == 3
    assert parse_args(["--trigger", "disconnect"]).workers == 2
