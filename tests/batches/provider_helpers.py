"""Helpers for the OpenAI and Anthropic batch API tests: input files, polling with the SDKs, usage events."""

from __future__ import annotations

import json
import time
from typing import Any
from uuid import UUID

from app.runtime import Runtime

OPENAI_DONE = ("completed", "failed", "expired", "cancelled")


def chat(text: str, model: str = "gpt-4o-mini") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}]}


def message(text: str, model: str = "claude-sonnet") -> dict[str, Any]:
    return {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": text}]}


def jsonl(requests: list[dict[str, Any]], endpoint: str = "/v1/chat/completions") -> bytes:
    """An OpenAI batch input file: one `{custom_id, method, url, body}` per line."""
    lines = [{"custom_id": r.pop("custom_id"), "method": "POST", "url": endpoint, "body": r}
             for r in (dict(r) for r in requests)]
    return "\n".join(json.dumps(line) for line in lines).encode() + b"\n"


def wait_openai(client: Any, batch_id: str, timeout: float = 30) -> Any:
    """Poll batches.retrieve until the batch is in a final status, as an SDK user's loop does."""
    deadline = time.monotonic() + timeout
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in OPENAI_DONE:
            return batch
        if time.monotonic() > deadline:
            raise AssertionError(f"batch {batch_id} still {batch.status} after {timeout}s: {batch.request_counts}")
        time.sleep(0.1)


def wait_anthropic(client: Any, batch_id: str, timeout: float = 30) -> Any:
    """Poll messages.batches.retrieve until processing has ended."""
    deadline = time.monotonic() + timeout
    while True:
        batch = client.messages.batches.retrieve(batch_id)
        if batch.processing_status == "ended":
            return batch
        if time.monotonic() > deadline:
            raise AssertionError(f"batch {batch_id} still {batch.processing_status}: {batch.request_counts}")
        time.sleep(0.1)


def lines_of(content: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in content.splitlines() if line.strip()]


def batch_uuid(provider_id: str) -> UUID:
    return UUID(hex=provider_id.rsplit("_", 1)[1])


def usage_by_custom_id(runtime: Runtime, provider_id: str) -> dict[str, dict[str, Any]]:
    """The batch's usage events by custom_id (asserting one per item)."""
    with runtime.pool.connection() as conn:
        rows = conn.execute("SELECT * FROM usage_events_full WHERE batch_id = %s",
                            (batch_uuid(provider_id),)).fetchall()
    found = {row["custom_id"]: dict(row) for row in rows}
    assert len(found) == len(rows), "one usage event per item, each with its own custom_id"
    return found


def batch_rows(runtime: Runtime) -> int:
    with runtime.pool.connection() as conn:
        return int(conn.execute("SELECT count(*) AS n FROM batches").fetchone()["n"])  # type: ignore[index]
