"""The OpenAI and Anthropic formats of a batch, its files, ids and result lines. Pure functions of the rows.

Status mapping (one batch, three views):

| Relay (status, every item final) | OpenAI `status`           | Anthropic `processing_status` |
|----------------------------------|---------------------------|-------------------------------|
| queued, no                       | in_progress               | in_progress                   |
| queued, yes                      | completed (expired if its expiry stopped items) | ended  |
| cancelled, no                    | cancelling                | canceling                     |
| cancelled, yes                   | cancelled                 | ended                         |
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from uuid import UUID

from adapters.anthropic import ADAPTER as ANTHROPIC
from adapters.openai import openai_error_body
from app.errors import RelayError
from schemas.batch_ids import anthropic_batch_id, file_id, openai_batch_id, parse_batch_id, parse_file_id
from schemas.timestamps import rfc3339, unix

if TYPE_CHECKING:
    from app.batches.results import ResultItem

Row = dict[str, Any]
__all__ = ["anthropic_batch_id", "openai_batch_id", "parse_batch_id", "parse_file_id"]  # for the views' callers
_STOPPED = {"batch_cancelled", "batch_expired"}  # error codes of items that never got an answer


def openai_batch(row: Row, counts: dict[str, int], files: dict[str, UUID], *, model: str | None = None,
                 usage: Row | None = None) -> dict[str, Any]:
    """OpenAI's Batch object. FILES: the batch's output and error file ids by kind; MODEL: the one its requests
    name (the first's); USAGE: its summed tokens, once ended (null before; Relay keeps no reasoning-token count)."""
    ended, cancelled = row["finished_at"] is not None, row["status"] == "cancelled"
    failed = counts.get("discarded", 0) + counts.get("cancelled", 0)
    expired = ended and not cancelled and counts.get("expired", 0) > 0
    status = ("cancelled" if ended else "cancelling") if cancelled else \
        ("expired" if expired else "completed") if ended else "in_progress"
    finished = unix(row["finished_at"])
    return {
        "id": openai_batch_id(row["id"]), "object": "batch", "endpoint": row["endpoint"],
        "input_file_id": file_id(row["input_file_id"]) if row["input_file_id"] else None,
        "completion_window": row["completion_window"], "status": status, "errors": None,
        "output_file_id": file_id(files["output"]) if ended and counts.get("completed") and "output" in files
        else None,
        "error_file_id": file_id(files["error"]) if ended and failed and "error" in files else None,
        "created_at": unix(row["created_at"]), "in_progress_at": unix(row["created_at"]),
        "expires_at": unix(row.get("expires_at")),
        "finalizing_at": finished if status in ("completed", "expired") else None,
        "completed_at": finished if status == "completed" else None, "failed_at": None,
        "expired_at": finished if expired else None, "cancelling_at": unix(row["cancelled_at"]),
        "cancelled_at": finished if cancelled and ended else None,
        "request_counts": {"total": row["total"], "completed": counts.get("completed", 0), "failed": failed},
        "metadata": row["metadata"], "model": model, "usage": _openai_usage(usage) if usage is not None else None,
    }


def _openai_usage(usage: Row) -> dict[str, Any]:
    tokens_in, tokens_out = int(usage["input_tokens"]), int(usage["output_tokens"])
    return {"input_tokens": tokens_in, "input_tokens_details": {"cached_tokens": int(usage["cached_tokens"])},
            "output_tokens": tokens_out, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": tokens_in + tokens_out}


def anthropic_batch(row: Row, counts: dict[str, int]) -> dict[str, Any]:
    """Anthropic's MessageBatch object; `results_url` (relative: the SDK joins it to its base URL, so it always
    points at the Relay it called) once processing has ended."""
    ended, expired = row["finished_at"] is not None, counts.get("expired", 0)
    status = "ended" if ended else ("canceling" if row["status"] == "cancelled" else "in_progress")
    batch_id = anthropic_batch_id(row["id"])
    return {
        "id": batch_id, "type": "message_batch", "processing_status": status,
        "request_counts": {"processing": counts.get("queued", 0) + counts.get("running", 0),
                           "succeeded": counts.get("completed", 0), "errored": counts.get("discarded", 0),
                           "canceled": counts.get("cancelled", 0) - expired, "expired": expired},
        "created_at": rfc3339(row["created_at"]), "expires_at": rfc3339(row.get("expires_at")),
        "ended_at": rfc3339(row["finished_at"]), "cancel_initiated_at": rfc3339(row["cancelled_at"]),
        "archived_at": None, "results_url": f"/v1/messages/batches/{batch_id}/results" if ended else None,
    }


def openai_list(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    """OpenAI's list envelope: `first_id` and `last_id` are strings, empty on an empty page (the contract's type)."""
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else "",
            "last_id": data[-1]["id"] if data else "", "has_more": has_more}


def openai_file(row: Row) -> dict[str, Any]:
    """OpenAI's File object."""
    return {"id": file_id(row["id"]), "object": "file", "bytes": row["bytes"], "created_at": unix(row["created_at"]),
            "filename": row["filename"], "purpose": row["purpose"], "status": "processed",
            "expires_at": unix(row.get("expires_at")),
            "status_details": None}


def openai_result_line(batch_id: UUID, item: ResultItem) -> bytes:
    """One line of an output or error file; a completed item's stored response is spliced in as its bytes."""
    if item.state == "completed":
        hex_id, text_id = _request_id_parts(batch_id)
        return (b'{"id":"batch_req_%s_%d","custom_id":%s,"response":{"status_code":200,"request_id":"%s:%d","body":%s},'
                b'"error":null}\n' % (hex_id, item.idx, json.dumps(item.custom_id).encode(), text_id, item.idx,
                                       item.response or b"null"))
    line: dict[str, Any] = {"id": f"batch_req_{batch_id.hex}_{item.idx}", "custom_id": item.custom_id,
                            "response": None, "error": None}
    if item.error_code in _STOPPED:
        line["error"] = {"code": item.error_code, "message": item.error}
    else:
        status = item.status or 500
        line["response"] = {"status_code": status, "request_id": f"{batch_id}:{item.idx}",
                            "body": openai_error_body(status, item.error_code or "internal_error",
                                                      item.error or "failed")}
    return _jsonl(line)


@lru_cache(maxsize=64)
def _request_id_parts(batch_id: UUID) -> tuple[bytes, bytes]:
    """The batch's id as its output lines spell it (hex, and text), made once per batch rather than per line."""
    return batch_id.hex.encode(), str(batch_id).encode()


def anthropic_result_line(item: ResultItem) -> bytes:
    """One line of a message batch's results; a completed item's stored response is spliced in as its bytes."""
    if item.state == "completed":
        return b'{"custom_id":%s,"result":{"type":"succeeded","message":%s}}\n' % (
            json.dumps(item.custom_id).encode(), item.response or b"null")
    if item.error_code == "batch_expired":
        result: dict[str, Any] = {"type": "expired"}
    elif item.state == "cancelled":
        result = {"type": "canceled"}
    else:
        result = {"type": "errored", "error": ANTHROPIC.error_body(item.status or 500, item.error_code or
                                                                   "internal_error", item.error or "failed")}
    return _jsonl({"custom_id": item.custom_id, "result": result})


def openai_cut_line(cut: RelayError) -> bytes:
    """The last line of an output or error file a delete cut short: no request's, an error saying so."""
    error = cut.to_dict()["error"]  # Relay's error object: code and message
    return _jsonl({"id": None, "custom_id": None, "response": None, "error": error})


def anthropic_cut_line(cut: RelayError) -> bytes:
    """The last line of message batch results a delete cut short: no request's, an error saying so."""
    return _jsonl({"custom_id": None, "result": {"type": "errored", "error": ANTHROPIC.error_body(
        cut.status, cut.code, cut.message)}})


def _jsonl(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"
