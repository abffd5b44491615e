"""The streams of the simulated upstream (DESIGN §8): sequence numbering, emission timing, replay buffer.

A stream emits seq ``n`` at ``start + n / rate`` on the event loop's monotonic clock, from seq 1, whether or
not anyone listens.  Emission is driven by one ``loop.call_at`` timer per stream (the event loop's own timer
heap is the global ticker: no task per stream), and a late timer emits every sequence that has fallen due, so
timing never drifts.  Each frame is serialised once, kept in a bounded replay buffer, and handed to the
stream's live sessions by waking them; a stream never waits for a subscriber.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from fleet.history import HistoryWriter

if TYPE_CHECKING:
    from harness.upstream_sim.session import Session

CONNECTION_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")

# Tolerance for float rounding when deciding how many sequences are due at a timer's firing time.
_DUE_EPSILON = 1e-9


def now_ms() -> float:
    """Wall-clock Unix time in milliseconds (the history's clock)."""
    return time.time() * 1000.0


def is_valid_connection_id(connection_id: str) -> bool:
    return CONNECTION_ID_RE.fullmatch(connection_id) is not None


class Stream:
    """One connection id's sequence of frames, its replay buffer and every session ever opened on it."""

    def __init__(
        self,
        connection_id: str,
        *,
        rate: float,
        replay_depth: int,
        history: HistoryWriter,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        if not is_valid_connection_id(connection_id):
            raise ValueError(f"invalid connection id {connection_id!r}")
        if not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"rate must be a positive number of messages per second, got {rate!r}")
        if replay_depth < 1:
            raise ValueError(f"replay depth must be at least 1, got {replay_depth!r}")
        self.id = connection_id
        self.pk = f"CONN#{connection_id}"
        self.rate = float(rate)
        self.replay_depth = replay_depth
        self.head_seq = 0
        self.created = now_ms()
        self.sessions: list[Session] = []
        self._frames: deque[str] = deque(maxlen=replay_depth)
        self._history = history
        self._loop = loop
        self._start = loop.time()
        self._live: dict[str, Session] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._schedule_next()

    @property
    def oldest_seq(self) -> int:
        """The oldest sequence still in the replay buffer (``head_seq + 1`` while the buffer is empty)."""
        return self.head_seq - len(self._frames) + 1

    def frame(self, seq: int) -> str:
        """The serialised frame of ``seq``, which must be in the replay buffer."""
        if not self.oldest_seq <= seq <= self.head_seq:
            raise KeyError(f"seq {seq} is not buffered ({self.oldest_seq}..{self.head_seq})")
        return self._frames[seq - self.oldest_seq]

    def first_seq_for(self, from_seq: int | None) -> int:
        """The first sequence a new session asking for ``from_seq`` is served: live without it, clipped to the
        oldest buffered when it is older than the buffer, itself otherwise (later than the head: it waits)."""
        if from_seq is None:
            return self.head_seq + 1
        return max(from_seq, self.oldest_seq)

    def live_sessions(self) -> list[Session]:
        return list(self._live.values())

    def attach(self, session: Session) -> None:
        self.sessions.append(session)
        self._live[session.session_id] = session

    def detach(self, session: Session) -> None:
        self._live.pop(session.session_id, None)

    def stop(self) -> None:
        """Stop emitting (simulator shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "head_seq": self.head_seq,
            "oldest_seq": self.oldest_seq,
            "rate": self.rate,
            "created": self.created,
            "sessions": [session.to_json() for session in self.sessions],
        }

    def _schedule_next(self) -> None:
        due = self._start + (self.head_seq + 1) / self.rate
        self._timer = self._loop.call_at(due, self._emit_due)

    def _emit_due(self) -> None:
        due_seq = math.floor((self._loop.time() - self._start) * self.rate + _DUE_EPSILON)
        if due_seq > self.head_seq:
            first_seq = self.head_seq + 1
            ts = int(now_ms())
            # The same text json.dumps would give; connection ids never need escaping.
            frames = [
                f'{{"seq": {seq}, "data": "{self.id}:{seq}", "ts": {ts}}}'
                for seq in range(first_seq, due_seq + 1)
            ]
            self._frames.extend(frames)
            self.head_seq = due_seq
            for seq in range(first_seq, due_seq + 1):
                self._history.emit("emit", pk=self.pk, seq=seq)
            for session in list(self._live.values()):
                session.on_emitted(first_seq, frames)
        self._schedule_next()
