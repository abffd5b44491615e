"""The worker image (read, not built: there is no Docker engine here): entry point, user, signals, health
check and build context, each check shown to catch a broken copy; the health check script from the
Dockerfile run against real processes; and SIGTERM through tini reaching a real worker, which releases
and exits 0 (where tini is installed)."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.backends.base import Backend
from tests.deploy.deploy_docker import dockerfile_instructions, dockerfile_problems
from tests.deploy.deploy_tree import DOCKERFILE, PYPROJECT, REPO, Edit

HEALTHCHECK_PATH = "/usr/local/bin/wsfleet-healthcheck"
DEADLINE_S = 20.0


def test_the_dockerfile_passes() -> None:
    assert dockerfile_problems(DOCKERFILE, PYPROJECT) == []


BREAKAGES = [
    ("Dockerfile", "USER 10001:10001\n", "", "non-root USER"),
    ("Dockerfile", "USER 10001:10001\n", "USER 10001:10001\nUSER root\n", "runs as 'root'"),
    ("Dockerfile", 'ENTRYPOINT ["/usr/bin/tini", "--"]', "ENTRYPOINT /usr/bin/tini --", "ENTRYPOINT"),
    ("Dockerfile", 'ENTRYPOINT ["/usr/bin/tini", "--"]\n', "", "ENTRYPOINT"),
    ("Dockerfile", "--no-install-recommends tini", "--no-install-recommends curl", "no RUN installs it"),
    ("Dockerfile", 'CMD ["python", "-m", "fleet.worker"]', "CMD python -m fleet.worker", "CMD"),
    ("Dockerfile", 'CMD ["python", "-m", "fleet.worker"]', 'CMD ["python", "-m", "fleet.router_http"]',
     "CMD"),
    ("Dockerfile", 'CMD ["python", "-m", "fleet.worker"]',
     'STOPSIGNAL SIGINT\nCMD ["python", "-m", "fleet.worker"]', "STOPSIGNAL"),
    ("Dockerfile", 'CMD ["wsfleet-healthcheck"]', 'CMD ["worker-alive"]', "does not provide"),
    ("Dockerfile", "FROM python:3.11.13-slim-bookworm@", "FROM python:3.12-slim-bookworm@", "python:3.11-slim"),
    ("Dockerfile", "FROM python:3.11.13-slim-bookworm@sha256:", "FROM python:3.11.13-slim-bookworm #",
     "not pinned by digest"),
    ("Dockerfile", "pip install --require-hashes ", "pip install ", "does not use --require-hashes"),
    ("Dockerfile", "COPY fleet /opt/wsfleet/fleet", "COPY fleet /opt/wsfleet/fleet\nRUN pip install requests",
     "`pip install requests` does not use --require-hashes"),
    ("Dockerfile", "COPY worker-requirements.txt /tmp/", "COPY pyproject.toml /tmp/",
     "no COPY brings worker-requirements.txt"),
    ("Dockerfile", "COPY fleet /opt/wsfleet/fleet", "COPY fleet /app/fleet", "not <PYTHONPATH>/fleet"),
    ("Dockerfile", "COPY fleet /opt/wsfleet/fleet", "COPY harness /opt/wsfleet/harness",
     "no COPY brings fleet"),
    ("worker-requirements.txt", "websockets==17.4 \\\n", "requests==2.32.3\nwebsockets==17.4 \\\n",
     "requests==2.32.3 has no --hash"),
    ("pyproject.toml", '"websockets==17.4"', '"websockets==17.5"',
     "pins websockets at 17.4, pyproject.toml at 17.5"),
    (".dockerignore", "!worker-requirements.txt\n", "", ".dockerignore excludes worker-requirements.txt"),
    (".dockerignore", "!fleet\n", "", ".dockerignore excludes fleet/config.py"),
]


@pytest.mark.parametrize(("relative", "old", "new", "expected"), BREAKAGES, ids=[b[3] for b in BREAKAGES])
def test_check_catches_a_broken_copy(
    docker_copy: tuple[Path, Edit], relative: str, old: str, new: str, expected: str
) -> None:
    root, edit = docker_copy
    assert dockerfile_problems(root / "Dockerfile", root / "pyproject.toml") == []
    edit(relative, old, new)
    problems = dockerfile_problems(root / "Dockerfile", root / "pyproject.toml")
    assert any(expected in problem for problem in problems), problems


# -- the health check script, as the image installs it ------------------------------------------------
@pytest.fixture
def healthcheck(tmp_path: Path) -> Path:
    """The health check script from the Dockerfile's heredoc, with this interpreter."""
    bodies = [
        body for keyword, arguments, body in dockerfile_instructions(DOCKERFILE)
        if keyword == "COPY" and arguments.endswith(HEALTHCHECK_PATH)
    ]
    assert len(bodies) == 1
    script = tmp_path / "wsfleet-healthcheck"
    text = bodies[0].replace("#!/usr/local/bin/python", f"#!{sys.executable}", 1)
    script.write_text(text, encoding="utf-8")
    script.chmod(0o755)
    return script


