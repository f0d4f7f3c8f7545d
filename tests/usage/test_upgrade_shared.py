"""Migration 0030 on a database that already holds usage and batch items (a user upgrading): earlier events and
items read as they were written, and what is recorded after it is stored in its new, narrower form."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from app.batches.store import result_rows
from app.migrate import apply_migrations, list_migrations
from app.settings import Settings
from app.usage.events import UsageEvent
from app.usage.writer import UsageRecord, commit_records
from devtools.services import ADMIN_DB_URL

SHARED_FROM = 30
_OLD_ROW = ("INSERT INTO usage_events (request_id, source, started_at, status, credential_kind, credential_id,"
            " relay_key_hash, principal_kind, principal_id, policy_id, route, model_requested, host_name, adapter,"
            " batch_id, batch_idx) VALUES (%s, %s, now(), 200, 'relay_key', %s, %s, 'service_account', %s, %s,"
            " %s, 'm-gpt', 'h-openai', 'openai', %s, %s)")


@pytest.fixture
def upgraded_url(settings: Settings) -> Iterator[str]:
    """A fresh database migrated up to just before 0030 (the caller adds rows, then applies the rest)."""
    name = os.environ.get("RELAY_TEST_DB", "relay_test") + "_upgrade"
    with psycopg.connect(ADMIN_DB_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = settings.database_url.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE schema_migrations (version integer PRIMARY KEY,"
                     " applied_at timestamptz NOT NULL DEFAULT now())")
        for version, path in list_migrations():
            if version < SHARED_FROM:
                with conn.transaction():
                    conn.execute(path.read_text())  # type: ignore[arg-type]  # a file shipped with Relay
                    conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (version,))
    yield url
    with psycopg.connect(ADMIN_DB_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _read(conn: psycopg.Connection[Any], batch_id: uuid.UUID) -> list[dict[str, Any]]:
    return conn.execute("SELECT request_id, credential_kind, credential_id, relay_key_hash, principal_id, policy_id,"
                        " route, model_requested, host_name, adapter, batch_idx FROM usage_events_full"
                        " WHERE batch_id = %s OR (request_id = 'live-1' AND %s) ORDER BY batch_idx NULLS FIRST",
                        (batch_id, True)).fetchall()


def test_events_recorded_before_the_upgrade_read_the_same_and_later_items_share_their_batch_row(upgraded_url):  # type: ignore[no-untyped-def]
    old_batch, cred, principal, policy = (uuid.uuid4() for _ in range(4))
    with psycopg.connect(upgraded_url, autocommit=True) as conn:
        conn.execute(_OLD_ROW, ("live-1", "live", cred, b"k" * 32, principal, policy, "/v1/chat", None, None))
        for idx in range(2):
            conn.execute(_OLD_ROW, (None, "batch", cred, b"k" * 32, principal, policy, "/v1/batches", old_batch, idx))

    assert apply_migrations(upgraded_url)[:1] == [SHARED_FROM]  # and any later ones

    with psycopg.connect(upgraded_url, row_factory=dict_row) as conn:
        rows = _read(conn, old_batch)
        assert [r["request_id"] for r in rows] == ["live-1", f"{old_batch}:0", f"{old_batch}:1"]
        assert {(r["credential_kind"], r["credential_id"], bytes(r["relay_key_hash"]), r["principal_id"],
                 r["policy_id"], r["model_requested"], r["host_name"]) for r in rows} == {
            ("relay_key", cred, b"k" * 32, principal, policy, "m-gpt", "h-openai")}
        new_batch = uuid.uuid4()
        events = [UsageEvent(request_id="", source="batch", started_at=datetime.now(UTC),
                             status=200, credential_kind="relay_key", credential_id=cred, relay_key_hash=b"k" * 32,
                             principal_kind="service_account", principal_id=principal, policy_id=policy,
                             route="/v1/batches", model_requested="m-gpt", host_name="h-openai", adapter="openai",
                             batch_id=new_batch, batch_idx=idx) for idx in range(3)]
        with conn.transaction():
            commit_records(conn, [UsageRecord(e) for e in events])
        assert [(r["credential_id"], r["principal_id"], r["host_name"], r["batch_idx"]) for r in
                _read(conn, new_batch)[1:]] == [(cred, principal, "h-openai", idx) for idx in range(3)]
        stored = conn.execute("SELECT batch_id, shared, credential_kind FROM usage_events ORDER BY id").fetchall()
    assert [(r["batch_id"], r["shared"], r["credential_kind"]) for r in stored] == [
        (None, None, "relay_key"), (old_batch, None, "relay_key"), (old_batch, None, "relay_key"),
        *[(new_batch, 3, None)] * 3]



def test_items_finished_before_the_upgrade_keep_their_segment_names_and_new_ones_are_coded(upgraded_url):  # type: ignore[no-untyped-def]
    batch_id, whole = uuid.uuid4(), "responses-6c9a-34600fca-0.seg"
    with psycopg.connect(upgraded_url, autocommit=True) as conn:
        conn.execute("INSERT INTO batch_items (batch_id, idx, state, response_segment, response_offset,"
                     " response_length) VALUES (%s, 0, 'completed', %s, 0, 10)", (batch_id, whole))

    assert apply_migrations(upgraded_url)[:1] == [SHARED_FROM]  # and any later ones

    with psycopg.connect(upgraded_url) as conn:
        assert [row[1] for row in result_rows(conn, batch_id, after=-1, limit=10)] == [whole]
        coded = conn.execute("SELECT response_segment_code(%s), response_segment_code('other.seg'),"
                             " response_segment_name(response_segment_code(%s))", (whole, whole)).fetchone()
    assert coded == ("6c9a-34600fca-0", "other.seg", whole)
