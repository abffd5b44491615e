"""Fixtures of the deployment tests: editable copies of terraform/, fleet/ and the Dockerfile for the
broken-copy tests, and a LocalStack container (skipped, with the reason, where testcontainers or a
Docker engine is missing)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.backends.base import Backend
from harness.backends.localstack import localstack_unavailable, start_localstack
from tests.deploy.deploy_tree import FLEET, REPO, TERRAFORM, Edit, copy_tree, editor


@pytest.fixture
def terraform_copy(tmp_path: Path) -> tuple[Path, Edit]:
    """A copy of terraform/ and a function that edits a file in it."""
    root = copy_tree(TERRAFORM, tmp_path / "terraform")
    return root, editor(root)


@pytest.fixture
def fleet_copy(tmp_path: Path) -> tuple[Path, Edit]:
    """A copy of fleet/ and a function that edits a file in it."""
    root = copy_tree(FLEET, tmp_path / "fleet")
    return root, editor(root)


@pytest.fixture
def docker_copy(tmp_path: Path) -> tuple[Path, Edit]:
    """A copy of the Dockerfile, .dockerignore, pyproject.toml and the worker's lock, and a function that
    edits them."""
    for name in ("Dockerfile", ".dockerignore", "pyproject.toml", "worker-requirements.txt"):
        shutil.copy(REPO / name, tmp_path / name)
    return tmp_path, editor(tmp_path)


@pytest.fixture(scope="session")
def localstack() -> Iterator[Backend]:
    """A prepared LocalStack in a container, or the test is skipped saying why there is none."""
    problem = localstack_unavailable()
    if problem:
        pytest.skip(f"no LocalStack container here: {problem}")
    with start_localstack() as backend:
        yield backend
