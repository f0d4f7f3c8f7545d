"""The usage writer on the real Postgres. Live calls' events with no side writes commit as one statement each
group (an INSERT, or a COPY of several), without a transaction of their own; an event with side writes commits
with them in one transaction, or not at all."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from app.usage.events import UsageEvent
from app.usage.writer import GroupWriter, UsageRecord

pytestmark = pytest.mark.integration


def _event(request_id: str) -> UsageEvent:
    return UsageEvent(request_id=request_id, source="live", started_at=datetime.now(UTC), status=200,
                      credential_kind="relay_key", input_tokens=3, output_tokens=4)


def _stored(runtime: Any, request_ids: list[str]) -> set[str]:
    with runtime.pool.connection() as conn:
        rows = conn.execute("SELECT request_id FROM usage_events WHERE request_id = ANY(%s)",
                            (request_ids,)).fetchall()
    return {str(r["request_id"]) for r in rows}


@pytest.fixture()
def writer(runtime: Any) -> Any:
    writer = GroupWriter(runtime.pool, name="test-usage-writer")
    yield writer
    writer.close()


def test_live_events_without_side_writes_are_all_committed_alone_or_in_groups(runtime: Any, writer: Any) -> None:
    ids = [f"w-{uuid.uuid4().hex}" for _ in range(60)]
    for request_id in ids:  # submitted faster than one commit: the writer takes them in groups (a COPY each)
        writer.record(UsageRecord(_event(request_id)))
    assert writer.flush(60)
    assert _stored(runtime, ids) == set(ids)


def test_an_event_whose_side_write_fails_is_not_committed_either(runtime: Any, writer: Any) -> None:
    doomed, fine = f"w-{uuid.uuid4().hex}", f"w-{uuid.uuid4().hex}"
    writer.record(UsageRecord(_event(doomed), extra=(("SELECT 1 / (0 * %s)", (1,)),)))
    writer.record(UsageRecord(_event(fine)))
    assert writer.flush(60)
    assert _stored(runtime, [doomed, fine]) == {fine}
