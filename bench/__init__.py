"""Engram's benchmarks: `python -m bench` (or `make bench`); figures go to docs/benchmarks.md."""
