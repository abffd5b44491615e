"""Run folders: one run, one folder (DESIGN section 12).  Every folder a command is given or defaults to is
made absolute once, against the folder the command was started in (its child processes run elsewhere);
a default folder is new for each run (``runs/scenario/20261204-151500-123``) with a ``latest`` link beside
it; a folder that already holds something is refused unless the user forces it, and then emptied first, so
a run's checkers never read another run's history.  ``--force`` never empties the current folder, one above
it, the home folder or a git checkout.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import time
from pathlib import Path

LATEST = "latest"


class RunFolderError(ValueError):
    """A folder cannot be used for a run's output; the message says which and why (one line)."""


def absolute(path: str | Path) -> Path:
    """``path`` resolved against the current folder (``~`` expanded): what child processes are given."""
    return Path(path).expanduser().resolve()


def new_run_folder(parent: str | Path) -> Path:
    """A folder under ``parent`` named for the current time (unique even within one millisecond), not yet
    created, and the ``parent/latest`` link pointed at it."""
    parent = absolute(parent)
    if parent.exists() and not parent.is_dir():
        raise RunFolderError(f"{parent} is a file, not a folder")
    now = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + f"-{int(now * 1000) % 1000:03d}"
    folder, n = parent / stamp, 1
    while folder.exists():
        n += 1
        folder = parent / f"{stamp}.{n}"
    folder.mkdir(parents=True)
    link = parent / LATEST
    with contextlib.suppress(FileNotFoundError):
        link.unlink()
    with contextlib.suppress(OSError):  # a file system without symbolic links: no ``latest``
        link.symlink_to(folder.name, target_is_directory=True)
    return folder


def claim(folder: str | Path, force: bool, option: str = "--run-dir") -> Path:
    """``folder``, absolute and empty, ready for one run's output.  A file, or a folder that holds anything
    when ``force`` is false, is a RunFolderError naming ``option``; with ``force`` the folder is emptied."""
    folder = absolute(folder)
    if folder.exists() and not folder.is_dir():
        raise RunFolderError(f"{option} {folder} is a file, not a folder")
    if folder.is_dir() and any(folder.iterdir()):
        if not force:
            raise RunFolderError(f"{option} {folder} is not empty (it holds another run's output); name a new "
                                 "folder, or add --force to empty it first")
        if folder in (Path.home().resolve(), *Path.cwd().resolve().parents, Path.cwd().resolve()) \
                or (folder / ".git").exists():
            raise RunFolderError(f"{option} {folder}: --force empties a run folder, not this one (the current "
                                 "folder, one above it, the home folder or a git checkout)")
        for entry in folder.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunFolderError(f"{option} {folder}: cannot create it ({exc.strerror or exc})") from None
    if not os.access(folder, os.W_OK):
        raise RunFolderError(f"{option} {folder}: not writable")
    return folder


def run_folder(given: str | Path | None, force: bool, default_parent: str | Path, option: str = "--run-dir") -> Path:
    """The one folder of a run: ``given`` (``claim``), or a new one under ``default_parent`` when it is None."""
    return new_run_folder(default_parent) if given is None else claim(given, force, option)


def add_output_arguments(parser: argparse.ArgumentParser, default_parent: str, what: str) -> None:
    """``--out`` (default: a new folder under ``default_parent``) and ``--force``, for a script's output."""
    parser.add_argument("--out", type=Path, default=None,
                        help=f"folder of {what}; it must be new or empty (default: a new folder "
                             f"{default_parent}/<time>, linked as {default_parent}/latest)")
    parser.add_argument("--force", action="store_true", help="empty an --out that holds something, then use it")
    parser.set_defaults(out_parent=default_parent)


def output_folder(args: argparse.Namespace, prog: str) -> Path:
    """The ``--out`` of ``add_output_arguments``, claimed; one line on stderr and exit 2 when it cannot be."""
    try:
        return run_folder(args.out, args.force, args.out_parent, "--out")
    except RunFolderError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
