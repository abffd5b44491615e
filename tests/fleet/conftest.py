"""Fixtures for the fleet's store tests: one embedded backend per DynamoDB engine (dynalite and moto), and the
fleet's own clients and store pointed at it by environment alone."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from fleet.aws import AwsClients
from fleet.config import FleetConfig
from fleet.store import AwsAdapter
from harness.backends import EmbeddedBackend, start_embedded
from harness.backends.servers import dynalite_command

_NO_DYNALITE = dynalite_command()[1]
ENGINES = [
    pytest.param("dynalite", marks=pytest.mark.skipif(
        _NO_DYNALITE is not None, reason=f"dynalite cannot run: {_NO_DYNALITE}")),
    "moto",
]


@pytest.fixture(scope="session", params=ENGINES)
def engine_backend(request: pytest.FixtureRequest, backend: EmbeddedBackend) -> Iterator[EmbeddedBackend]:
    """The session's backend when it runs this engine, else one started for it."""
    if backend.dynamodb_engine == request.param:
        yield backend
        return
    with start_embedded(dynamodb=request.param) as running:
        yield running


@pytest.fixture
def engine_config(engine_backend: EmbeddedBackend, monkeypatch: pytest.MonkeyPatch) -> FleetConfig:
    """A hardened config at time scale 0.1 whose clients reach ``engine_backend``.

    Its requests time out after 2 s rather than the scaled 0.3 s: these tests are about what the store
    answers, and a connect that took a third of a second on a loaded CI machine failed one of them."""
    for name, value in engine_backend.env().items():
        monkeypatch.setenv(name, value)
    return FleetConfig.from_env().with_changes(profile="hardened", timescale=0.1, aws_timeout_ms=20_000)


@pytest.fixture
async def store(engine_config: FleetConfig) -> AsyncIterator[AwsAdapter]:
    async with AwsClients(engine_config) as aws:
        yield AwsAdapter(aws)
