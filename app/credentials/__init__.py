"""Credentials: relay keys (stored as hashes) and signed inference tokens; their store and services."""
