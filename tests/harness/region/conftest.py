"""Fixtures of the region tests: the moto server standing in for AWS (shared with the AWS target's tests)."""

from tests.harness.aws.conftest import moto_aws, moto_url

__all__ = ["moto_aws", "moto_url"]
