"""Tests of harness.tasks: the stand-in for ECS and EventBridge sends each worker-stopped event to the
workers' queue as many times as terraform's rule has targets (``fleet.schema.DEATH_NOTICE_COPIES``)."""

from __future__ import annotations

import json
from typing import Any

from fleet.history import HistoryWriter
from fleet.schema import DEATH_NOTICE_COPIES
from harness.backends.resources import client
from harness.tasks import LocalTasks

TASK = "arn:aws:ecs:us-east-1:123456789012:task/wsfleet/0123456789abcdef"


def test_each_event_reaches_the_queue_once_per_target_of_the_rule(clean_backend: Any) -> None:
    env = clean_backend.env()
    LocalTasks(env, clean_backend.queue_url, HistoryWriter(None, "harness")).send_notice(TASK, "forged")
    sqs = client(env, "sqs")
    bodies: list[str] = []
    while answer := sqs.receive_message(QueueUrl=clean_backend.queue_url, MaxNumberOfMessages=10,
                                        WaitTimeSeconds=0).get("Messages", []):
        bodies += [message["Body"] for message in answer]
    assert len(bodies) == DEATH_NOTICE_COPIES == 2
    assert len(set(bodies)) == 1 and json.loads(bodies[0])["detail"]["taskArn"] == TASK
