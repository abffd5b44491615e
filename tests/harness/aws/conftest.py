"""Fixtures of the AWS-backend tests: a moto server standing in for AWS, for every SDK client of the test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness import http_client
from harness.backends.servers import start_moto


@pytest.fixture(scope="module")
def moto_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = start_moto(tmp_path_factory.mktemp("moto"))
    yield server.url
    server.stop()


@pytest.fixture
def moto_aws(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every SDK client of this process at the moto server, with its test credentials; state reset after."""
    for name, value in {"AWS_ENDPOINT_URL": moto_url, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                        "AWS_MAX_ATTEMPTS": "1"}.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    yield moto_url
    http_client.request("POST", f"{moto_url}/moto-api/reset", timeout_s=10)
