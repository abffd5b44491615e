"""Server subprocesses of the embedded backend: start on a free loopback port, check ready, stop cleanly.

Each server is launched by a small launcher of ours (``dynalite_launcher.js``, ``moto_serial``) that binds
port 0 and reports the port it got on stdout, so two runs never race for a port.  A server is ready when
it answers an HTTP request; if it exits or stays silent past the deadline, ``BackendError`` names it and
quotes the tail of its stderr log.  Servers run in their own session (a terminal's Ctrl-C reaches only
the parent), are stopped with SIGTERM then SIGKILL to the whole process group, are stopped at interpreter
exit if still running, and exit by themselves if their parent dies without stopping them.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness import http_client, reaper
from harness.backends.base import BackendError
from harness.reaper import signal_group

START_DEADLINE_S = 30.0
STOP_GRACE_S = 5.0
HOST = "127.0.0.1"
_LAUNCHER_JS = Path(__file__).with_name("dynalite_launcher.js")
_REPO_ROOT = Path(__file__).resolve().parents[2]
_TAIL_LINES = 15


@dataclass(eq=False)
class ServerProcess:
    """One running server: its name (for messages), process, URL and stderr log."""

    name: str
    process: subprocess.Popen[bytes]
    url: str
    log_path: Path
    stopped: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM the server's process group, wait ``grace_s``, then SIGKILL it; idempotent."""
        if self.stopped:
            return
        self.stopped = True
        if self.process.poll() is None:
            signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait()
        # Anything the server started in its group goes too, even when the leader exited by itself.  Done
        # once, right after reaping the leader: later the group id could name somebody else's group.
        signal_group(self.process.pid, signal.SIGKILL)
        reaper.forget(self.process.pid)

    def stderr_tail(self, lines: int = _TAIL_LINES) -> str:
        return stderr_tail(self.log_path, lines)


def stderr_tail(log_path: Path, lines: int = _TAIL_LINES) -> str:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    tail = text.strip().splitlines()[-lines:]
    return "\n".join(tail) if tail else "(stderr empty)"


def spawn_server(
    name: str,
    argv: list[str],
    log_path: Path,
    ready_path: str = "/",
    env: dict[str, str] | None = None,
    deadline_s: float = START_DEADLINE_S,
) -> ServerProcess:
    """Start ``argv`` (a launcher that prints ``{"port": N}``), wait until it answers HTTP, return it."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + deadline_s
    with log_path.open("ab") as log:
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise BackendError(f"{name}: cannot run {argv[0]}: {exc}") from exc
    server = ServerProcess(name, process, "", log_path)
    reaper.watch(process.pid, lambda: server.stop(grace_s=1.0))
    try:
        port = _read_port(server, deadline)
        server.url = f"http://{HOST}:{port}"
        _wait_answering(server, ready_path, deadline)
    except BaseException:
        server.stop(grace_s=1.0)
        raise
    return server


def _failure(server: ServerProcess, what: str) -> BackendError:
    return BackendError(
        f"{server.name} (pid {server.pid}) {what}; log {server.log_path}, stderr tail:\n"
        + server.stderr_tail()
    )


def _read_port(server: ServerProcess, deadline: float) -> int:
    stdout = server.process.stdout
    assert stdout is not None
    line = b""
    with stdout:
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _failure(server, "did not report its port in time")
            readable, _, _ = select.select([stdout], [], [], remaining)
            if not readable:
                continue
            chunk = os.read(stdout.fileno(), 4096)
            if not chunk:
                server.process.wait()
                raise _failure(server, f"exited with status {server.process.returncode} before listening")
            line += chunk
    try:
        port = int(json.loads(line.splitlines()[0])["port"])
    except (ValueError, KeyError, TypeError) as exc:
        raise _failure(server, f"printed {line!r} instead of its port") from exc
    return port


def _wait_answering(server: ServerProcess, path: str, deadline: float) -> None:
    """Poll ``path`` until the server answers anything at all (an HTTP error status or a redirect counts)."""
    last_error = ""
    while time.monotonic() < deadline:
        if not server.running():
            raise _failure(server, f"exited with status {server.process.returncode} while starting")
        try:
            http_client.request("GET", server.url + path, timeout_s=max(0.1, min(2.0, deadline - time.monotonic())))
            return
        except http_client.Redirected:
            return
        except http_client.NoAnswer as exc:
            last_error = str(exc)
        time.sleep(0.05)
    raise _failure(server, f"did not answer {server.url}{path} in time ({last_error})")


def dynalite_command() -> tuple[list[str], str | None]:
    """The command that serves dynalite, or why it cannot run here (``([], reason)``)."""
    node = shutil.which("node")
    package = _REPO_ROOT / "node_modules" / "dynalite"
    if node is None:
        return [], "no `node` on PATH"
    if not (package / "index.js").is_file():
        return [], f"dynalite is not installed ({package} missing; run `npm ci`)"
    return [node, str(_LAUNCHER_JS), str(package), HOST, "0", str(os.getpid())], None


def start_dynalite(log_dir: Path) -> ServerProcess:
    argv, reason = dynalite_command()
    if reason:
        raise BackendError(f"dynalite cannot run: {reason}")
    return spawn_server("dynalite", argv, log_dir / "dynalite.log")


def start_moto(log_dir: Path, name: str = "moto", serialise_dynamodb: bool = True) -> ServerProcess:
    """A moto server (every service) with DynamoDB requests serialised unless told otherwise."""
    argv = [sys.executable, "-m", "harness.backends.moto_serial", "--host", HOST, "--port", "0",
            "--parent-pid", str(os.getpid())]
    if not serialise_dynamodb:
        argv.append("--unserialised")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH")]))
    return spawn_server(name, argv, log_dir / f"{name}.log", ready_path="/moto-api/", env=env)
