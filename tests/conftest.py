"""Shared fixtures: one embedded backend per test session, and a per-test view of it with no leftover data.

``backend`` runs DynamoDB on dynalite unless ``WSFLEET_TEST_DYNAMODB=moto``.  Tests that need a clean slate
take ``clean_backend``: it empties the tables and purges the queues before the test (scan + batch delete,
milliseconds for a few hundred items).  Tests that only add items under keys of their own can share
``backend`` without clearing.

Every botocore session of the test process reads the service models through one loader
(``shared_service_models``), so opening ``AwsClients`` costs about 0.05 CPU-s instead of 0.2 (a new session
parses the four services' JSON models again); each test still opens clients and counters of its own.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator

import botocore.loaders
import botocore.session
import pytest

from harness.backends import EmbeddedBackend, clear_data, start_embedded


@pytest.fixture(scope="session", autouse=True)
def shared_service_models() -> Iterator[None]:
    """One botocore loader (it caches what it has parsed) for every session the tests open."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(botocore.session, "create_loader", functools.cache(botocore.loaders.create_loader))
        yield


@pytest.fixture(scope="session")
def backend() -> Iterator[EmbeddedBackend]:
    with start_embedded(dynamodb=os.environ.get("WSFLEET_TEST_DYNAMODB", "dynalite")) as running:
        yield running


@pytest.fixture
def clean_backend(backend: EmbeddedBackend) -> EmbeddedBackend:
    clear_data(backend.env())
    return backend
