"""Fixtures of the region tests: the moto server standing in for AWS (shared with the backend tests)."""

from tests.harness.backends.conftest import moto_aws, moto_url

__all__ = ["moto_aws", "moto_url"]
