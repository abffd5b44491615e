"""The Locust storm file against a real fleet: every user owns its stream, a mass disconnect is recovered
from, and both Locust's CSVs and the run's history say so, with two Locust processes (a master and a worker:
one storm for all of them; standalone runs the same user code in one process), the run ends with the final
scan and every checker that applies valid (``harness.load.judge``), and ``python -m
harness.report RUN --locust-csv PREFIX`` turns the CSVs and the history into the report's Locust section."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from harness.cluster import Cluster, ClusterSpec
from harness.load.judge import failing_checkers
from harness.processes import REPO_ROOT

pytestmark = [pytest.mark.timeout(300)]
USERS = 4
LOCUSTFILE = str(REPO_ROOT / "harness" / "load" / "locustfile.py")


@pytest.mark.parametrize("storm", ["kill", "disconnect"])
def test_a_storm_with_no_time_to_trigger_it_is_refused_not_skipped(tmp_path: Path, storm: str) -> None:
    """``--storm kill`` alone once ran a test with no storm, judged as if it had had one."""
    locust = subprocess.run([sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--headless", "-u", "1", "-t", "1s",
                             "--storm", storm, "--wsfleet-state", str(tmp_path / "none.json")],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert locust.returncode != 0
    assert f"locustfile: --storm {storm} needs --storm-after S" in locust.stdout + locust.stderr


@pytest.mark.e2e
def test_every_user_owns_its_stream_and_recovers_from_a_mass_disconnect(tmp_path: Path) -> None:
    spec = ClusterSpec(workers=2, profile="hardened", timescale=0.1, run_dir=tmp_path / "run")
    with Cluster(spec) as cluster:
        state = tmp_path / "up.json"
        assert cluster.backend is not None
        state.write_text(json.dumps({**cluster.describe(), "backend_env": cluster.backend.env()}))
        locust = subprocess.run(
            [sys.executable, "-m", "locust", "-f", LOCUSTFILE,
             "--headless", "-u", str(USERS), "-r", str(USERS), "-t", "10s", "--csv", str(tmp_path / "locust"),
             "--wsfleet-state", str(state), "--watch-s", "0.2", "--storm-after", "4", "--storm", "disconnect",
             "--processes", "2"],
            cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert locust.returncode == 0, locust.stderr[-3000:] + locust.stdout[-3000:]
    # the run ended as a scenario does: the final scan of the users' streams, and a valid verdict
    verdict = json.loads((spec.run_dir / "verdict.json").read_text())
    assert verdict["checkers"]["sequences"]["valid"] is True and verdict["lost_sequences"] == 0
    assert failing_checkers(verdict) == []
    said = [line for line in locust.stdout.splitlines() + locust.stderr.splitlines() if "locustfile: " in line
            and "VALID" in line]
    assert len(said) == 1 and "locustfile: VALID: every checker that applies; 0 duplicate claims" in said[0], said
    with (tmp_path / "locust_stats.csv").open() as stats:
        rows = {(row["Type"] or None, row["Name"]): row for row in csv.DictReader(stats)}
    assert int(rows[("POST", "START")]["Request Count"]) == USERS
    assert int(rows[("STREAM", "owned")]["Request Count"]) == USERS
    assert int(rows[("STREAM", "recovered")]["Request Count"]) >= USERS  # every stream was dropped once
    assert int(rows[(None, "Aggregated")]["Failure Count"]) == 0
    events = [json.loads(line) for path in (spec.run_dir / "history").glob("locust-*.jsonl")
              for line in path.read_text().splitlines()]
    kinds = Counter(e["type"] for e in events)
    assert kinds["load.storm"] == 1 and kinds["load.owned"] == USERS and kinds["load.recovered"] >= USERS
    assert all(e["src"] == "locust" and e["ms"] >= 0 for e in events if e["type"] == "load.recovered")
    report = subprocess.run([sys.executable, "-m", "harness.report", str(spec.run_dir), "--locust-csv",
                             str(tmp_path / "locust"), "--out", str(tmp_path / "report")],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    assert report.returncode == 0, report.stderr[-3000:]
    html = (tmp_path / "report" / "report.html").read_text()
    assert '<h2 id="load">Load (Locust)</h2>' in html
    assert f"<td>STREAM</td><td>owned</td><td>{USERS}</td><td>0</td>" in html
    assert (tmp_path / "report" / "figures" / "locust_history.png").is_file()
