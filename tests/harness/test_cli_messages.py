"""``wsfleet messages``: a stream's stored messages in order from a running ``wsfleet up`` (its state file),
either layout; bad input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.backends import EmbeddedBackend
from harness.backends.resources import client
from harness.cli import STATE_FILE, main
from tests.harness.message_items import log_item


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own exits (--help, usage errors)
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def up(backend: EmbeddedBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> EmbeddedBackend:
    """A state file as a running ``wsfleet up`` writes it, naming the test backend."""
    monkeypatch.chdir(tmp_path)
    STATE_FILE.parent.mkdir()
    STATE_FILE.write_text(json.dumps({"backend_env": backend.env(), "tables": backend.tables}))
    return backend


def test_a_log_prints_in_order_with_its_marks(up: EmbeddedBackend, capsys: pytest.CaptureFixture[str]) -> None:
    ddb = client(up.env(), "dynamodb")
    for item in (log_item("CONN#cli-log", 1, "batch", 3, "worker-1", "g1", 1, 2),
                 log_item("CONN#cli-log", 2, "mark", 4, "worker-2", "g2", 3, 2),
                 log_item("CONN#cli-log", 3, "batch", 4, "worker-2", "g2", 3, 3)):
        ddb.put_item(TableName=up.tables["messages"], Item=item)

    code, out, _ = run(capsys, "messages", "cli-log")
    assert code == 0
    assert [line.split() for line in out.splitlines()] == [
        ["1", "1001", "1", "3", "worker-1@g1", "cli-log:1"], ["2", "1002", "1", "3", "worker-1@g1", "cli-log:2"],
        ["--", "takeover", "mark,", "batch", "2:", "worker-2@g2", "epoch", "4"],
        ["3", "1003", "3", "4", "worker-2@g2", "cli-log:3"]]

    code, out, _ = run(capsys, "messages", "cli-log", "--from", "3", "--json")
    assert code == 0
    assert [(m["seq"], m["kind"]) for m in map(json.loads, out.splitlines())] == [(None, "mark"), (3, "batch")]


def test_an_unreadable_item_is_printed_and_fails(up: EmbeddedBackend, capsys: pytest.CaptureFixture[str]) -> None:
    client(up.env(), "dynamodb").put_item(TableName=up.tables["messages"], Item={
        "pk": {"S": "CONN#cli-bad"}, "sk": {"N": "1"}, "kind": {"S": "batch"}})

    code, out, err = run(capsys, "messages", "cli-bad")

    assert code == 1
    assert out.startswith("?? unreadable item, sk 1: a batch without a whole-number epoch")
    assert err.strip() == "wsfleet messages: 1 stored item(s) of cli-bad are unreadable"


@pytest.mark.parametrize(("argv", "message"), [
    (["messages", "bad id!"], "is not a connection id"),
    (["messages", "a", "--from", "x"], "'x' is not a sequence number"),
    (["messages", "a", "--from", "-1"], "-1 is not a sequence number"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, *argv)

    assert code == 2 and message in err.strip().splitlines()[-1]


def test_without_a_running_fleet_it_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)

    code, _, err = run(capsys, "messages", "a")

    assert code == 1 and "no running `wsfleet up` found here" in err


def test_help_names_the_layouts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "messages", "--help")

    assert code == 0 and "batch log" in out and "--from SEQ" in out
