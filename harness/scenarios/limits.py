"""The bounds a run's settings keep, in a scenario file and on the command line alike: beyond them a value is
a mistake (or an attack on the machine running it), refused in one line before anything starts."""

from __future__ import annotations

MAX_BYTES = 1_000_000      # a scenario file
MAX_WORKERS = 256
MAX_CONNECTIONS = 100_000
MAX_RATE = 1000.0          # messages per second per stream
MAX_TIMESCALE = 10.0       # as ``--timescale``
MAX_SEED = 2**63 - 1
MAX_UPSTREAM = 1e6         # handshakes a second, or in the bucket
MAX_SECONDS = 86_400.0     # a step's or an operation's at_s and duration_s: within a day
MAX_MS = 1e9               # a bound, or a ``*_ms`` param, in ms (about 11 days either way)
