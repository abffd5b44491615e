"""Shared fixtures: one embedded backend per test session, and a per-test view of it with no leftover data.

``backend`` runs DynamoDB on dynalite unless ``WSFLEET_TEST_DYNAMODB=moto``.  Tests that need a clean slate
take ``clean_backend``: it empties the tables and purges the queues before the test (scan + batch delete,
milliseconds for a few hundred items).  Tests that only add items under keys of their own can share
``backend`` without clearing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from harness.backends import EmbeddedBackend, clear_data, start_embedded


@pytest.fixture(scope="session")
def backend() -> Iterator[EmbeddedBackend]:
    with start_embedded(dynamodb=os.environ.get("WSFLEET_TEST_DYNAMODB", "dynalite")) as running:
        yield running


@pytest.fixture
def clean_backend(backend: EmbeddedBackend) -> EmbeddedBackend:
    clear_data(backend.env())
    return backend
