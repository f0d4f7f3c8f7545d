"""Small helpers for pipeline tests: calling Relay and reading what it recorded."""

from __future__ import annotations

from typing import Any

from app.runtime import Runtime

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say hello to the gateway"}]}


def chat(client: Any, key: str, body: dict[str, Any] | None = None, path: str = "/v1/chat/completions",
         buffered: bool = True, **headers: str) -> Any:
    return client.post(path, json=body or CHAT, headers={"Authorization": f"Bearer {key}", **headers},
                       buffered=buffered)


def usage_event(runtime: Runtime, request_id: str) -> dict[str, Any]:
    """The one usage event of REQUEST_ID (fails if there is not exactly one)."""
    with runtime.pool.connection() as conn:
        rows = conn.execute("SELECT * FROM usage_events WHERE request_id = %s", (request_id,)).fetchall()
    assert len(rows) == 1, f"expected one usage event for {request_id}, got {len(rows)}"
    return dict(rows[0])  # type: ignore[call-overload]
