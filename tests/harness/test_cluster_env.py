"""What a cluster's processes are told, without starting them: the user's settings win over what the backend
suggests, and the upstream simulator runs at the cluster's time scale and seed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.cluster import Cluster, ClusterSpec, upstream_argv
from harness.upstream_sim.__main__ import build_parser


class SuggestsNoTransactions:
    """A backend's environment as the embedded moto backend gives it (transactions off: moto is slow)."""

    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:1", "WSFLEET_TRANSACTIONS": "off"}


def fleet_env(tmp_path: Path, **overrides: Any) -> dict[str, str]:
    cluster = Cluster(ClusterSpec(run_dir=tmp_path, overrides=overrides), backend=SuggestsNoTransactions())  # type: ignore[arg-type]
    try:
        return cluster._fleet_env({"WSFLEET_WORKER_ID": "worker-1"})
    finally:
        cluster.history.close()


def test_set_wins_over_the_backends_suggestion(tmp_path: Path) -> None:
    assert fleet_env(tmp_path)["WSFLEET_TRANSACTIONS"] == "off"
    told = fleet_env(tmp_path, transactions="on", max_connections=2000)
    assert (told["WSFLEET_TRANSACTIONS"], told["WSFLEET_MAX_CONNECTIONS"]) == ("on", "2000")
    assert told["WSFLEET_WORKER_ID"] == "worker-1"


def test_the_simulator_runs_at_the_clusters_time_scale_and_seed_with_its_limits(tmp_path: Path) -> None:
    argv = upstream_argv(ClusterSpec(run_dir=tmp_path, timescale=0.25, seed=7,
                                     upstream={"handshake_quota": 50.0, "handshake_burst": 20.0}))
    assert argv[:3] == ["python", "-m", "harness.upstream_sim"]
    args = build_parser().parse_args(argv[3:])
    assert (args.timescale, args.seed, args.handshake_quota, args.handshake_burst) == (0.25, 7, 50, 20)
