"""Metrics, logs and health checks."""
