"""The shape the fleet's code keeps (issue 10): modules under 600 lines, a ``Worker`` under 300 lines that
never branches on its profile's name (every decision is the profile's)."""

from __future__ import annotations

import ast
from pathlib import Path

FLEET = Path(__file__).resolve().parents[2] / "fleet"


def test_no_fleet_module_is_over_600_lines() -> None:
    long = {p.name: n for p in FLEET.glob("*.py") if (n := len(p.read_text().splitlines())) > 600}
    assert long == {}


def test_the_worker_class_is_under_300_lines_and_never_compares_its_profile_name() -> None:
    tree = ast.parse((FLEET / "worker.py").read_text())
    [worker] = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Worker"]
    assert worker.end_lineno is not None and worker.end_lineno - worker.lineno + 1 < 300
    comparisons = [ast.unparse(node) for node in ast.walk(worker) if isinstance(node, ast.Compare)]
    assert [c for c in comparisons if "profile.name" in c or "config.profile" in c] == []
