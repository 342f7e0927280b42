"""Metrics, structured logs, the per-call context, and usage accounting."""
