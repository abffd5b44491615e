"""Server subprocesses of the embedded backend: start on a free loopback port, check ready, stop cleanly.

Each server is launched by a small launcher of ours (``dynalite_launcher.js``, ``moto_serial``) that binds
port 0 and reports the port it got on stdout (``{"port": N}``, its ready line), so two runs never race for a
port.  A server is ready when it answers an HTTP request; if it exits or stays silent past the deadline,
``BackendError`` names it and quotes the tail of its log.  Servers are children of ``harness.processes``,
the harness's one launcher: their own session (a terminal's Ctrl-C reaches only the parent), SIGTERM then
SIGKILL to the whole process group, stopped at interpreter exit if still running; and they exit by
themselves if their parent dies without stopping them.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness import http_client
from harness.backends.base import BackendError
from harness.processes import REPO_ROOT, Child, ProcessError, spawn

START_DEADLINE_S = 30.0
STOP_GRACE_S = 5.0
HOST = "127.0.0.1"
_LAUNCHER_JS = Path(__file__).with_name("dynalite_launcher.js")


@dataclass(eq=False)
class ServerProcess:
    """One running server: the child process (``harness.processes``) and the URL it answers on."""

    child: Child
    url: str

    @property
    def pid(self) -> int:
        return self.child.pid

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM the server's process group, wait ``grace_s``, then SIGKILL it; idempotent."""
        self.child.stop(grace_s)


def spawn_server(
    name: str,
    argv: list[str],
    log_path: Path,
    ready_path: str = "/",
    env: dict[str, str] | None = None,
    deadline_s: float = START_DEADLINE_S,
) -> ServerProcess:
    """Start ``argv`` (a launcher that prints ``{"port": N}``), wait until it answers HTTP, return it."""
    deadline = time.monotonic() + deadline_s
    try:
        child = spawn(name, argv, log_path, env=env, timeout_s=deadline_s)
    except ProcessError as exc:
        raise BackendError(str(exc)) from None
    try:
        port = child.ready.get("port")
        if not isinstance(port, int):
            raise _failure(child, f"printed {child.ready} instead of its port")
        server = ServerProcess(child, f"http://{HOST}:{port}")
        _wait_answering(server, ready_path, deadline)
    except BaseException:
        child.stop(grace_s=1.0)
        raise
    return server


def _failure(child: Child, what: str) -> BackendError:
    return BackendError(f"{child.name} (pid {child.pid}) {what}; log {child.log_path}:\n{child.log_tail()}")


def _wait_answering(server: ServerProcess, path: str, deadline: float) -> None:
    """Poll ``path`` until the server answers anything at all (an HTTP error status or a redirect counts)."""
    last_error = ""
    while time.monotonic() < deadline:
        if not server.child.running():
            raise _failure(server.child, f"exited with status {server.child.process.returncode} while starting")
        try:
            http_client.request("GET", server.url + path, timeout_s=max(0.1, min(2.0, deadline - time.monotonic())))
            return
        except http_client.Redirected:
            return
        except http_client.NoAnswer as exc:
            last_error = str(exc)
        time.sleep(0.05)
    raise _failure(server.child, f"did not answer {server.url}{path} in time ({last_error})")


def dynalite_command() -> tuple[list[str], str | None]:
    """The command that serves dynalite, or why it cannot run here (``([], reason)``)."""
    node = shutil.which("node")
    package = REPO_ROOT / "node_modules" / "dynalite"
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
    return spawn_server(name, argv, log_dir / f"{name}.log", ready_path="/moto-api/")
