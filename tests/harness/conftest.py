"""A messages table and a connections table in moto's in-process DynamoDB, for the readers of the store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fleet.schema import connections_table, messages_table


@pytest.fixture
def tables() -> dict[str, str]:
    return {"messages": "msgs", "connections": "conns"}


@pytest.fixture
def dynamodb(tables: dict[str, str]) -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x",
                              aws_secret_access_key="x")
        client.create_table(**messages_table(tables["messages"]))
        client.create_table(**connections_table(tables["connections"]))
        yield client
