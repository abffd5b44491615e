"""A small run of ``bench/upstream_capacity.py``: it starts a simulator process, holds its sessions, and ends with
the one-line summary."""

from __future__ import annotations

import re

import pytest

from bench.upstream_capacity import main


def test_a_small_run_ends_with_the_summary_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--sessions", "20", "--hold", "0.5", "--open-rate", "200", "--ping-interval", "0.1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(
        r"upstream capacity: 20 sessions held \d+ s: [\d.]+ CPU s per 1,000 sessions per wall s \([\d.]+ cores\), "
        r"-?[\d.]+ KiB RSS per session \(\d+ MiB in all\)",
        lines[-1],
    )


@pytest.mark.parametrize("args", [["--sessions", "0"], ["--open-rate", "600"], ["--hold", "-1"]])
def test_bad_options_exit_2(args: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
