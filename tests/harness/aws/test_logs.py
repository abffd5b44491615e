"""Tests of harness.aws.logs and ``wsfleet aws-history`` against a moto server standing in for
CloudWatch Logs: the history events among a deployment's log lines come back as the history files the
checkers read, in time order, and nothing else does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest

from harness.aws.logs import history_event
from harness.cli import main
from harness.history import read_history
from tests.harness.aws.test_deployment import REGION, deploy, outputs_file

T0 = 1_796_140_000_000  # 2026-12-01T15:06:40Z


def put(group: str, stream: str, lines: list[tuple[int, Any]]) -> None:
    logs = boto3.client("logs", region_name=REGION)
    if not logs.describe_log_groups(logGroupNamePrefix=group)["logGroups"]:
        logs.create_log_group(logGroupName=group)
    logs.create_log_stream(logGroupName=group, logStreamName=stream)
    logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=[
        {"timestamp": at, "message": line if isinstance(line, str) else json.dumps(line)} for at, line in lines])


def iso(ms: int) -> str:
    from datetime import UTC, datetime
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def test_the_history_events_of_both_log_groups_come_back_as_history_files(moto_aws: str, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    outputs = outputs_file(tmp_path, deploy())
    acquire = {"t": T0 + 20.5, "src": "worker-1", "type": "lease.acquire", "pk": "CONN#c1", "outcome": "ok"}
    persist = {"t": T0 + 30.0, "src": "worker-1", "type": "msg.persist", "pk": "CONN#c1", "seq_from": 1,
               "seq_to": 3, "outcome": "ok"}
    put("/ecs/fleet", "worker/w/task-1", [
        (T0 + 10, {"t": T0 + 10, "event": "worker.start", "worker": "worker-1"}),  # a log line, not history
        (T0 + 21, acquire), (T0 + 31, persist), (T0 + 40, "Traceback (most recent call last):"),
        (T0 + 999_000, {**persist, "t": T0 + 999_000.0}),  # after the window
    ])
    event = {"t": T0 + 5.0, "src": "router", "type": "event", "kind": "START", "pk": "CONN#c1", "status": 200}
    put("/aws/lambda/fleet-router", "2026/12/01/[$LATEST]abc", [(T0 + 5, event)])
    run_dir = tmp_path / "run"
    assert main(["aws-history", "--outputs", str(outputs), "--since", iso(T0), "--until", iso(T0 + 60_000),
                 "--run-dir", str(run_dir)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["router: 1 events", "worker-1: 2 events"]
    assert "3 events from 2 processes (2 other log lines)" in err
    assert sorted(p.name for p in (run_dir / "history").iterdir()) == ["router.jsonl", "worker-1.jsonl"]
    frame = read_history(run_dir)
    assert list(frame["type"]) == ["event", "lease.acquire", "msg.persist"]
    assert list(frame["t"]) == [T0 + 5.0, T0 + 20.5, T0 + 30.0]


def test_a_window_without_history_says_what_to_set(moto_aws: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    outputs = outputs_file(tmp_path, deploy())
    put("/ecs/fleet", "worker/w/task-1", [(T0 + 10, {"t": T0 + 10, "event": "worker.start"})])
    put("/aws/lambda/fleet-router", "s", [(T0 + 10, "START RequestId: 1")])
    assert main(["aws-history", "--outputs", str(outputs), "--since", iso(T0), "--until", iso(T0 + 60_000),
                 "--run-dir", str(tmp_path / "run")]) == 1
    assert "WSFLEET_HISTORY_PATH=/dev/stdout" in capsys.readouterr().err


def test_a_missing_log_group_or_a_bad_window_is_a_clear_error(moto_aws: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    outputs = outputs_file(tmp_path, deploy())
    window = ["--since", iso(T0), "--until", iso(T0 + 60_000), "--run-dir", str(tmp_path / "run")]
    assert main(["aws-history", "--outputs", str(outputs), *window]) == 1
    assert "ResourceNotFoundException" in capsys.readouterr().err
    assert main(["aws-history", "--outputs", str(outputs), "--since", iso(T0), "--until", iso(T0),
                 "--run-dir", str(tmp_path / "run")]) == 2
    assert "--until must be later than --since" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["aws-history", "--outputs", str(outputs), "--since", "yesterday", "--until", iso(T0),
              "--run-dir", str(tmp_path / "run")])
    assert "not an ISO 8601 time: 'yesterday'" in capsys.readouterr().err


@pytest.mark.parametrize(("line", "kept"), [
    ('{"t": 1.5, "src": "worker-1", "type": "lease.renew"}', True),
    ('{"t": 1, "event": "worker.start"}', False),
    ('{"t": true, "src": "worker-1", "type": "x"}', False),
    ('{"t": 1, "src": "", "type": "x"}', False),
    ('{"t": "1", "src": "worker-1", "type": "x"}', False),
    ("[1, 2]", False),
    ("not json", False),
])
def test_only_history_events_are_kept(line: str, kept: bool) -> None:
    assert (history_event(line) is not None) is kept


def test_the_deployment_cannot_write_the_harnesss_sources_or_bad_ones(moto_aws: str, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The log groups are the system under test's: a line claiming to be the harness's or the nemesis's, or
    whose src is no process name, or a source another group owns (a worker writing the upstream's ground
    truth or the router's events, the router writing a worker's), is refused with an error line (exit 1),
    never written, never a traceback; the deployment's other events still come back."""
    outputs = outputs_file(tmp_path, deploy())
    forged = {"t": T0 + 11.0, "type": "fault.start", "kind": "kill", "target": "worker-2"}
    renew = {"t": T0 + 12.0, "src": "worker-1", "type": "lease.renew", "pk": "CONN#c1", "outcome": "ok"}
    put("/ecs/fleet", "worker/w/task-1", [
        (T0 + 11, {**forged, "src": "nemesis"}), (T0 + 11, {**forged, "src": "Harness"}),
        (T0 + 11, {**forged, "src": "a\x00b"}), (T0 + 11, {**forged, "src": "w" * 256}),
        (T0 + 11, {**forged, "src": "../../etc/passwd"}), (T0 + 12, renew),
        (T0 + 13, {"t": T0 + 13.0, "src": "upstream", "type": "sub.close", "pk": "CONN#c1", "session": "s-1"}),
        (T0 + 13, {"t": T0 + 13.0, "src": "Router", "type": "event", "kind": "STOP", "pk": "CONN#c1"})])
    put("/aws/lambda/fleet-router", "s", [(T0 + 10, "START RequestId: 1"),
                                          (T0 + 14, {**renew, "t": T0 + 14.0, "src": "worker-9"})])
    run_dir = tmp_path / "run"
    assert main(["aws-history", "--outputs", str(outputs), "--since", iso(T0), "--until", iso(T0 + 60_000),
                 "--run-dir", str(run_dir)]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == ["worker-1: 1 events"]
    assert "1 lines refused: src 'nemesis' is the harness's own source" in err
    assert "1 lines refused: src 'Harness' is the harness's own source" in err
    assert "1 lines refused: src 'a\\x00b' is not a process name" in err
    assert "1 lines refused: src 'wwwwwwwww" in err and "1 lines refused: src '../../etc/passwd' is not" in err
    assert "1 lines refused: src 'upstream' in the workers log group: only the upstream log group writes it" in err
    assert "1 lines refused: src 'Router' in the workers log group: only the router log group writes it" in err
    assert "1 lines refused: src 'worker-9' in the router log group, which writes only src 'router'" in err
    assert "8 history lines of the deployment were refused" in err and "Traceback" not in err
    assert sorted(p.name for p in (run_dir / "history").iterdir()) == ["worker-1.jsonl"]
