"""The nemesis: faults injected into a run (network through the Toxiproxy API, processes, clocks, regions)."""
