"""Child processes of the harness: start one, read the JSON line it prints when ready, signal it, stop it.

Every child runs in its own session and process group (a terminal's Ctrl-C reaches only the harness,
which then stops them in order), logs stdout and stderr to a file, and is stopped with SIGCONT (a paused
child cannot exit), SIGTERM, then SIGKILL to the whole group.  Children still alive at interpreter exit are
stopped too, so an interrupted run leaves nothing behind, and a harness killed outright leaves them to the
reaper (``harness.reaper``).

``wsfleet`` marks its environment with ``HARNESS_PID_VAR`` (its own pid), which every child inherits, so the
processes of one harness run can be told from another's (``mark_children``).  ``Started`` is the context
manager of whatever starts several of them (a topology).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from harness import reaper
from harness.reaper import signal_group

REPO_ROOT = Path(__file__).resolve().parents[1]
HARNESS_PID_VAR = "WSFLEET_HARNESS_PID"


def mark_children() -> None:
    """Name this process in the environment every child of it inherits (``HARNESS_PID_VAR``)."""
    os.environ[HARNESS_PID_VAR] = str(os.getpid())


class ProcessError(Exception):
    """A child could not start, or said something other than what was expected."""


@dataclass(eq=False)
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    ready: dict[str, Any] = field(default_factory=dict)
    paused: bool = False
    stopped: bool = False
    told_to_end: bool = False  # sent SIGTERM or SIGKILL (a fault, or ``stop``): its exit is no failure

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def signal(self, signum: signal.Signals) -> None:
        if signum == signal.SIGSTOP:
            self.paused = True
        elif signum == signal.SIGCONT:
            self.paused = False
        elif signum in (signal.SIGTERM, signal.SIGKILL):
            self.told_to_end = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signum)

    def wait(self, timeout_s: float) -> int | None:
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace_s: float = 10.0) -> int:
        """SIGCONT + SIGTERM, wait ``grace_s``, then SIGKILL the group; returns the exit status.  Idempotent."""
        if self.stopped:
            return int(self.process.returncode)
        self.stopped = self.told_to_end = True
        if self.process.poll() is None:
            signal_group(self.pid, signal.SIGCONT)
            signal_group(self.pid, signal.SIGTERM)
            if self.wait(grace_s) is None:
                signal_group(self.pid, signal.SIGKILL)
                self.process.wait()
        # Anything the child started in its group goes too, even when the leader exited by itself.  Done once,
        # right after reaping the leader: later the group id could name somebody else's group.
        signal_group(self.pid, signal.SIGKILL)
        reaper.forget(self.pid)
        self.paused = False
        return int(self.process.returncode)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:]) or "(log empty)"


def python_env(extra: dict[str, str] | None = None, root: Path = REPO_ROOT) -> dict[str, str]:
    """This environment, with the checkout at ``root`` (default: this repository) importable first and
    ``extra`` on top."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def spawn(
    name: str,
    argv: list[str],
    log_path: Path,
    env: dict[str, str] | None = None,
    ready_line: bool = True,
    timeout_s: float = 30.0,
    cwd: Path = REPO_ROOT,
) -> Child:
    """Start ``argv``; with ``ready_line``, wait for the one JSON line it prints on stdout when ready.

    Everything else it writes goes to ``log_path``.  A ``python`` argv[0] means this interpreter.  ``cwd``
    (default: this repository) comes first on a ``python -m`` child's import path.
    """
    if argv and argv[0] == "python":
        argv = [sys.executable, *argv[1:]]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("ab")
    try:
        with signals_unblocked():
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if ready_line else log,
                stderr=log,
                env=env if env is not None else python_env(),
                start_new_session=True,
                cwd=cwd,
            )
    except OSError as exc:
        raise ProcessError(f"{name}: cannot run {argv[0]}: {exc}") from exc
    finally:
        log.close()
    child = Child(name, process, log_path)
    reaper.watch(process.pid, lambda: child.stop(grace_s=2.0))
    if ready_line:
        try:
            child.ready = _read_ready(child, timeout_s)
        except BaseException:
            child.stop(grace_s=1.0)
            raise
    return child


def _read_ready(child: Child, timeout_s: float) -> dict[str, Any]:
    stdout = child.process.stdout
    assert stdout is not None
    deadline = time.monotonic() + timeout_s
    line = b""
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ProcessError(f"{child.name} did not say it was ready within {timeout_s:.0f} s; "
                               f"log {child.log_path}:\n{child.log_tail()}")
        readable, _, _ = select.select([stdout], [], [], remaining)
        if not readable:
            continue
        chunk = os.read(stdout.fileno(), 65536)
        if not chunk:
            status = child.process.wait()
            raise ProcessError(f"{child.name} exited with status {status} while starting; "
                               f"log {child.log_path}:\n{child.log_tail()}")
        line += chunk
    # Keep draining stdout into the log so the child never blocks on a full pipe.
    _drain_to_log(child)
    try:
        ready = json.loads(line.splitlines()[0])
    except ValueError as exc:
        raise ProcessError(f"{child.name} printed {line[:200]!r} instead of its JSON ready line") from exc
    if not isinstance(ready, dict):
        raise ProcessError(f"{child.name} printed {line[:200]!r} instead of a JSON object")
    return ready


def _drain_to_log(child: Child) -> None:
    stdout = child.process.stdout
    assert stdout is not None

    def copy() -> None:
        with stdout, child.log_path.open("ab") as log:
            for chunk in iter(lambda: stdout.read1(65536), b""):
                log.write(chunk)
                log.flush()

    start_thread(threading.Thread(target=copy, name=f"drain-{child.name}", daemon=True))


@contextlib.contextmanager
def signals_unblocked() -> Iterator[None]:
    """SIGINT and SIGTERM unblocked in this thread for the block: a child inherits its creator's signal mask,
    so one started from a ``start_thread`` thread (a worker restarted by a fault) would otherwise never see a
    SIGTERM, and every stop of it would wait the whole grace period and end in SIGKILL."""
    previous = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def start_thread(thread: threading.Thread) -> threading.Thread:
    """Start ``thread`` with SIGINT and SIGTERM blocked in it (a thread inherits its creator's mask), so the
    kernel delivers them to the main thread, the only one where Python runs their handlers, and a join or
    a sleep there is interrupted at once, not when the thread that took the signal next wakes."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return thread


class Started:
    """A context manager over ``start`` and ``stop``: a start that fails stops what it had started, and
    leaving the block (also on an error or Ctrl-C) stops everything."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
