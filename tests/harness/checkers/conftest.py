"""Builders of small literal histories for the checker tests."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from harness.checkers.events import Events, read_events

CONFIG = {"lease_ms": 2000.0, "heartbeat_ms": 500.0, "reconcile_ms": 6000.0, "desired_check_ms": 1000.0,
          "clock_tolerance_ms": 100.0}


class HistoryBuilder:
    """Appends events (each method is one event type or a session) and builds the history frame."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def at(self, t: float, type: str, src: str, **fields: Any) -> HistoryBuilder:
        self.events.append({"t": float(t), "src": src, "type": type, **fields})
        return self

    def run_start(self, t: float = 0.0, **fields: Any) -> HistoryBuilder:
        settings = {"scenario": "test", "profile": "blog", "timescale": 0.1, "config": dict(CONFIG),
                    "connections": 1, "workers": 2, "bound_ms": None, "seed": 1, **fields}
        return self.at(t, "run.start", "harness", **settings)

    def session(self, pk: str, worker: str, open_t: float, close_t: float | None = None, *,
                session: str | None = None, reason: str = "client_close",
                last_pong_t: float | None = None, gen: str | None = None) -> HistoryBuilder:
        name = session or f"{worker}-{open_t:g}"
        ident = {"gen": gen} if gen is not None else {}
        self.at(open_t, "sub.open", "upstream", pk=pk, session=name, worker=worker, from_seq=0, **ident)
        if close_t is not None:
            self.at(close_t, "sub.close", "upstream", pk=pk, session=name, worker=worker, reason=reason,
                    last_pong_t=last_pong_t if last_pong_t is not None else close_t, last_seq_sent=0, **ident)
        return self

    def emit(self, pk: str, seq: int, t: float) -> HistoryBuilder:
        return self.at(t, "emit", "upstream", pk=pk, seq=seq)

    def persist(self, t: float, pk: str, worker: str, seq_from: int, seq_to: int | None = None,
                outcome: str = "ok", epoch: int | None = 1, **fields: Any) -> HistoryBuilder:
        """``fields``: e.g. ``gen``, ``sent`` (when the request was built)."""
        return self.at(t, "msg.persist", worker, pk=pk, worker=worker, epoch=epoch, seq_from=seq_from,
                       seq_to=seq_to if seq_to is not None else seq_from, outcome=outcome, **fields)

    def acquire(self, t: float, pk: str, worker: str, expires_ms: float, epoch: int | None = 1,
                outcome: str = "ok", **fields: Any) -> HistoryBuilder:
        return self.at(t, "lease.acquire", worker, pk=pk, worker=worker, epoch=epoch, outcome=outcome,
                       expires_ms=expires_ms, **{"via": "reconcile", **fields})

    def stored(self, t: float, pk: str, *items: tuple[Any, ...]) -> HistoryBuilder:
        """``final.persisted`` with items (seq, worker, gen, epoch, sent_ms)."""
        rows = [dict(zip(("seq", "worker", "gen", "epoch", "sent_ms"), item, strict=True)) for item in items]
        return self.at(t, "final.persisted", "harness", pk=pk, seqs=[r["seq"] for r in rows], items=rows)

    def log(self, t: float, pk: str, *entries: tuple[Any, ...]) -> HistoryBuilder:
        """``final.log`` with entries (batch, kind, worker, gen, epoch, seq_from, seq_to, written_ms[, take])."""
        names = ("batch", "kind", "worker", "gen", "epoch", "seq_from", "seq_to", "written_ms", "take")
        return self.at(t, "final.log", "harness", pk=pk,
                       entries=[dict(zip(names[:len(e)], e, strict=True)) for e in entries])

    def renew(self, t: float, worker: str, expires_ms: float, pk: str | None = None,
              outcome: str = "ok") -> HistoryBuilder:
        fields = {"pk": pk} if pk is not None else {}
        return self.at(t, "lease.renew", worker, worker=worker, outcome=outcome, expires_ms=expires_ms,
                       **fields)

    def fault(self, t: float, kind: str, target: str, stop_t: float | None = None) -> HistoryBuilder:
        self.at(t, "fault.start", "nemesis", kind=kind, target=target, params={})
        if stop_t is not None:
            self.at(stop_t, "fault.stop", "nemesis", kind=kind, target=target, params={})
        return self

    def frame(self) -> Events:
        """The history as the checkers get it: written as a run's history file, read by the one reader."""
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "history").mkdir()
            (Path(folder) / "history" / "all.jsonl").write_text("".join(json.dumps(e) + "\n" for e in self.events))
            return read_events(folder)


@pytest.fixture
def build() -> HistoryBuilder:
    return HistoryBuilder()
