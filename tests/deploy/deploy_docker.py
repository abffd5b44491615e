"""Checks of the worker image's Dockerfile and build context (read, never built): base image pinned by
digest, tini and the worker as PID 1's child, a non-root user, the health check script, and dependencies
installed from one hashed lock that agrees with pyproject.toml.  Each returns a list of problems."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from pathlib import Path


def dockerfile_instructions(dockerfile: Path) -> list[tuple[str, str, str]]:
    """(INSTRUCTION, arguments, heredoc body) of each instruction, continuations joined."""
    lines = dockerfile.read_text(encoding="utf-8").splitlines()
    instructions: list[tuple[str, str, str]] = []
    index = 0
    while index < len(lines):
        line = lines[index].strip()
        index += 1
        if not line or line.startswith("#"):
            continue
        while line.endswith("\\") and index < len(lines):
            line = line[:-1].rstrip() + " " + lines[index].strip()
            index += 1
        keyword, _, arguments = line.partition(" ")
        body = ""
        heredoc = re.search(r"<<-?'?\"?([A-Za-z_]+)'?\"?", arguments)
        if heredoc:
            end = lines.index(heredoc.group(1), index)
            body = "\n".join(lines[index:end])
            index = end + 1
        instructions.append((keyword.upper(), arguments.strip(), body))
    return instructions


def _exec_form(arguments: str) -> list[str] | None:
    """The JSON array of an exec-form instruction, or None for shell form."""
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def dockerfile_healthcheck(dockerfile: Path) -> list[str] | None:
    for keyword, arguments, _ in dockerfile_instructions(dockerfile):
        if keyword == "HEALTHCHECK":
            command = arguments[arguments.index("CMD") + 3:].strip() if "CMD" in arguments else ""
            return _exec_form(command)
    return None


def _dockerignored(patterns: list[str], path: str) -> bool:
    """Whether .dockerignore ``patterns`` exclude ``path`` (or a parent of it): last match wins."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        glob = pattern[1:] if negated else pattern
        if any(fnmatch.fnmatchcase(candidate, glob.strip("/")) for candidate in candidates):
            excluded = not negated
    return excluded


def _pinned(requirements: str) -> dict[str, tuple[str, int]]:
    """name (normalised) -> (version, number of hashes) of each ``name==version`` requirement of a lock."""
    pinned: dict[str, tuple[str, int]] = {}
    for block in re.split(r"\n(?=\S)", requirements):
        match = re.match(r"([A-Za-z0-9._-]+)==(\S+)", block)
        if match:
            name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
            pinned[name] = (match.group(2), block.count("--hash=sha256:"))
    return pinned


def _lock_problems(
    dockerfile: Path, pyproject: Path, run_texts: list[str], copied: list[str]
) -> tuple[str, list[str]]:
    """The lock file the image installs from (``""`` when none) and its problems: installed with
    ``--require-hashes`` only, every pin hashed, every [project] dependency pinned at its version."""
    problems = []
    commands = [command.strip() for run in run_texts for command in re.split(r"&&|;|\|\|", run)]
    installs = [command.split("pip install", 1)[1] for command in commands if "pip install" in command]
    if not installs:
        return "", ["no `pip install -r <lock>`"]
    for arguments in installs:
        if "--require-hashes" not in arguments.split():
            problems.append(f"`pip install {arguments.strip()}` does not use --require-hashes")
    requirement_files = [m for arguments in installs for m in re.findall(r"-r\s+(\S+)", arguments)]
    if len(requirement_files) != 1:
        return "", [*problems, f"the image installs from {requirement_files or 'no'} requirement files, not one lock"]
    lock = Path(requirement_files[0]).name
    if not any(lock in arguments.split() for arguments in copied):
        problems.append(f"no COPY brings {lock} into the image")
    lock_path = dockerfile.parent / lock
    if not lock_path.exists():
        return lock, [*problems, f"{lock} does not exist next to the Dockerfile"]
    pinned = _pinned(lock_path.read_text(encoding="utf-8"))
    problems.extend(f"{lock}: {name}=={version} has no --hash" for name, (version, hashes) in pinned.items()
                    if hashes == 0)
    project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    for dependency in project.get("dependencies", []):
        name, _, version = dependency.partition("==")
        key = re.sub(r"[-_.]+", "-", name.strip()).lower()
        if pinned.get(key, ("",))[0] != version.strip():
            problems.append(f"{lock} pins {key} at {pinned.get(key, ('nothing',))[0]}, pyproject.toml at "
                            f"{version.strip() or 'no version'}: regenerate the lock")
    return lock, problems


