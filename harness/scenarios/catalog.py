"""The built-in scenarios: the scenario files under ``harness/scenarios/catalog/``, loaded by name.

Each file says what it breaks, when (drawn from the seed: same ``--seed``, same schedule), and the
recovery bound each profile is held to, as expressions of the configuration (``scenario_file`` explains
the format).  ``blog`` is held to the published worst case, lease + reconcile, for every fault;
``hardened`` to its takeover bound (lease + 10 % plus an unscaled 1 s work allowance), 1 s for a
graceful handoff, and the reconnect backoff cap for upstream drops; where the faulted worker's streams ride
the fault out (clock skew within the tolerance, a partial throttle), the fault's duration plus the takeover
bound.
"""

from __future__ import annotations

from pathlib import Path

from fleet.config import FleetConfig
from harness.scenarios.scenario_file import ScenarioSpec, Step, load

CATALOG_DIR = Path(__file__).resolve().parent / "catalog"
REGRESSIONS_DIR = Path(__file__).resolve().parent / "regressions"


def load_dir(folder: Path) -> dict[str, ScenarioSpec]:
    """Every scenario file in ``folder`` by name (sorted by file name)."""
    specs = [load(path) for path in sorted(folder.iterdir()) if path.suffix in (".yaml", ".yml", ".json")]
    return {spec.name: spec for spec in specs}


# the order the catalog is listed and tested in; files not named here follow in file-name order
LISTED = ("crash", "crash_notice", "graceful", "pause", "partition_aws", "partition_upstream", "mid_op_drop",
          "clock_skew")
_LOADED = load_dir(CATALOG_DIR)
SCENARIOS: dict[str, ScenarioSpec] = {name: _LOADED[name] for name in (
    *(n for n in LISTED if n in _LOADED), *(n for n in _LOADED if n not in LISTED))}


def schedule(name: str, seed: int, config: FleetConfig, workers: int) -> list[Step]:
    """The fault schedule of one run: a function of the scenario, seed, settings and worker count."""
    return SCENARIOS[name].expand(config.profile, seed, config, workers).steps
