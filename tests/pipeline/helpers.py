"""Small helpers for pipeline tests: calling Relay and reading what it recorded."""

from __future__ import annotations

from typing import Any

from app.pipeline.record import usage_writer
from app.runtime import Runtime
from devtools.waiting import until

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say hello to the gateway"}]}


def chat(client: Any, key: str, body: dict[str, Any] | None = None, path: str = "/v1/chat/completions",
         buffered: bool = True, **headers: str) -> Any:
    return client.post(path, json=body or CHAT, headers={"Authorization": f"Bearer {key}", **headers},
                       buffered=buffered)


def usage_event(runtime: Runtime, request_id: str, timeout: float = 5.0) -> dict[str, Any]:
    """The one usage event of REQUEST_ID, once the usage writer has committed it (fails unless exactly one)."""
    rows = until(lambda: _events(runtime, request_id), what=f"the usage event of {request_id}", timeout=timeout)
    assert len(rows) == 1, f"expected one usage event for {request_id}, got {len(rows)}"
    return rows[0]


def _events(runtime: Runtime, request_id: str) -> list[dict[str, Any]]:
    with runtime.pool.connection() as conn:
        rows = conn.execute("SELECT * FROM usage_events WHERE request_id = %s", (request_id,)).fetchall()
    return [dict(r) for r in rows]  # type: ignore[call-overload]


def settle(runtime: Runtime) -> None:
    """Wait until this process's usage writer has committed every call made so far (tokens, breakers included)."""
    assert usage_writer(runtime).flush(10), "the usage writer did not flush"