def dockerfile_problems(dockerfile: Path, pyproject: Path) -> list[str]:
    """Python 3.11 slim base pinned by digest; tini as PID 1 (exec-form ENTRYPOINT) forwarding SIGTERM to
    an exec-form CMD `python -m fleet.worker`; a non-root USER in force at the end; a HEALTHCHECK whose
    command the image provides; dependencies from one hashed lock (`--require-hashes`) that agrees with
    pyproject.toml; fleet/ copied into a directory on PYTHONPATH; the build context holding both."""
    instructions = dockerfile_instructions(dockerfile)
    by_keyword: dict[str, list[tuple[str, str]]] = {}
    for keyword, arguments, body in instructions:
        by_keyword.setdefault(keyword, []).append((arguments, body))
    problems = []
    base = by_keyword.get("FROM", [("", "")])[-1][0].split()[0] if by_keyword.get("FROM") else ""
    image, _, digest = base.partition("@")
    if not re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", image):
        problems.append(f"base image {base!r} is not python:3.11-slim")
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        problems.append(f"base image {base!r} is not pinned by digest (@sha256:<64 hex>)")
    users = by_keyword.get("USER", [])
    user = users[-1][0].split(":")[0] if users else "root"
    if user in ("root", "0"):
        problems.append(f"the image runs as {user!r}: add a non-root USER")
    entrypoint = _exec_form(by_keyword.get("ENTRYPOINT", [("", "")])[-1][0])
    uses_tini = bool(entrypoint) and entrypoint is not None and entrypoint[0].endswith("/tini")
    if not uses_tini or entrypoint is None or entrypoint[1:] != ["--"]:
        problems.append(f"ENTRYPOINT {entrypoint!r} is not exec-form [\".../tini\", \"--\"] "
                        "(SIGTERM must reach the worker from PID 1)")
    run_text = " ".join(arguments for arguments, _ in by_keyword.get("RUN", []))
    if uses_tini and not re.search(r"apt-get install[^&;]*\btini\b", run_text):
        problems.append("ENTRYPOINT uses tini but no RUN installs it")
    command = _exec_form(by_keyword.get("CMD", [("", "")])[-1][0])
    if command != ["python", "-m", "fleet.worker"]:
        problems.append(f"CMD {command!r} is not exec-form [\"python\", \"-m\", \"fleet.worker\"]")
    signals = by_keyword.get("STOPSIGNAL", [])
    if signals and signals[-1][0] not in ("SIGTERM", "15"):
        problems.append(f"STOPSIGNAL {signals[-1][0]} is not SIGTERM, which the worker handles")
    healthcheck = dockerfile_healthcheck(dockerfile)
    provided = {
        shlex.split(arguments.split("<<", 1)[1])[1]
        for arguments, body in by_keyword.get("COPY", [])
        if body and "<<" in arguments
    }
    if not healthcheck:
        problems.append("no exec-form HEALTHCHECK")
    elif healthcheck[0] not in {Path(p).name for p in provided} | provided:
        problems.append(f"HEALTHCHECK runs {healthcheck[0]!r}, which the image does not provide")
    copies = [arguments for arguments, _ in by_keyword.get("COPY", [])]
    runs = [arguments for arguments, _ in by_keyword.get("RUN", [])]
    lock, lock_problems = _lock_problems(dockerfile, pyproject, runs, copies)
    problems.extend(lock_problems)
    environment = " ".join(arguments for arguments, _ in by_keyword.get("ENV", []))
    python_path = re.search(r"PYTHONPATH=(\S+)", environment)
    fleet_copy = [a.split() for a in copies if a.split()[:1] in (["fleet"], ["fleet/"])]
    destination = fleet_copy[-1][-1].rstrip("/") if fleet_copy else ""
    if not fleet_copy:
        problems.append("no COPY brings fleet into the image")
    elif python_path is None or destination != python_path.group(1).rstrip("/") + "/fleet":
        problems.append(f"fleet is copied to {destination!r}, which is not <PYTHONPATH>/fleet "
                        f"(PYTHONPATH={python_path.group(1) if python_path else 'unset'})")
    ignore_file = dockerfile.parent / ".dockerignore"
    patterns = [
        line.strip() for line in ignore_file.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ] if ignore_file.exists() else []
    for path in ["fleet/config.py", *([lock] if lock else [])]:
        if _dockerignored(patterns, path):
            problems.append(f".dockerignore excludes {path}, which the image needs")
    return problems
