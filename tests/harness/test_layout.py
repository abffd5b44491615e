"""The harness's layers, read from its source: every module sits on one layer, imports only its own layer
and those below, and no modules import each other in a circle.

Bottom to top (``LAYERS``); the README's "Architecture" section says the same in words.  An import counts
wherever it stands (a function's lazy import too) except under ``if TYPE_CHECKING:``, which names a type
for the checker and loads nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import harness

HARNESS = Path(harness.__file__).parent
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("history and contract: the run folder, its events, their one reader, the checkers that judge them, the "
     "reader of the stored message layout",
     ("harness.run_folders", "harness.history", "harness.history_columns", "harness.checkers",
      "harness.message_log")),
    ("processes and endpoints: child processes, HTTP, the storage servers, the upstream simulator, ECS tasks, "
     "the Toxiproxy server and its client",
     ("harness.processes", "harness.reaper", "harness.http_client", "harness.quiet_http", "harness.router_client",
      "harness.upstream_sim", "harness.backends", "harness.ecs_tasks", "harness.ground_truth", "harness.faults.network",
      "harness.faults.toxiproxy")),
    ("cluster: the local topology", ("harness.cluster",)),
    ("faults: the nemesis, against the topology", ("harness.faults",)),
    ("scenarios, explore, regions and load: runs of a topology",
     ("harness.scenarios", "harness.explore", "harness.region", "harness.load")),
    ("the AWS target: a deployed fleet as a topology", ("harness.aws",)),
    ("reports", ("harness.report",)),
    ("command line", ("harness.cli", "harness.cli_aws", "harness.cli_region", "harness.cli_scenario",
                      "harness.cli_args", "harness.cli_errors", "harness.demo")),
]


def module_of(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int | None:
    """The layer of the longest prefix that names ``module`` (None: on no layer)."""
    best: tuple[int, int] | None = None
    for number, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), number)
    return None if best is None else best[1]


def runtime_imports(tree: ast.AST, modules: set[str]) -> Iterator[str]:
    """The modules of ``modules`` a file imports, but under ``if TYPE_CHECKING:``; ``from P import M`` with
    ``M`` a module of package ``P`` imports ``M``, any other name imports ``P``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield from (f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                        for alias in node.names)
        else:
            yield from runtime_imports(node, modules)


def import_graph(root: Path = HARNESS) -> dict[str, set[str]]:
    """Each module of the package at ``root`` (tests and the package's own ``__init__`` aside) and the
    modules of it that it imports."""
    paths = {module_of(p, root): p for p in root.rglob("*.py")
             if not p.name.startswith(("test_", "conftest")) and p != root / "__init__.py"}
    return {module: {name for name in runtime_imports(ast.parse(path.read_text()), set(paths))
                     if name in paths and name != module}
            for module, path in paths.items()}


def upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if (layer_of(a) or 0) < (layer_of(b) or 0))


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_is_on_a_layer() -> None:
    assert sorted(m for m in import_graph() if layer_of(m) is None) == []


def test_nothing_imports_upward() -> None:
    assert upward(import_graph()) == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert circles(import_graph()) == []


def test_the_layout_checks_can_fail(tmp_path: Path) -> None:
    """An upward import, a circle and a module on no layer, in a made-up tree, are each found."""
    package = tmp_path / "harness"
    (package / "checkers").mkdir(parents=True)
    (package / "cli.py").write_text("import harness.cluster\n")
    (package / "cluster.py").write_text("from harness.cli import main\n")  # upward, and a circle with cli
    (package / "checkers" / "balance.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import harness.cli\n")  # a type only: fine
    (package / "stray.py").write_text("")
    graph = import_graph(package)
    assert upward(graph) == ["harness.cluster -> harness.cli"]
    assert circles(graph) == [["harness.cli", "harness.cluster"]]
    assert graph["harness.checkers.balance"] == set()
    assert [m for m in graph if layer_of(m) is None] == ["harness.stray"]
