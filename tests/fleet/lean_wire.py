"""A test seam for ``fleet.lean_put``: the lean PutItem goes out on its own connections, not through the
SDK's event hooks, so a test that held or answered the SDK's PutItem holds or answers it here (``Wire``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleet.aws import AwsClients
from fleet.lean_http import Answer


@dataclass
class Canned:
    """An answer given in place of the service's: its status, JSON body and kept headers (none: no Date)."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    def answer(self) -> Answer:
        return Answer(self.status, self.headers, json.dumps(self.body).encode())


class Wire:
    """Stands between a lean client and its connections.  Each request sets ``reached``, waits until
    ``opened`` is set, and is then answered by the next of ``canned`` (each once) or sent (``sent`` set)."""

    def __init__(self, http: Any) -> None:
        self.http = http
        self.reached = asyncio.Event()
        self.opened = asyncio.Event()
        self.opened.set()
        self.sent = asyncio.Event()
        self.canned: list[Canned] = []

    async def post(self, headers: Mapping[str, str], body: bytes) -> Answer:
        self.reached.set()
        await self.opened.wait()
        if self.canned:
            return self.canned.pop(0).answer()
        self.sent.set()
        answer: Answer = await self.http.post(headers, body)
        return answer

    async def close(self) -> None:
        await self.http.close()


def wire(aws: AwsClients, held: bool = False) -> Wire:
    """Put a ``Wire`` under ``aws``'s lean PutItem; ``held``: requests wait until its ``opened`` is set."""
    seam = Wire(aws.lean.ddb.http)
    if held:
        seam.opened.clear()
    aws.lean.ddb.http = seam
    return seam


def refusal(code: str, status: int = 400, message: str = "refused") -> Canned:
    """DynamoDB's error answer with ``code``."""
    return Canned(status, {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message})
