"""Where the deployment tests find what they check, and how they make editable copies of it."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TERRAFORM = REPO / "terraform"
FLEET = REPO / "fleet"
DOCKERFILE = REPO / "Dockerfile"
PYPROJECT = REPO / "pyproject.toml"
LOCALSTACK = REPO / "localstack"

# edit(relative path, old text, new text): replace text that must be there.
Edit = Callable[[str, str, str], None]


def copy_tree(source: Path, target: Path) -> Path:
    """Copy ``source`` to ``target`` without terraform's, Python's or the package's build leftovers."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(".terraform", "build", "__pycache__"))
    return target


def editor(root: Path) -> Edit:
    def edit(relative: str, old: str, new: str) -> None:
        path = root / relative
        text = path.read_text(encoding="utf-8")
        assert old in text, f"{old!r} not found in {path}: the broken-copy test is out of date"
        path.write_text(text.replace(old, new), encoding="utf-8")

    return edit
