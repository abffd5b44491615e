"""``log``: one JSON line on stdout per notable worker event (what CloudWatch Logs metric filters read in
AWS; terraform's alarms are checked against these calls, so call it as ``log("event", field=...)``)."""

from __future__ import annotations

import json
import time
from typing import Any


def log(event: str, **fields: Any) -> None:
    print(json.dumps({"t": round(time.time(), 3), "event": event, **fields}, default=str), flush=True)
