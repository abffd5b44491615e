"""FleetConfig: every duration, limit, name and switch a fleet process reads, from ``WSFLEET_*`` variables.

Durations are given at time scale 1 (the published values) in milliseconds and multiplied by
``WSFLEET_TIMESCALE`` when read through the ``*_s`` properties, so a scenario at scale 0.1 runs a 2 s
lease without anyone re-deriving numbers.  Endpoints are not configured here: the SDK reads the standard
``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_<SERVICE>`` variables itself, so real AWS, LocalStack and the
embedded backend differ only in environment.

``ENV_VARS`` maps each field to its variable; terraform's task definition is checked against it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Literal, get_args

from fleet.allowlist import Allowlist
from fleet.backoff import POLICIES
from fleet.errors import ConfigError

Profile = Literal["blog", "hardened", "unsafe"]
PROFILES: tuple[str, ...] = get_args(Profile)
# ``reconnect_policy``: a policy of ``fleet.backoff``, or the profile's own.
PROFILE_POLICY = "profile"
RECONNECT_POLICIES: tuple[str, ...] = (PROFILE_POLICY, *POLICIES)


@dataclass(frozen=True)
class FleetConfig:
    """Settings of one fleet process (worker or router).  All ``*_ms`` fields are at time scale 1."""

    profile: Profile = "blog"
    timescale: float = 1.0
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    region: str = "us-east-1"
    connections_table: str = "wsfleet-connections"
    messages_table: str = "wsfleet-messages"
    workers_table: str = "wsfleet-workers"
    queue_url: str = ""
    # The published values (blog): 20 s lease, 5 s heartbeat, 60 s reconcile, 10 s desired-state check.
    lease_ms: int = 20_000
    heartbeat_ms: int = 5_000
    reconcile_ms: int = 60_000
    desired_check_ms: int = 10_000
    # SQS long-poll wait; also how long a shutting-down worker may wait for its last poll to hand back.
    notify_wait_ms: int = 5_000
    # A shutting-down worker's handoff (final writes, releases, announcements) is cut after this long, and at
    # least 2 s at any time scale: what it has not released by then lapses at lease expiry, as a crash's would.
    # Keep it under the platform's stop timeout (ECS: stopTimeout, then SIGKILL).
    shutdown_budget_ms: int = 6_000
    metric_interval_ms: int = 60_000
    max_connections: int = 700
    # Claiming (fleet.claims): notifications one worker acts on at once (reads and acquires), and acquires one
    # reconcile sweep keeps in flight; SQS receives kept going at once; WebSocket handshakes a second (at scale
    # 1) the worker paces its sessions to, jittered: the upstream's new-connection quota (API Gateway: 500 a
    # second per account, so a fleet of W workers sets quota / W), whose 429 Retry-After is honoured anyway.
    claims_in_flight: int = 64
    notify_pollers: int = 4
    handshake_rate: float = 500.0
    # hardened: when workers join, the busiest hand streams off to them until max / min streams per worker
    # is at most this (fleet.balance); 0: never move a stream for balance.
    balance_band: float = 1.2
    # hardened: how far apart two fleet clocks may be; takeovers wait this long past an expiry.
    clock_tolerance_ms: int = 1_000
    # hardened: stop consuming this long before the lease could be taken (self-fencing).
    fence_margin_ms: int = 2_000
    # hardened: checkpoint last_seq this often while a stream is owned (also on release).
    checkpoint_ms: int = 300_000
    # hardened: give the lease up when the upstream stays unreachable this long.
    upstream_budget_ms: int = 30_000
    # upstream reconnect backoff: base and cap of the reconnect policy.
    reconnect_base_ms: int = 1_000
    reconnect_max_ms: int = 10_000
    # The delay before each reconnect (fleet.backoff): none (the base each time), exponential (base·2^n up to
    # the cap), full / equal / decorrelated jitter (the AWS blog's formulas), or profile: the profile's own
    # (hardened: full jitter; blog: none).  A handshake refused with 429 / 503 and Retry-After waits at least
    # that long (at this time scale), up to the cap.
    reconnect_policy: str = PROFILE_POLICY
    # A request that takes longer than this is abandoned (outcome unknown).
    aws_timeout_ms: int = 3_000
    # hardened: the longest a received message waits before its batch is written (fleet.batch_log).  At a
    # stream's 5 msg/s, 2 s makes batches of 10: a tenth of the published design's requests per message.
    flush_ms: int = 2_000
    # Router: hosts a START's ws_url may name (comma-separated host or host:port).
    allowed_ws_hosts: tuple[str, ...] = ()
    # Worker: rewrite every ws_url's host:port to this (the worker's own upstream proxy).
    upstream_via: str = ""
    # History events (JSON Lines) go here when set.
    history_path: str = ""
    # Clock fault: a file holding an offset in ms added to this process's lease clock (re-read live).
    clock_offset_file: str = ""
    clock_offset_ms: int = 0
    # Worker: the ECS task running it (a death notice names it).  On ECS, left empty, it is read from the
    # task metadata endpoint; the harness sets its stand-in's.
    task_arn: str = ""
    # Worker and router: the region activation gate (fleet.region_gate): the Route 53 ARC cluster's endpoints
    # (``region=url``, tried in turn) and this region's routing control (its ARN); none: no gate (one region,
    # or regions that may both consume).
    region_gate_endpoints: tuple[str, ...] = ()
    region_gate_control: str = ""
    # Router: journal each START and STOP in an item no worker writes (``fleet.router``: "on" with a standby
    # region, so an acknowledged control write reverted by Global Tables' last-writer-wins is re-applied
    # when a region is activated); "off" (one region) writes no journal.
    control_journal: str = "off"

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ConfigError(f"WSFLEET_PROFILE must be one of {', '.join(PROFILES)}, not {self.profile!r}")
        if not self.timescale > 0:
            raise ConfigError(f"WSFLEET_TIMESCALE must be a positive number, not {self.timescale!r}")
        for name in ("lease_ms", "heartbeat_ms", "reconcile_ms", "desired_check_ms", "aws_timeout_ms",
                     "shutdown_budget_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{ENV_VARS[name]} must be positive, not {getattr(self, name)}")
        if self.heartbeat_ms >= self.lease_ms:
            raise ConfigError("WSFLEET_HEARTBEAT_MS must be shorter than WSFLEET_LEASE_MS")
        if self.control_journal not in ("on", "off"):
            raise ConfigError(f"WSFLEET_CONTROL_JOURNAL must be on or off, not {self.control_journal!r}")
        if self.reconnect_policy not in RECONNECT_POLICIES:
            raise ConfigError(f"WSFLEET_RECONNECT_POLICY must be one of {', '.join(RECONNECT_POLICIES)}, "
                              f"not {self.reconnect_policy!r}")
        if not 0 < self.reconnect_base_ms <= self.reconnect_max_ms:
            raise ConfigError("WSFLEET_RECONNECT_BASE_MS must be positive and at most WSFLEET_RECONNECT_MAX_MS, "
                              f"not {self.reconnect_base_ms} (max {self.reconnect_max_ms})")
        for name in ("max_connections", "claims_in_flight", "notify_pollers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{ENV_VARS[name]} must be at least 1, not {getattr(self, name)}")
        if not self.handshake_rate > 0:
            raise ConfigError(f"WSFLEET_HANDSHAKE_RATE must be a positive number, not {self.handshake_rate!r}")
        if not (self.balance_band == 0 or self.balance_band >= 1):
            raise ConfigError(f"WSFLEET_BALANCE_BAND must be 0 (off) or at least 1, not {self.balance_band!r}")
        if not self.worker_id:
            raise ConfigError("WSFLEET_WORKER_ID must not be empty")
        Allowlist.parse(self.allowed_ws_hosts)  # a malformed entry fails every process at start-up
        if bool(self.region_gate_endpoints) != bool(self.region_gate_control):
            raise ConfigError("WSFLEET_REGION_GATE_ENDPOINTS and WSFLEET_REGION_GATE_CONTROL are set together "
                              "(the gate's cluster and this region's routing control) or not at all")
        for entry in self.region_gate_endpoints:
            region, _, url = entry.partition("=")
            if not region.strip() or not url.strip().startswith(("https://", "http://")):
                raise ConfigError(f"WSFLEET_REGION_GATE_ENDPOINTS entries are region=url, not {entry!r}")

    def scaled_s(self, ms: int) -> float:
        """A duration given at scale 1 in ms, as seconds at this config's time scale."""
        return ms * self.timescale / 1000.0

    def scaled_ms(self, ms: int) -> float:
        return ms * self.timescale

    @property
    def lease_s(self) -> float:
        return self.scaled_s(self.lease_ms)

    @property
    def heartbeat_s(self) -> float:
        return self.scaled_s(self.heartbeat_ms)

    @property
    def reconcile_s(self) -> float:
        return self.scaled_s(self.reconcile_ms)

    @property
    def desired_check_s(self) -> float:
        return self.scaled_s(self.desired_check_ms)

    @property
    def shutdown_budget_s(self) -> float:
        return max(2.0, self.scaled_s(self.shutdown_budget_ms))

    @property
    def region_gate_cluster(self) -> list[tuple[str, str]]:
        """The region gate's cluster endpoints as (region, url) pairs, in the order given."""
        return [(region.strip(), url.strip()) for region, _, url in
                (entry.partition("=") for entry in self.region_gate_endpoints)]

    @property
    def notify_wait_s(self) -> int:
        """SQS long-poll wait: whole seconds from 1 to 20, as the API takes."""
        return max(1, min(20, round(self.scaled_s(self.notify_wait_ms))))

    def durations(self) -> dict[str, float]:
        """Every effective duration in ms (for verdicts and reports)."""
        return {
            name: self.scaled_ms(getattr(self, name))
            for name in (
                "lease_ms", "heartbeat_ms", "reconcile_ms", "desired_check_ms", "clock_tolerance_ms",
                "fence_margin_ms", "checkpoint_ms", "upstream_budget_ms", "reconnect_base_ms",
                "reconnect_max_ms", "aws_timeout_ms", "metric_interval_ms", "flush_ms",
            )
        }

    def to_env(self) -> dict[str, str]:
        """The ``WSFLEET_*`` variables that reproduce this config in another process."""
        env: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            env[ENV_VARS[f.name]] = ",".join(value) if isinstance(value, tuple) else str(value)
        return env

    def with_changes(self, **changes: object) -> FleetConfig:
        return replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> FleetConfig:
        """Read every ``WSFLEET_*`` variable that is set; the rest keep their defaults."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(ENV_VARS[f.name])
            if raw is None or raw == "":
                continue
            values[f.name] = _parse(f.name, f.type, raw)
        if "region" not in values:
            region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
            if region:
                values["region"] = region
        return cls(**values)  # type: ignore[arg-type]


ENV_VARS: dict[str, str] = {f.name: "WSFLEET_" + f.name.upper() for f in fields(FleetConfig)}

# The settings a deployment tunes; ``wsfleet up`` and ``wsfleet scenario`` take them from ``WSFLEET_*``
# variables and ``--set``.  The other fields are wiring (names, endpoints, files) the launcher sets itself,
# or have their own flags (profile, time scale).
TUNABLE: tuple[str, ...] = (
    "lease_ms", "heartbeat_ms", "reconcile_ms", "desired_check_ms", "notify_wait_ms", "shutdown_budget_ms",
    "metric_interval_ms", "max_connections", "claims_in_flight", "notify_pollers", "handshake_rate", "balance_band",
    "clock_tolerance_ms", "fence_margin_ms", "checkpoint_ms", "upstream_budget_ms",
    "reconnect_base_ms", "reconnect_max_ms", "reconnect_policy", "aws_timeout_ms", "flush_ms",
)


def tuning(environ: Mapping[str, str], assignments: Iterable[str] = ()) -> dict[str, object]:
    """``FleetConfig`` overrides for a launcher: each ``TUNABLE`` setting whose ``WSFLEET_*`` variable is set
    in ``environ``, then each ``KEY=VALUE`` of ``assignments`` (KEY: a field name or its variable, in either
    case), which wins.  ``ConfigError`` names a malformed assignment, an unknown key, a key the launcher
    sets itself, or a value that is not a number where one is needed."""
    types = {f.name: f.type for f in fields(FleetConfig)}
    values: dict[str, object] = {}
    for name in TUNABLE:
        raw = environ.get(ENV_VARS[name])
        if raw:
            values[name] = _parse(name, types[name], raw)
    for assignment in assignments:
        key, sep, raw = assignment.partition("=")
        name = key.strip().lower().removeprefix("wsfleet_")
        if not sep or not key.strip():
            raise ConfigError(f"--set {assignment!r}: expected KEY=VALUE, e.g. max_connections=2000")
        if name not in TUNABLE:
            why = "is set by the launcher or by its own flag" if name in types else "is not a fleet setting"
            raise ConfigError(f"--set {key.strip()}: {why}; settings: {', '.join(TUNABLE)}")
        try:
            values[name] = _parse(name, types[name], raw.strip())
        except ConfigError:
            raise ConfigError(f"--set {key.strip()}={raw.strip()}: must be a number") from None
    return values


def _parse(name: str, type_name: object, raw: str) -> object:
    var = ENV_VARS[name]
    kind = str(type_name)
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
    except ValueError:
        raise ConfigError(f"{var} must be a number, not {raw!r}") from None
    if kind.startswith("tuple"):
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    return raw
