"""Root conftest: loads the scenario suite's pytest plugin, so its options (``--max-duplicate-claims``,
``--scenario-timescale``) are known to every collection (``pytest tests`` as well as ``pytest harness/scenarios``)."""

pytest_plugins = ["harness.scenarios.gate"]
