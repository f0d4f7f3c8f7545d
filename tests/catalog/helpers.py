"""A self-contained catalog for tests, and the host-key secrets it holds (to scan answers and logs for)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from app.catalog.apply import apply_catalog
from app.cli import main

EXAMPLE_CATALOG = Path(__file__).resolve().parents[2] / "docs" / "catalog.example.yaml"
SPEC_CATALOG = Path(__file__).resolve().parents[3] / "shared" / "spec" / "catalog.example.yaml"
HOST_KEY_SECRETS = ("sk-test-openai-inline-3f9a7c", "sk-test-anthropic-inline-8d1e2b")

_BASE: dict[str, Any] = {
    "hosts": [
        {"name": "openai", "base_url": "http://127.0.0.1:9100",
         "keys": [{"name": "t-openai-1", "value": HOST_KEY_SECRETS[0]}]},
        {"name": "anthropic", "base_url": "http://127.0.0.1:9100",
         "keys": [{"name": "t-anthropic-1", "value": HOST_KEY_SECRETS[1]}]},
    ],
    "models": [
        {"name": "gpt-4o-mini", "bindings": [
            {"host": "openai", "adapter": "openai", "upstream_model": "gpt-4o-mini",
             "pricing": {"input_per_mtok": 0.15, "output_per_mtok": 0.6, "cached_input_per_mtok": 0.075}}]},
        {"name": "claude-sonnet", "bindings": [
            {"host": "anthropic", "adapter": "anthropic", "upstream_model": "claude-sonnet-4-5",
             "pricing": {"input_per_mtok": 3, "output_per_mtok": 15}}]},
    ],
    "policies": [
        {"name": "default", "models": ["*"], "rate_limits": [{"requests": 1000, "per": "60s"}],
         "key_pool": ["t-openai-1", "t-anthropic-1"], "key_selection": "round_robin",
         "circuit_breaker": {"failures": 3, "cooldown": "30s"}},
        {"name": "narrow", "models": ["gpt-*"], "key_pool": ["t-openai-1"]},
    ],
    "teams": [{"name": "t-team"}],
    "projects": [{"name": "t-project", "team": "t-team"}],
    "users": [{"name": "t-alice", "policy": "default", "project": "t-project"},
              {"name": "t-bob", "policy": "narrow"}],
    "service_accounts": [{"name": "t-robot", "policy": "default", "project": "t-project", "team": "t-team"}],
}


def base_catalog() -> dict[str, Any]:
    """A fresh copy of the test catalog, safe to modify."""
    return copy.deepcopy(_BASE)


@pytest.fixture()
def relay(settings_env, runtime, monkeypatch, capsys):  # type: ignore[no-untyped-def]
    """Run `relay ARGS...` (on the base catalog); return (exit code, stdout, stderr)."""
    apply_catalog(runtime, base_catalog())
    for name, value in settings_env.items():
        if name.startswith("RELAY_"):
            monkeypatch.setenv(name, value)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err
    return run
