"""The small arithmetic language of scenario files: ``1.1*lease + 500``, ``uniform(0, heartbeat)``.

An expression is a number or a string parsed with Python's ``ast`` and evaluated by walking the tree:
numbers, ``+ - * /``, unary minus, parentheses, names and calls of a few functions.  Nothing else is
accepted (no attribute access, no subscripts, no comparisons), so a scenario file cannot run code.

Names are the run's configured durations without their ``_ms`` suffix (``lease``, ``heartbeat``,
``reconcile``, ``clock_tolerance``, ``reconnect_max``, ...) at the run's time scale, in the unit of the
field being evaluated (seconds for ``*_s`` fields, milliseconds for bounds and ``*_ms`` params), plus any
names the caller adds (the file's ``vars``).  Functions: ``min``, ``max``, ``uniform(a, b)`` and
``choice(x, y, ...)``; the last two draw from the scenario's seeded random generator, in file order, so the
same seed gives the same values.

An expression is at most ``MAX_LENGTH`` characters, and its value (and a number given as is) must be finite:
a file cannot make the loader recurse without end or hand an infinity to the scheduler.
"""

from __future__ import annotations

import ast
import math
import operator
import random
from collections.abc import Callable, Mapping
from typing import Any

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
}
FUNCTIONS = ("min", "max", "uniform", "choice")
MAX_LENGTH = 400  # characters of one expression


class ExpressionError(ValueError):
    """An expression is malformed, names something unknown, or cannot be computed."""


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters: what an error message quotes of the input."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def parse(text: str) -> ast.expr:
    """The checked syntax tree of ``text``; ExpressionError names what is not allowed."""
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"{shown(text)}: longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, RecursionError, MemoryError) as exc:
        reason = exc.msg if isinstance(exc, SyntaxError) else "nested too deeply"
        raise ExpressionError(f"cannot parse {shown(text)}: {reason}") from None
    for node in ast.walk(tree):
        allowed = isinstance(node, ast.Constant | ast.BinOp | ast.UnaryOp | ast.Name | ast.Call | ast.Load
                             | ast.operator | ast.unaryop)
        if not allowed or (isinstance(node, ast.BinOp) and type(node.op) not in _BINARY) \
                or (isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.USub | ast.UAdd)):
            raise ExpressionError(f"{shown(text)}: {type(node).__name__} is not allowed (numbers, + - * /, "
                                  f"names and {', '.join(FUNCTIONS)} only)")
        if isinstance(node, ast.Constant) and (isinstance(node.value, bool)
                                               or not isinstance(node.value, int | float)):
            raise ExpressionError(f"{shown(text)}: {shown(node.value)} is not a number")
        if isinstance(node, ast.Call) and (not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS
                                           or node.keywords):
            raise ExpressionError(f"{shown(text)}: only the functions {', '.join(FUNCTIONS)} may be called")
    return tree


def evaluate(value: Any, names: Mapping[str, float], rng: random.Random) -> float:
    """A number as is, or the value of the expression ``value`` given ``names``; finite, or ExpressionError."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ExpressionError(f"{shown(value)} is neither a number nor an expression")
    result = _float(value) if not isinstance(value, str) else _walk(parse(value), value, names, rng)
    if not math.isfinite(result):
        raise ExpressionError(f"{shown(value)}: the value is not finite ({result})")
    return result


def _float(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:
        raise ExpressionError(f"{shown(value)}: too large a number") from None


def _walk(node: ast.expr, text: str, names: Mapping[str, float], rng: random.Random) -> float:
    if isinstance(node, ast.Constant):
        assert isinstance(node.value, int | float)  # parse() admits numbers only
        return _float(node.value)
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise ExpressionError(f"{shown(text)}: unknown name {shown(node.id)} (known: {', '.join(sorted(names))})")
        return float(names[node.id])
    if isinstance(node, ast.UnaryOp):
        inner = _walk(node.operand, text, names, rng)
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp):
        left, right = _walk(node.left, text, names, rng), _walk(node.right, text, names, rng)
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ExpressionError(f"{shown(text)}: division by zero") from None
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    args = [_walk(arg, text, names, rng) for arg in node.args]
    name = node.func.id
    if name == "uniform" and len(args) != 2:
        raise ExpressionError(f"{shown(text)}: uniform takes two arguments (low, high)")
    if not args:
        raise ExpressionError(f"{shown(text)}: {name} needs at least one argument")
    if name == "uniform":
        return rng.uniform(args[0], args[1])
    if name == "choice":
        return rng.choice(args)
    return min(args) if name == "min" else max(args)


def duration_names(durations_ms: Mapping[str, float], unit_ms: float) -> dict[str, float]:
    """``{lease: ..., heartbeat: ...}`` from ``FleetConfig.durations()``, in units of ``unit_ms``."""
    return {name.removesuffix("_ms"): ms / unit_ms for name, ms in durations_ms.items()}
