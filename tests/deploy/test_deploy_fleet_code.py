"""The source reader the IAM, scaling and alarm checks rely on, on a small package written here."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.deploy_fleet_code import (
    aws_calls,
    fleet_modules,
    iam_action,
    import_closure,
    log_events,
    table_roles,
)

MODULES = {
    "__init__.py": "",
    "worker.py": "from fleet.store import Store\nfrom . import metrics\n\n"
                 "def log(event, **fields): ...\n\n"
                 "async def run(aws):\n"
                 "    log('lease.acquire', pk='p', outcome='fail')\n"
                 "    await aws.sqs.receive_message(QueueUrl='q')\n",
    "store.py": "class Store:\n"
                "    async def scan(self, ddb):\n"
                "        await self.aws.ddb.update_item(TableName='t')\n"
                "        await ddb.query(TableName='t', IndexName='i')\n",
    "metrics.py": "async def put(clients):\n"
                  "    await clients.cloudwatch.put_metric_data(Namespace='wsfleet', MetricData=[\n"
                  "        {'MetricName': 'ActiveConnections', 'Value': 1.0, 'Unit': 'Count'},\n"
                  "        {'MetricName': 'ActiveConnections', 'Unit': 'Count',\n"
                  "         'Dimensions': [{'Name': 'WorkerId', 'Value': 'w'}]},\n"
                  "    ])\n",
    "router.py": "from fleet.config import X\n\n"
                 "async def go(clients):\n"
                 "    await clients.sqs.send_message(QueueUrl='q')\n"
                 "    clients.other.delete_item()\n",
    "config.py": "X = 1\n",
}


@pytest.fixture
def package(tmp_path: Path) -> Path:
    root = tmp_path / "fleet"
    root.mkdir()
    for name, source in MODULES.items():
        (root / name).write_text(source, encoding="utf-8")
    return root


def test_import_closure_follows_absolute_and_relative_imports(package: Path) -> None:
    modules = fleet_modules(package)
    worker = {"fleet.worker", "fleet.store", "fleet.metrics", "fleet"}
    assert import_closure(modules, "fleet.worker") == worker
    assert import_closure(modules, "fleet.router") == {"fleet.router", "fleet.config"}


def test_calls_on_the_client_attributes_are_found(package: Path) -> None:
    calls = {(c.module, c.service, c.operation, c.uses_index) for c in aws_calls(fleet_modules(package))}
    assert calls == {
        ("fleet.worker", "sqs", "receive_message", False),
        ("fleet.store", "dynamodb", "update_item", False),
        ("fleet.store", "dynamodb", "query", True),
        ("fleet.metrics", "cloudwatch", "put_metric_data", False),
        ("fleet.router", "sqs", "send_message", False),
    }


def test_metric_literals_are_read(package: Path) -> None:
    [put] = [c for c in aws_calls(fleet_modules(package)) if c.operation == "put_metric_data"]
    assert put.namespace == "wsfleet"
    assert set(put.metrics) == {
        ("ActiveConnections", "Count", frozenset()),
        ("ActiveConnections", "Count", frozenset({"WorkerId"})),
    }


def test_log_lines_are_read(package: Path) -> None:
    [event] = log_events(fleet_modules(package))
    assert (event.event, event.fields) == ("lease.acquire", frozenset({"pk", "outcome"}))


@pytest.mark.parametrize(
    ("service", "operation", "action"),
    [
        ("dynamodb", "update_item", "dynamodb:UpdateItem"),
        ("dynamodb", "batch_write_item", "dynamodb:BatchWriteItem"),
        ("sqs", "receive_message", "sqs:ReceiveMessage"),
        ("sqs", "delete_message_batch", "sqs:DeleteMessage"),
        ("cloudwatch", "put_metric_data", "cloudwatch:PutMetricData"),
    ],
)
def test_iam_actions_come_from_the_service_models(service: str, operation: str, action: str) -> None:
    assert iam_action(service, operation) == action


def test_an_unknown_operation_is_an_error() -> None:
    with pytest.raises(KeyError, match="no operation 'update_items'"):
        iam_action("dynamodb", "update_items")


TABLE_MODULES = {
    "__init__.py": "",
    "worker.py": "from fleet.store import Store\n\n"
                 "async def run(store, config):\n"
                 "    await store.write(config.connections_table, {})\n"
                 "    await store.write(table=config.workers_table, item={})\n",
    "store.py": "class Store:\n"
                "    async def write(self, table, item):\n"
                "        await self.aws.ddb.put_item(TableName=table, Item=item)\n\n"
                "    async def batch(self, items):\n"
                "        table = self.config.messages_table\n"
                "        await self.aws.ddb.batch_write_item(RequestItems={table: items})\n\n"
                "    async def fenced(self, items):\n"
                "        transact = [{'ConditionCheck': {'TableName': self.config.connections_table}}]\n"
                "        transact += [{'Put': {'TableName': self.config.messages_table, 'Item': i}} for i in items]\n"
                "        await self.aws.ddb.transact_write_items(TransactItems=transact)\n\n"
                "    async def unknown(self, name):\n"
                "        await self.aws.ddb.scan(TableName=name.upper())\n",
}


def table_needs(root: Path) -> set[tuple[str, str, str]]:
    """(operation, action or '', table role) for every DynamoDB call of the worker."""
    modules = fleet_modules(root)
    closure = import_closure(modules, "fleet.worker")
    return {
        (call.operation, use.action or "", role)
        for call in aws_calls(modules)
        for use in call.tables
        for role in table_roles(use.table, modules, closure)
    }


def test_tables_are_read_from_settings_parameters_batches_and_transactions(tmp_path: Path) -> None:
    root = tmp_path / "fleet"
    root.mkdir()
    for name, source in TABLE_MODULES.items():
        (root / name).write_text(source, encoding="utf-8")

    assert table_needs(root) == {
        ("put_item", "", "connections"),  # a positional argument at a call site
        ("put_item", "", "workers"),  # a keyword argument at another
        ("batch_write_item", "", "messages"),  # a RequestItems key, through a local name
        ("transact_write_items", "dynamodb:ConditionCheckItem", "connections"),
        ("transact_write_items", "dynamodb:PutItem", "messages"),
        ("scan", "", "?name.upper()"),  # an expression the reader cannot follow
    }
