"""The columns of a run's events, built while its history is read (``harness.history.read_typed_history``).

A long history is mostly two event types (``emit`` and ``msg.persist``) with a handful of fields each.  Kept
as parsed dicts, a million events take about a gigabyte, and each column a checker asks for is another pass
over dicts scattered through it.  Here a file is decoded about a megabyte at a time, each piece's events are
turned into columns per type while they are still in the cache, and the dicts are dropped.  A field of a
type is one ``FieldColumn``:

- ``numbers``: float64, NaN where missing, when every value present is an int or a float (not a bool) that
  a float holds exactly; which ones were ints is kept, so the values read back as parsed;
- ``text``: codes into the field's distinct strings (-1 where missing), when every value present is a string;
- ``objects``: the parsed values (NaN where missing) otherwise: lists, dicts, mixed types, a JSON null.

Pieces of one type whose kinds differ (a field that is a number here and a string there) are joined as
``objects``.  ``TypeColumnsBuilder`` collects the pieces in file order; the reader puts them in history order
with ``FieldColumn.take``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np
import pandas as pd

NUMBERS, TEXT, OBJECTS, MISSING = "numbers", "text", "objects", "missing"
EXACT = 2.0**53  # beyond this a float no longer holds every integer
_NUMBER_KINDS = {"floating": False, "integer": True, "mixed-integer-float": None}


@dataclass(frozen=True)
class FieldColumn:
    """One field of one event type, rows in one order (see the module docstring).  ``values`` are float64
    (numbers), int32 codes (text) or objects; ``uniques`` the distinct strings of a text column; ``ints``
    which numbers were parsed as ints."""

    kind: str
    values: np.ndarray
    uniques: np.ndarray | None = None
    ints: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.values)

    def take(self, rows: np.ndarray) -> FieldColumn:
        return FieldColumn(self.kind, self.values[rows], self.uniques,
                           None if self.ints is None else self.ints[rows])

    def raw(self) -> np.ndarray:
        """The values as parsed, as objects, NaN where missing; equal strings are one object."""
        if self.kind == NUMBERS:
            assert self.ints is not None
            values = self.values.astype(object)
            values[self.ints] = self.values[self.ints].astype(np.int64).astype(object)
            return values
        if self.kind == TEXT:
            return self.shared_text()
        return self.values

    def shared_text(self) -> np.ndarray:
        """A text column's strings (objects, NaN where missing), one object per distinct string."""
        assert self.uniques is not None
        return np.append(self.uniques, np.nan)[self.values]  # code -1: the NaN


class TypeColumnsBuilder:
    """The columns of one event type, collected piece by piece in file order."""

    def __init__(self) -> None:
        self.rows = 0
        self._pieces: dict[str, list[tuple[int, FieldColumn]]] = {}  # field -> (first row, piece)

    def add(self, events: Sequence[dict[str, Any]], given: dict[str, np.ndarray]) -> None:
        """Add a piece: events of this type in file order, and the fields the reader has already read
        from them (``given``: their values as objects)."""
        fields = set(events[0]).union(*events) if len(events) > 1 else set(events[0])
        self.add_columns({name: _column(given[name] if name in given else _extract(events, name))
                          for name in fields}, len(events))

    def add_columns(self, columns: dict[str, FieldColumn], rows: int) -> None:
        """Add a piece already in columns (``rows`` events; a field they lack is missing from ``columns``)."""
        for name, column in columns.items():
            self._pieces.setdefault(name, []).append((self.rows, column))
        self.rows += rows

    def build(self) -> dict[str, FieldColumn]:
        """Every field's column over all pieces (missing rows filled)."""
        return {name: self._joined(pieces) for name, pieces in self._pieces.items()}

    def _joined(self, pieces: list[tuple[int, FieldColumn]]) -> FieldColumn:
        kinds = {piece.kind for _, piece in pieces} - {MISSING}
        kind = kinds.pop() if len(kinds) == 1 else OBJECTS if kinds else MISSING
        strings: dict[str, int] = {}  # a text field's distinct strings over every piece, and their codes
        parts: list[np.ndarray] = []
        ints: list[np.ndarray] = []
        covered = 0
        for first, piece in [*pieces, (self.rows, None)]:
            if first > covered:  # rows of this type whose events lack the field
                parts.append(_gap(kind, first - covered))
                ints.append(np.zeros(first - covered, dtype=bool))
            if piece is None:
                break
            if kind == TEXT and piece.kind == TEXT:
                assert piece.uniques is not None
                mapping = np.fromiter((strings.setdefault(u, len(strings)) for u in piece.uniques.tolist()),
                                      dtype=np.int32, count=len(piece.uniques))
                parts.append(np.where(piece.values >= 0, mapping[piece.values], -1).astype(np.int32))
            elif piece.kind == MISSING:
                parts.append(_gap(kind, len(piece)))
            else:
                parts.append(piece.values if kind == piece.kind else piece.raw())
            ints.append(piece.ints if piece.ints is not None else np.zeros(len(piece), dtype=bool))
            covered = first + len(piece)
        values = np.concatenate(parts) if parts else np.empty(0, dtype=object)
        return FieldColumn(kind, values, np.asarray(list(strings), dtype=object) if kind == TEXT else None,
                           np.concatenate(ints) if kind == NUMBERS else None)


def _column(values: np.ndarray) -> FieldColumn:
    """One piece of a field (objects, NaN where missing) as a column of the kind its values allow."""
    kind = pd.api.types.infer_dtype(values, skipna=True)
    if kind == "empty":
        return FieldColumn(OBJECTS if _has_null(values) else MISSING, values)
    if kind == "string":
        codes, uniques = pd.factorize(values)
        if _has_null(values[codes < 0]):
            return FieldColumn(OBJECTS, values)
        return FieldColumn(TEXT, codes.astype(np.int32), np.asarray(uniques, dtype=object))
    if kind in _NUMBER_KINDS:
        numbers = values.astype("float64")
        absent = np.isnan(numbers)
        if _has_null(values[absent]) or not (np.abs(numbers[~absent]) <= EXACT).all():
            return FieldColumn(OBJECTS, values)
        ints = _NUMBER_KINDS[kind]
        flags = (np.fromiter(map(int.__instancecheck__, values), dtype=bool, count=len(values))
                 if ints is None else np.full(len(values), ints))
        return FieldColumn(NUMBERS, numbers, ints=flags & ~absent)
    return FieldColumn(OBJECTS, values)


def _extract(events: Sequence[dict[str, Any]], name: str) -> np.ndarray:
    """One field of every event (dicts), as objects (NaN where missing)."""
    return np.fromiter(map(dict.get, events, repeat(name), repeat(np.nan)), dtype=object, count=len(events))


def _has_null(values: np.ndarray) -> bool:
    """Whether a JSON null (None) is among these values (the missing ones: a null is kept as parsed)."""
    return len(values) > 0 and None in values.tolist()


def _gap(kind: str, rows: int) -> np.ndarray:
    if kind == NUMBERS:
        return np.full(rows, np.nan)
    if kind == TEXT:
        return np.full(rows, -1, dtype=np.int32)
    return np.full(rows, np.nan, dtype=object)