@pytest.fixture
def probe(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A `python -m <unique module>` process standing in for `python -m fleet.worker`."""
    module = f"wsfleet_probe_{os.getpid()}_{time.monotonic_ns()}"
    (tmp_path / f"{module}.py").write_text("import time\ntime.sleep(60)\n", encoding="utf-8")
    process = subprocess.Popen([sys.executable, "-m", module], cwd=tmp_path)
    try:
        yield module, process
    finally:
        process.kill()
        process.wait()


def _check(script: Path, module: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(script), module], capture_output=True, text=True, timeout=10, check=False)


def _until(condition: str, script: Path, module: str, healthy: bool) -> subprocess.CompletedProcess[str]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        result = _check(script, module)
        if (result.returncode == 0) == healthy or time.monotonic() > deadline:
            assert (result.returncode == 0) == healthy, f"{condition}: {result.stdout}"
            return result
        time.sleep(0.05)


def test_healthcheck_follows_the_worker_process(
    healthcheck: Path, probe: tuple[str, subprocess.Popen[bytes]]
) -> None:
    module, process = probe
    _until("running", healthcheck, module, healthy=True)
    process.send_signal(signal.SIGSTOP)
    stopped = _until("stopped", healthcheck, module, healthy=False)
    assert "state T" in stopped.stdout
    process.send_signal(signal.SIGCONT)
    _until("continued", healthcheck, module, healthy=True)
    process.kill()
    process.wait()
    gone = _until("gone", healthcheck, module, healthy=False)
    assert f"no python -m {module} process" in gone.stdout


def test_healthcheck_ignores_a_process_that_only_mentions_the_module(healthcheck: Path) -> None:
    """tini's command line (`tini -- python -m fleet.worker`) names the module too, at another place."""
    module = f"wsfleet_probe_{os.getpid()}_{time.monotonic_ns()}"
    mention = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m", module])
    try:
        result = _check(healthcheck, module)
        assert result.returncode == 1, result.stdout
    finally:
        mention.kill()
        mention.wait()


# -- SIGTERM through tini ----------------------------------------------------------------------------
def _first_line(process: subprocess.Popen[str], timeout_s: float) -> str:
    """The process's first stdout line, waiting at most ``timeout_s`` (empty if it said nothing)."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    return process.stdout.readline() if ready else ""


def test_sigterm_through_tini_reaches_the_worker(backend: Backend, tmp_path: Path) -> None:
    """`tini -- python -m fleet.worker` (the image's ENTRYPOINT + CMD): SIGTERM to tini, as ECS sends it
    to PID 1, makes the worker stop and exit 0, and tini exits with it."""
    tini = shutil.which("tini")
    if tini is None:
        pytest.skip("tini is not installed here (Debian: apt-get install tini); the image installs it")
    env = {**os.environ, **backend.env(), "WSFLEET_WORKER_ID": "tini-probe", "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [tini, "--", sys.executable, "-m", "fleet.worker"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )
    try:
        started = _first_line(process, DEADLINE_S)
        assert '"worker.start"' in started, started
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=DEADLINE_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    assert '"worker.stop"' in stdout, stdout
