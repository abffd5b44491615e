"""A tiny algebra of DynamoDB conditions and updates with two interpreters.

Lease rules (``fleet.lease``) are written once as values of this algebra.  ``evaluate`` / ``apply`` run
them over a plain dict (the pure core: property tests and the model store use it, no network), and
``render`` turns them into the ``ConditionExpression`` / ``UpdateExpression`` strings with attribute names
and values that ``fleet.store`` sends.  Only what dynalite and moto both support is expressible: ``=``,
``<``, ``<=``, ``>``, ``attribute_not_exists``, ``AND`` / ``OR``, ``SET`` (also ``if_not_exists``),
``REMOVE``, and ``ADD`` / ``DELETE`` on string sets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Item = dict[str, Any]


class _Names:
    """Collects ``#n`` / ``:v`` placeholders while rendering one request."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {}

    def name(self, attr: str) -> str:
        placeholder = "#" + attr
        self.names[placeholder] = attr
        return placeholder

    def value(self, value: Any) -> str:
        placeholder = f":v{len(self.values)}"
        self.values[placeholder] = value
        return placeholder


@dataclass(frozen=True)
class Eq:
    attr: str
    value: Any

    def evaluate(self, item: Mapping[str, Any] | None) -> bool:
        return item is not None and self.attr in item and item[self.attr] == self.value

    def render(self, n: _Names) -> str:
        return f"{n.name(self.attr)} = {n.value(self.value)}"


@dataclass(frozen=True)
class Lt:
    attr: str
    value: int | float

    def evaluate(self, item: Mapping[str, Any] | None) -> bool:
        return item is not None and self.attr in item and item[self.attr] < self.value

    def render(self, n: _Names) -> str:
        return f"{n.name(self.attr)} < {n.value(self.value)}"


@dataclass(frozen=True)
class Le:
    attr: str
    value: int | float

    def evaluate(self, item: Mapping[str, Any] | None) -> bool:
        return item is not None and self.attr in item and item[self.attr] <= self.value

    def render(self, n: _Names) -> str:
        return f"{n.name(self.attr)} <= {n.value(self.value)}"


@dataclass(frozen=True)
class Gt:
    attr: str
    value: int | float

    def evaluate(self, item: Mapping[str, Any] | None) -> bool:
        return item is not None and self.attr in item and item[self.attr] > self.value

    def render(self, n: _Names) -> str:
        return f"{n.name(self.attr)} > {n.value(self.value)}"


@dataclass(frozen=True)
class NotExists:
    attr: str

    def evaluate(self, item: Mapping[str, Any] | None) -> bool:
        return item is None or self.attr not in item

    def render(self, n: _Names) -> str:
        return f"attribute_not_exists({n.name(self.attr)})"


@dataclass(frozen=True)
class Exists:
    attr: str

    def evaluate(self, item: Mapping[str, Any] | None) -> bool:
        return item is not None and self.attr in item

    def render(self, n: _Names) -> str:
        return f"attribute_exists({n.name(self.attr)})"


@dataclass(frozen=True)
class And:
    parts: tuple[Condition, ...]

    def evaluate(self, item: Mapping[str, Any] | None) -> bool:
        return all(p.evaluate(item) for p in self.parts)

    def render(self, n: _Names) -> str:
        return "(" + " AND ".join(p.render(n) for p in self.parts) + ")"


@dataclass(frozen=True)
class Or:
    parts: tuple[Condition, ...]

    def evaluate(self, item: Mapping[str, Any] | None) -> bool:
        return any(p.evaluate(item) for p in self.parts)

    def render(self, n: _Names) -> str:
        return "(" + " OR ".join(p.render(n) for p in self.parts) + ")"


Condition = Eq | Lt | Le | Gt | NotExists | Exists | And | Or


def all_of(*parts: Condition) -> Condition:
    return parts[0] if len(parts) == 1 else And(tuple(parts))


def any_of(*parts: Condition) -> Condition:
    return parts[0] if len(parts) == 1 else Or(tuple(parts))


@dataclass(frozen=True)
class Update:
    """``SET`` these attributes (``set_if_absent``: only where the item has none), ``REMOVE`` these,
    ``ADD`` / ``DELETE`` these strings to / from string-set attributes."""

    set: Mapping[str, Any] = field(default_factory=dict)
    add_to_set: Mapping[str, frozenset[str]] = field(default_factory=dict)
    delete_from_set: Mapping[str, frozenset[str]] = field(default_factory=dict)
    set_if_absent: Mapping[str, Any] = field(default_factory=dict)
    remove: frozenset[str] = frozenset()

    def apply(self, item: Mapping[str, Any] | None, key: Mapping[str, Any]) -> Item:
        result: Item = dict(item) if item is not None else dict(key)
        result.update(self.set)
        for attr, value in self.set_if_absent.items():
            result.setdefault(attr, value)
        for attr in self.remove:
            result.pop(attr, None)
        for attr, members in self.add_to_set.items():
            result[attr] = set(result.get(attr, set())) | set(members)
        for attr, members in self.delete_from_set.items():
            remaining = set(result.get(attr, set())) - set(members)
            if remaining:
                result[attr] = remaining
            else:
                result.pop(attr, None)
        return result

    def render(self, n: _Names) -> str:
        clauses = []
        assignments = [f"{n.name(a)} = {n.value(v)}" for a, v in self.set.items()]
        assignments += [f"{n.name(a)} = if_not_exists({n.name(a)}, {n.value(v)})"
                        for a, v in self.set_if_absent.items()]
        if assignments:
            clauses.append("SET " + ", ".join(assignments))
        if self.remove:
            clauses.append("REMOVE " + ", ".join(n.name(a) for a in sorted(self.remove)))
        adds = [(a, m) for a, m in self.add_to_set.items() if m]
        if adds:
            clauses.append("ADD " + ", ".join(f"{n.name(a)} {n.value(set(m))}" for a, m in adds))
        deletes = [(a, m) for a, m in self.delete_from_set.items() if m]
        if deletes:
            clauses.append("DELETE " + ", ".join(f"{n.name(a)} {n.value(set(m))}" for a, m in deletes))
        return " ".join(clauses)


@dataclass(frozen=True)
class Write:
    """One conditional write on one item: the unit a lease rule decides and the store executes.

    ``replace`` makes it a whole-item put (the item becomes ``key`` + ``update.set``); otherwise an update.
    ``condition`` None means unconditional (only the ``unsafe`` profile acquires that way).
    """

    key: Mapping[str, Any]
    update: Update
    condition: Condition | None = None
    replace: bool = False

    def allowed(self, item: Mapping[str, Any] | None) -> bool:
        return self.condition is None or self.condition.evaluate(item)

    def apply(self, item: Mapping[str, Any] | None) -> Item:
        if self.replace:
            return {**self.key, **self.update.set}
        return self.update.apply(item, self.key)

    def render(self) -> dict[str, Any]:
        """Keyword arguments (in the Python/typed-value-free form) for UpdateItem or PutItem."""
        n = _Names()
        request: dict[str, Any] = {}
        if self.replace:
            request["Item"] = {**self.key, **self.update.set}
        else:
            request["Key"] = dict(self.key)
            request["UpdateExpression"] = self.update.render(n)
        if self.condition is not None:
            request["ConditionExpression"] = self.condition.render(n)
        if n.names:
            request["ExpressionAttributeNames"] = n.names
        if n.values:
            request["ExpressionAttributeValues"] = n.values
        return request

