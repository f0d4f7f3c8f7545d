"""A wrong setting or an unreachable service stops a process with one clear line, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from devtools.processes import ROOT, free_port


def run_relay(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env={**base, **env}, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


GOOD = {"RELAY_ADMIN_TOKEN": "a" * 32, "RELAY_SECRET_KEY": "s" * 32}


def test_a_missing_database_url_is_named_in_one_line_then_where_settings_come_from() -> None:
    out = run_relay(["migrate"], RELAY_BROKER_URL="amqp://guest:guest@127.0.0.1:1/%2F", **GOOD)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert lines[0] == "relay: configuration error: RELAY_DATABASE_URL is required but not set" and len(lines) == 2
    assert lines[1].startswith("  relay reads its settings from RELAY_* environment variables")


def test_an_unreachable_database_is_one_line_naming_it() -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/relay"
    out = run_relay(["api"], RELAY_DATABASE_URL=url, RELAY_BROKER_URL="amqp://guest:guest@127.0.0.1:1/%2F", **GOOD)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert lines[0].startswith("relay: database_unavailable: cannot connect to Postgres")


def test_an_unreachable_multi_host_database_is_one_line_naming_every_host() -> None:
    first, second = free_port(), free_port()
    url = f"postgresql://postgres@127.0.0.1:{first},127.0.0.1:{second}/relay?target_session_attrs=read-write"
    out = run_relay(["migrate"], RELAY_DATABASE_URL=url, RELAY_BROKER_URL="amqp://guest:guest@127.0.0.1:1/%2F", **GOOD)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert lines[0].startswith(f"relay: database_unavailable: cannot connect to Postgres at 127.0.0.1:{first},"
                               f"127.0.0.1:{second}/relay: ")


@pytest.mark.integration
def test_an_unreachable_broker_is_one_line_naming_it(services) -> None:
    out = run_relay(["worker"], RELAY_DATABASE_URL=services.database_url,
                    RELAY_BROKER_URL=f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F", **GOOD)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert lines[0].startswith("relay: broker_unavailable: cannot connect to RabbitMQ at 127.0.0.1:")


@pytest.mark.integration
def test_readyz_names_the_service_that_is_down(settings) -> None:
    from dataclasses import replace

    from app.api.factory import create_app
    from app.runtime import Runtime

    broken = replace(settings, broker_url=f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F")
    runtime = Runtime.build(broken)
    try:
        res = create_app(runtime=runtime).test_client().get("/readyz")
    finally:
        runtime.close()
    assert res.status_code == 503
    assert res.json["checks"]["postgres"] == "ok"
    assert res.json["checks"]["rabbitmq"].startswith("unreachable")


@pytest.mark.integration
def test_readyz_is_ok_while_the_first_broker_is_down_and_a_failover_one_answers(settings) -> None:
    from dataclasses import replace

    from app.api.factory import create_app
    from app.runtime import Runtime

    down = f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F"
    failover = replace(settings, broker_url=down, broker_failover_urls=settings.broker_url)
    runtime = Runtime.build(failover)
    try:
        res = create_app(runtime=runtime).test_client().get("/readyz")
    finally:
        runtime.close()
    assert res.status_code == 200, res.json
    assert res.json["checks"]["rabbitmq"] == "ok"
