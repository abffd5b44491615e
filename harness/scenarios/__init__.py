"""Chaos scenarios: the catalog, the runner, and the pytest suite that gates CI."""
