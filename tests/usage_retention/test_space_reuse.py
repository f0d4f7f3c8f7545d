"""After `relay usage purge` folds events, the next events reuse the space they held (the purge vacuums the tables
twice, app.db.vacuum_for_reuse): neither the table nor any of its indexes grows by more than a tenth of what the
folded events took. Without the vacuum, every index grows by the whole of it (checked by hand)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.usage.retention import purge_usage

pytestmark = pytest.mark.integration

EVENTS = 20_000
FOLDED_AT = datetime(2017, 1, 1, tzinfo=UTC)  # before test_retention.py's window: its cutoff folds none of these
CUTOFF = datetime(2017, 12, 31, tzinfo=UTC)
KEPT_AT = datetime(2019, 1, 1, tzinfo=UTC)  # after every cutoff of this folder: these stay
# The credentials of the two sets, above every random one: each set's entries go at the right end of the credential
# index, as the first set's did. (A set whose key falls amid other keys splits its pages in halves instead of
# filling them: that index would grow twice over whatever space was freed.)
FOLDED_KEY = uuid.UUID("ffffffff-ffff-4fff-bfff-fffffffff001")
KEPT_KEY = uuid.UUID("ffffffff-ffff-4fff-bfff-fffffffff002")


def copy_events(runtime: Any, start: datetime, credential: uuid.UUID) -> None:
    with runtime.pool.connection() as conn, conn.cursor() as cur, cur.copy(
            "COPY usage_events (request_id, source, created_at, started_at, status, credential_kind, credential_id,"
            " relay_key_hash, model_requested, input_tokens, cost_nanos) FROM STDIN") as copy:
        for i in range(EVENTS):
            at = start + timedelta(seconds=i)
            copy.write_row((f"reuse-{uuid.uuid4().hex}", "live", at, at, 200, "relay_key", credential,
                            b"\x00" * 32, "m-reuse", i, i * 7))


def sizes(runtime: Any) -> dict[str, int]:
    """usage_events and each of its indexes → bytes on disk."""
    with runtime.pool.connection() as conn:
        rows = conn.execute("SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c WHERE c.oid ="
                            " 'usage_events'::regclass OR c.oid IN (SELECT indexrelid FROM pg_index"
                            " WHERE indrelid = 'usage_events'::regclass)").fetchall()
    return {r["relname"]: int(r["pg_relation_size"]) for r in rows}


def test_the_events_after_a_purge_reuse_the_space_of_the_folded_ones(runtime) -> None:
    before = sizes(runtime)
    copy_events(runtime, FOLDED_AT, FOLDED_KEY)
    middle = sizes(runtime)
    assert purge_usage(runtime.pool, CUTOFF).events >= EVENTS
    copy_events(runtime, KEPT_AT, KEPT_KEY)
    end = sizes(runtime)
    assert middle["usage_events"] - before["usage_events"] > EVENTS * 100  # the table, at least
    for name in before:  # the table and each index (the batch-item and principal ones take no live key event)
        first_bytes, second_bytes = middle[name] - before[name], end[name] - middle[name]
        assert second_bytes <= first_bytes / 10 + 16384, (name, first_bytes, second_bytes)  # a tenth, two pages
