"""The shape the fleet's code keeps (issue 10): modules under 600 lines, a ``Worker`` under 300 lines that
never branches on its profile's name (every decision is the profile's); and (issue 25) an import graph
without a circle, in which no module but the entry point imports ``Worker``."""

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


def fleet_modules_imported(source: str) -> set[str]:
    """The fleet modules one module's source imports: ``import fleet.x``, ``from fleet.x import y`` and
    ``from fleet import x`` (``TYPE_CHECKING`` imports too: a type that names another module is a dependency
    on it)."""
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "fleet":
            imported |= {alias.name for alias in node.names}
        names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                 else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        imported |= {name.split(".")[1] for name in names if name.startswith("fleet.")}
    return imported


def fleet_imports() -> dict[str, set[str]]:
    """Each fleet module and the fleet modules it imports, from the source."""
    return {path.stem: fleet_modules_imported(path.read_text()) for path in FLEET.glob("*.py")}


def layout_faults(graph: dict[str, set[str]]) -> list[str]:
    """What the import graph must not hold: a circle, or a module other than the entry point (``worker``)
    that imports ``Worker``'s module."""
    return ([f"circle: {' -> '.join(circle)}" for circle in cycles(graph)]
            + [f"{module} imports worker" for module, imported in sorted(graph.items())
               if "worker" in imported and module != "worker"])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, or of one that imports itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph.get(module, ())):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == module:
                    break
            if len(component) > 1 or module in graph.get(module, ()):
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_cycle_finder_finds_a_circle_and_a_self_import_and_nothing_in_a_tree() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}, "b": set()}) == [["a"]]
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_import_graph_is_read_from_the_source() -> None:
    graph = fleet_imports()
    assert "lease" in graph["worker"] and "worker" not in graph["lease"]
    assert "machine_io" in graph["stream_driver"]  # ``from fleet import machine_io as mio``
    source = ("from typing import TYPE_CHECKING\nimport fleet.lease\nfrom fleet import worker as w\n"
              "if TYPE_CHECKING:\n    from fleet.store import AwsAdapter\n")
    assert fleet_modules_imported(source) == {"lease", "worker", "store"}


def test_the_layout_gate_names_a_circle_and_an_import_of_worker() -> None:
    graph = {"worker": {"liveness", "lease"}, "liveness": {"ports"}, "ports": {"lease"}, "lease": set()}
    assert layout_faults(graph) == []
    assert layout_faults({**graph, "ports": {"lease", "worker"}}) == [
        "circle: liveness -> ports -> worker", "ports imports worker"]
    assert layout_faults({**graph, "metrics": {"worker"}}) == ["metrics imports worker"]


def test_fleet_has_no_import_cycle_and_only_the_entry_point_imports_worker() -> None:
    assert layout_faults(fleet_imports()) == []
