"""Tests of fleet.history: on AWS a process's history goes to standard output (``WSFLEET_HISTORY_PATH``
``/dev/stdout``), one JSON line per event, for CloudWatch Logs and ``wsfleet aws-history`` to read back."""

from __future__ import annotations

import json
import subprocess
import sys

from harness.aws.logs import history_event


def test_history_written_to_standard_output_is_one_history_line_per_event() -> None:
    script = ("from fleet.history import HistoryWriter\n"
              "w = HistoryWriter('/dev/stdout', 'worker-1')\n"
              "w.emit('lease.acquire', pk='CONN#c1', outcome='ok')\n"
              "print('a log line')\n"
              "w.emit('lease.release', pk='CONN#c1', outcome='ok')\n")
    done = subprocess.run([sys.executable, "-u", "-c", script], capture_output=True, text=True, timeout=60,
                          check=True)
    lines = done.stdout.splitlines()
    assert [json.loads(line)["type"] for line in lines if history_event(line)] == ["lease.acquire", "lease.release"]
    assert [line for line in lines if not history_event(line)] == ["a log line"]
