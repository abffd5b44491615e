"""Checkers that read only the history (Jepsen-style) and compose one verdict (DESIGN §5–§7).

One module per checker: ``duplicates`` (I1 duplicate claims, zombie time, lease double ownership),
``sequences`` (I2 lost, I3 duplicated), ``recovery`` (phases per affected connection), ``bounds`` (I4),
``stop`` (I5), ``zombies`` (I6 zombie writes, judged from the stored items), ``handshakes`` (the
new-connection quota under a storm); ``consuming`` derives who
consumed what when; ``events`` reads the history (consumers are incarnations, ``worker@gen``); ``verdict``
composes them and writes ``verdict.json``.  Each ``check_*`` takes the history in its one form
(``events.Events``, from ``events.read_events``) and returns a ``CheckResult``.
"""

from harness.checkers.bounds import check_bounds
from harness.checkers.duplicates import check_duplicate_claims
from harness.checkers.handshakes import check_handshakes
from harness.checkers.recovery import check_recovery
from harness.checkers.result import UNKNOWN, CheckResult, Validity, compose
from harness.checkers.sequences import check_sequences
from harness.checkers.stop import check_stop
from harness.checkers.verdict import TABLE_COLUMNS, VERDICT_KEYS, Analysis, analyse, check_run, write_verdict
from harness.checkers.zombies import check_zombie_writes

__all__ = [
    "TABLE_COLUMNS",
    "UNKNOWN",
    "VERDICT_KEYS",
    "Analysis",
    "CheckResult",
    "Validity",
    "analyse",
    "check_bounds",
    "check_duplicate_claims",
    "check_handshakes",
    "check_recovery",
    "check_run",
    "check_sequences",
    "check_stop",
    "check_zombie_writes",
    "compose",
    "write_verdict",
]
