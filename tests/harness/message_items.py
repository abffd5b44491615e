"""Stored items of the batch log (README, "Stored message layout"), as a writer puts them, for the readers'
tests."""

from __future__ import annotations

import json
from typing import Any

from boto3.dynamodb.types import TypeSerializer


def log_item(pk: str, batch: int, kind: str, epoch: int, worker: str, gen: str, seq_from: int, seq_to: int,
             written_ms: int = 0, take: int | None = None) -> dict[str, Any]:
    """A low-level log item; a batch's msgs (JSON text of [seq, ts_ms, data] arrays) are its seqs with data
    ``<id>:<seq>`` and ts ``1000 + seq``."""
    item: dict[str, Any] = {"pk": pk, "sk": batch, "kind": kind, "epoch": epoch, "worker": worker, "gen": gen,
                            "seq_from": seq_from, "seq_to": seq_to, "written_ms": written_ms}
    if take is not None:
        item["take"] = take
    if kind == "batch":
        item["msgs"] = json.dumps([[seq, 1000 + seq, f"{pk[5:]}:{seq}"] for seq in range(seq_from, seq_to + 1)])
    serializer = TypeSerializer()
    return {name: serializer.serialize(value) for name, value in item.items()}
