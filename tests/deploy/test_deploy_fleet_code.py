"""The source reader the IAM, scaling and alarm checks rely on, on a small package written here."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.deploy_fleet_code import aws_calls, fleet_modules, iam_action, import_closure, log_events

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
