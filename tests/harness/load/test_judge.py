"""``harness.load.judge`` without a fleet: which checkers fail a Locust run, which streams it judges, and
which of the ``up``'s workers still run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fleet.history import HistoryWriter
from harness.load.judge import UpTopology, failing_checkers, started_ids


def verdict(**checkers: dict[str, Any]) -> dict[str, Any]:
    return {"checkers": checkers}


def test_a_checker_that_applies_and_is_not_valid_fails_the_run_and_one_that_does_not_apply_does_not() -> None:
    no_bound = {"valid": False, "applies": False, "message": "no bound set for this scenario"}
    assert failing_checkers(verdict(bounds=no_bound, sequences={"valid": True})) == []
    assert failing_checkers(verdict(bounds=no_bound, sequences={"valid": False}, log={"valid": "unknown"},
                                    zombie_writes={"valid": True})) == ["log", "sequences"]


def test_the_streams_judged_are_those_every_locust_process_started(tmp_path: Path) -> None:
    for pid, pks in ((11, ["CONN#load-11-1", "CONN#load-11-2"]), (12, ["CONN#load-12-1"])):
        history = HistoryWriter(str(tmp_path / "history" / f"locust-{pid}.jsonl"), "locust")
        for pk in pks:
            history.emit("load.start", pk=pk, status=200)
            history.emit("load.owned", pk=pk, ms=5.0)
        history.close()
    other = HistoryWriter(str(tmp_path / "history" / "harness.jsonl"), "harness")
    other.emit("load.start", pk="CONN#c00001", status=200)
    other.close()
    assert started_ids(tmp_path) == ["load-11-1", "load-11-2", "load-12-1"]


def test_a_worker_whose_process_is_gone_is_not_live(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    state = {"run_dir": str(tmp_path), "workers": [{"id": "worker-1", "pid": os.getpid()},
                                                   {"id": "worker-2", "pid": int(gone.stdout)}]}
    history = HistoryWriter(str(tmp_path / "history" / "locust-1.jsonl"), "locust")
    assert UpTopology(json.loads(json.dumps(state)), history).live_workers() == {"worker-1"}
    history.close()
