"""The reaper: a small process that outlives the harness only to stop what the harness started.

Every child of the harness (servers, simulator, router, workers, the Toxiproxy server) runs in its own
process group, so a terminal's Ctrl-C reaches the harness alone, which then stops them in order.  The cost:
a harness killed with SIGKILL (or dying any other way that skips its own clean-up) would leave them all
running.  So the first child a harness process starts also starts one reaper (``python -m harness.reaper``),
whose standard input is a pipe only the harness holds.  The harness writes ``+<pid>`` for each child it
starts and ``-<pid>`` once it has stopped one.  When the pipe closes (the harness exited, however it
exited), the reaper sends SIGCONT and SIGTERM to the group of every child still registered, waits up to
``GRACE_S``, SIGKILLs the groups still there, and exits.  A harness that stopped its children itself leaves
the reaper nothing to do.

The reaper runs in a session of its own too (Ctrl-C does not reach it) and ignores SIGINT and SIGHUP; the
harness side (``watch``, ``forget``) never raises: a reaper that cannot be started or written to costs the
protection, not the run, and says so once on stderr.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

GRACE_S = 5.0
_REPO_ROOT = Path(__file__).resolve().parents[1]

_lock = threading.Lock()
_pipe: IO[bytes] | None = None
_broken = False
_stops: dict[int, Callable[[], object]] = {}  # pid -> how this process stops that child when it exits


def watch(pid: int, stop: Callable[[], object]) -> None:
    """Register the group of child ``pid`` (its leader): ``stop`` stops it when this process exits normally
    (the last started first, so workers hand off before the backends they hand off through go), and the
    reaper stops it if this process dies first."""
    with _lock:
        _stops[pid] = stop
    _send(f"+{pid}\n")


def forget(pid: int) -> None:
    """Child ``pid`` was stopped and reaped: its group id may soon name somebody else's group."""
    with _lock:
        _stops.pop(pid, None)
    _send(f"-{pid}\n")


@atexit.register
def _stop_watched() -> None:
    with _lock:
        stops = list(_stops.values())
    for stop in reversed(stops):
        stop()


def signal_group(pgid: int, signum: signal.Signals) -> None:
    """Send ``signum`` to process group ``pgid``; a group already gone (or not ours) is left alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _send(line: str) -> None:
    global _pipe, _broken
    with _lock:
        if _broken:
            return
        try:
            if _pipe is None:
                _pipe = _start()
            _pipe.write(line.encode())
            _pipe.flush()
        except OSError as exc:
            _broken = True
            print(f"harness: the reaper is unavailable ({exc}); children would outlive a killed harness",
                  file=sys.stderr)


def _start() -> IO[bytes]:
    reaper = subprocess.Popen([sys.executable, "-m", "harness.reaper"], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, start_new_session=True, cwd=_REPO_ROOT)
    assert reaper.stdin is not None
    return reaper.stdin


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap(groups: set[int], grace_s: float = GRACE_S) -> None:
    """SIGCONT + SIGTERM every group, wait up to ``grace_s`` for them to end, SIGKILL those still there."""
    for pgid in groups:
        signal_group(pgid, signal.SIGCONT)
        signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    alive = {pgid for pgid in groups if _group_alive(pgid)}
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)  # nothing to await: the groups are not our children
        alive = {pgid for pgid in alive if _group_alive(pgid)}
    for pgid in alive:
        signal_group(pgid, signal.SIGKILL)


def main() -> int:
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    groups: set[int] = set()
    for raw in sys.stdin.buffer:
        line = raw.strip()
        with contextlib.suppress(ValueError):
            pid = int(line[1:])
            if line[:1] == b"+":
                groups.add(pid)
            elif line[:1] == b"-":
                groups.discard(pid)
    reap(groups)
    return 0


if __name__ == "__main__":
    sys.exit(main())
