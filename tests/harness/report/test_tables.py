"""One run's row tables: AWS requests and error rates per worker, each incarnation counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.report.model import load_run
from harness.report.tables import requests_table
from tests.harness.report.histories import T0, small_run


def add_requests(run_dir: Path, worker: str, counts: list[tuple[int, int, dict[str, int] | None]]) -> None:
    """``requests`` events of ``worker``: (coordination, messages, errors or None) in order."""
    with (run_dir / "history" / f"{worker}.jsonl").open("a") as handle:
        for number, (coordination, messages, errors) in enumerate(counts):
            event: dict[str, Any] = {"t": T0 + 7000 + number, "src": worker, "type": "requests",
                                     "worker": worker, "held": 1, "coordination": coordination,
                                     "messages": messages}
            if errors is not None:
                event["errors"] = errors
            handle.write(json.dumps(event) + "\n")


def test_request_error_rates_per_worker_count_each_incarnation(tmp_path: Path) -> None:
    small_run(tmp_path)
    add_requests(tmp_path, "worker-2", [(10, 30, {"ProvisionedThroughputExceededException": 2}),
                                        (20, 60, {"ProvisionedThroughputExceededException": 4, "TimeoutError": 1}),
                                        (5, 15, {"RequestThrottled": 1})])  # restarted: counters from zero
    add_requests(tmp_path, "worker-3", [(50, 50, {})])
    frame, note = requests_table(load_run(tmp_path, lambda _: None))
    assert note is None
    assert frame.to_dict("records") == [
        {"worker": "worker-2", "requests": "100", "errors": "6", "error_rate": "6.0%",
         "errors_by_code": "ProvisionedThroughputExceededException 4, RequestThrottled 1, TimeoutError 1"},
        {"worker": "worker-3", "requests": "100", "errors": "0", "error_rate": "0.0%", "errors_by_code": ""},
    ]


def test_without_error_counters_the_table_says_so(tmp_path: Path) -> None:
    small_run(tmp_path)
    add_requests(tmp_path, "worker-2", [(10, 30, None)])
    frame, note = requests_table(load_run(tmp_path, lambda _: None))
    assert frame["requests"].tolist() == ["40"] and frame["error_rate"].tolist() == [""]
    assert note is not None and "no errors field" in note
