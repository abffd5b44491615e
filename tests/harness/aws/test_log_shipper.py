"""Tests of harness.aws.log_shipper against a moto server: a local fleet's history shipped to CloudWatch
Logs comes back through ``fetch_history`` as it was written, and each call ships only what is new."""

from __future__ import annotations

import json
from pathlib import Path

import boto3

from harness.aws.log_shipper import LogShipper
from harness.aws.logs import WORKERS, fetch_history

GROUP = "/ecs/fleet"
T0 = 1_796_000_000_000


def event(src: str, n: int) -> dict[str, object]:
    return {"t": T0 + n, "src": src, "type": "msg.persist", "pk": "CONN#c1", "seq_from": n, "seq_to": n}


def test_shipped_history_comes_back_from_logs_as_written(moto_aws: str, tmp_path: Path) -> None:
    logs = boto3.client("logs", region_name="eu-west-1")
    logs.create_log_group(logGroupName=GROUP)
    history = tmp_path / "run" / "history"
    history.mkdir(parents=True)
    written = {src: [event(src, n) for n in range(3)] for src in ("worker-1", "worker-2")}
    for src, events in written.items():
        (history / f"{src}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events)
                                              + ('{"t": 1, "half' if src == "worker-1" else ""))
    shipper = LogShipper(logs, GROUP, tmp_path / "run", ["worker-1", "worker-2", "worker-3"])
    assert shipper.ship() == 6  # the half-written last line waits; worker-3 has no file yet
    with (history / "worker-1.jsonl").open("a") as file:
        file.write('"}\n' + json.dumps(event("worker-1", 3)) + "\n")
    assert shipper.ship() == 2  # the completed line (no event: shipped as a log line) and the new event
    assert shipper.ship() == 0
    fetched = fetch_history(logs, [(GROUP, WORKERS)], T0 - 1, T0 + 10, tmp_path / "back")
    assert fetched.events == {"worker-1": 4, "worker-2": 3}
    back = [json.loads(line) for line in (tmp_path / "back" / "history" / "worker-1.jsonl").read_text().splitlines()]
    assert back == [*written["worker-1"], event("worker-1", 3)]
