"""Reading terraform/ without terraform: python-hcl2 parses each module, and ``Instance`` follows module
calls from the root so an expression like ``${var.target_value}`` resolves to the value the root's
defaults would give it.

Only what the deploy checks need is evaluated: literals, ``${var.X}`` (the caller's argument, else the
variable's default), ``${local.X}``, and templates made of those.  Anything else (functions, resource
attributes, conditionals) is returned as its expression text, which checks may still search.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import hcl2

OPTIONS = hcl2.SerializationOptions(strip_string_quotes=True, explicit_blocks=False, with_comments=False)
# ${var.name} or ${local.name} as a whole expression, or inside a template.
REFERENCE = re.compile(r"\$\{(var|local)\.([A-Za-z_][A-Za-z0-9_-]*)\}")
_MAX_DEPTH = 20


class TerraformParseError(Exception):
    """A .tf file python-hcl2 cannot parse; the message names the file."""


def tf_files(directory: Path) -> list[Path]:
    """Every .tf file under ``directory``, skipping terraform's working directories."""
    return sorted(p for p in directory.rglob("*.tf") if ".terraform" not in p.parts)


def parse_file(path: Path) -> dict[str, Any]:
    """The file as python-hcl2 reads it (a fresh copy: callers may change it)."""
    text = path.read_text(encoding="utf-8")
    try:
        return copy.deepcopy(_parse_text(text))
    except Exception as exc:  # python-hcl2 raises lark errors of several kinds
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TerraformParseError(f"{path}: {first_line}") from exc


@cache
def _parse_text(text: str) -> dict[str, Any]:
    """Parsing is slow (lark); the broken-copy tests parse the same text many times."""
    parsed: dict[str, Any] = hcl2.loads(text, serialization_options=OPTIONS)
    return parsed


@dataclass(frozen=True)
class Module:
    """One module directory: its blocks merged across its .tf files."""

    path: Path
    resources: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    data: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    variables: dict[str, dict[str, Any]] = field(default_factory=dict)
    locals: dict[str, Any] = field(default_factory=dict)
    modules: dict[str, dict[str, Any]] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def resource(self, type_name: str) -> dict[str, dict[str, Any]]:
        """Resources of one type, by name (empty when there are none)."""
        return self.resources.get(type_name, {})

    def data_source(self, type_name: str) -> dict[str, dict[str, Any]]:
        return self.data.get(type_name, {})


@cache
def load_module(path: Path) -> Module:
    """Parse the .tf files directly in ``path`` (not its subdirectories)."""
    module = Module(path=path)
    for tf in sorted(path.glob("*.tf")):
        parsed = parse_file(tf)
        for kind, target in (("resource", module.resources), ("data", module.data)):
            for entry in parsed.get(kind, []):
                for type_name, named in entry.items():
                    target.setdefault(type_name, {}).update(named)
        for kind, target in (
            ("variable", module.variables),
            ("module", module.modules),
            ("output", module.outputs),
        ):
            for entry in parsed.get(kind, []):
                target.update(entry)
        for entry in parsed.get("locals", []):
            module.locals.update(entry)
    return module


@dataclass(frozen=True)
class Instance:
    """A module as called from the root: ``args`` are the caller's arguments, evaluated in ``parent``."""

    module: Module
    args: dict[str, Any]
    parent: Instance | None = None
    name: str = "root"

    @classmethod
    def root(cls, terraform_dir: Path) -> Instance:
        load_module.cache_clear()
        return cls(load_module(terraform_dir.resolve()), {})

    def child(self, name: str) -> Instance:
        """The instance of ``module "<name>"`` called from this one."""
        if name not in self.module.modules:
            raise KeyError(f"{self.module.path} calls no module {name!r}")
        call = self.module.modules[name]
        source = (self.module.path / str(call["source"])).resolve()
        return Instance(load_module(source), call, self, f"{self.name}.{name}")

    def descendant(self, *names: str) -> Instance:
        instance = self
        for name in names:
            instance = instance.child(name)
        return instance

    def resolve(self, value: Any, depth: int = 0) -> Any:
        """``value`` with every resolvable reference replaced (see the module docstring)."""
        if depth > _MAX_DEPTH:
            return value
        if isinstance(value, list):
            return [self.resolve(item, depth + 1) for item in value]
        if isinstance(value, dict):
            return {key: self.resolve(item, depth + 1) for key, item in value.items()}
        if not isinstance(value, str):
            return value
        whole = REFERENCE.fullmatch(value)
        if whole:
            return self._reference(whole.group(1), whole.group(2), value, depth)

        def substitute(match: re.Match[str]) -> str:
            resolved = self._reference(match.group(1), match.group(2), match.group(0), depth)
            return str(resolved) if isinstance(resolved, str | int | float) else match.group(0)

        return REFERENCE.sub(substitute, value)

    def _reference(self, kind: str, name: str, text: str, depth: int) -> Any:
        if kind == "local":
            if name in self.module.locals:
                return self.resolve(self.module.locals[name], depth + 1)
            return text
        if self.parent is not None and name in self.args:
            return self.parent.resolve(self.args[name], depth + 1)
        variable = self.module.variables.get(name)
        if variable is not None and "default" in variable:
            return self.resolve(variable["default"], depth + 1)
        return text


def references(expression: Any, kind: str) -> list[str]:
    """Names referenced as ``<kind>.NAME`` anywhere in an unevaluated expression's text."""
    return re.findall(rf"\b{kind}\.([A-Za-z_][A-Za-z0-9_-]*)", str(expression))
