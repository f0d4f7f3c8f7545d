"""The provider views' pure parts: ids, status mapping, result lines, and the input conversion (no services)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.batches.errors import BatchTooLarge, InvalidBatch
from app.batches.results import ResultItem
from app.compat.inputs import from_anthropic_body, from_openai_jsonl
from app.compat.views import (
    anthropic_batch,
    anthropic_result_line,
    openai_batch,
    openai_batch_id,
    openai_result_line,
    parse_batch_id,
    parse_file_id,
)
from app.errors import InvalidJson

BATCH = uuid.UUID("12345678-1234-4234-8234-123456789abc")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _row(**changes: Any) -> dict[str, Any]:
    row = {"id": BATCH, "api": "openai", "shape": "openai", "status": "queued", "metadata": None, "total": 4,
           "endpoint": "/v1/chat/completions", "input_file_id": BATCH, "completion_window": "24h", "created_at": T0,
           "cancelled_at": None, "finished_at": None, "expires_at": None}
    return {**row, **changes}


def test_each_apis_id_and_a_plain_uuid_name_the_same_batch() -> None:
    assert parse_batch_id(openai_batch_id(BATCH)) == parse_batch_id(f"msgbatch_{BATCH.hex}") == BATCH
    assert parse_batch_id(str(BATCH)) == BATCH and parse_file_id(f"file-{BATCH.hex}") == BATCH
    for bad in ("batch_", "batch_../../etc", f"batch_{BATCH.hex}0", "file-xyz", "nope", f"msgbatch_{'g' * 32}"):
        assert parse_batch_id(bad) is None and parse_file_id(bad) is None


@pytest.mark.parametrize(("changes", "counts", "openai", "anthropic"), [
    ({}, {"queued": 3, "running": 1}, "in_progress", "in_progress"),
    ({"finished_at": T0}, {"completed": 3, "discarded": 1}, "completed", "ended"),
    ({"status": "cancelled", "cancelled_at": T0}, {"running": 1, "cancelled": 3}, "cancelling", "canceling"),
    ({"status": "cancelled", "cancelled_at": T0, "finished_at": T0}, {"cancelled": 4}, "cancelled", "ended"),
    ({"finished_at": T0}, {"completed": 1, "cancelled": 3, "expired": 3}, "expired", "ended"),
])
def test_one_batch_has_one_status_in_each_view(changes: dict[str, Any], counts: dict[str, int], openai: str,
                                               anthropic: str) -> None:
    row = _row(**changes)
    files = {"output": uuid.uuid4(), "error": uuid.uuid4()}
    seen = openai_batch(row, counts, files)
    assert seen["status"] == openai and seen["request_counts"]["total"] == 4
    assert (seen["output_file_id"] is not None) == (row["finished_at"] is not None and bool(counts.get("completed")))
    message_batch = anthropic_batch(row, counts)
    assert message_batch["processing_status"] == anthropic and sum(message_batch["request_counts"].values()) == 4
    assert (message_batch["results_url"] is not None) == (anthropic == "ended")


def test_timestamps_are_unix_seconds_for_openai_and_rfc3339_for_anthropic() -> None:
    row = _row(finished_at=T0 + timedelta(seconds=90), expires_at=T0 + timedelta(days=1))
    seen = openai_batch(row, {"completed": 4}, {})
    assert (seen["created_at"], seen["completed_at"], seen["expires_at"]) == (1767225600, 1767225690, 1767312000)
    assert anthropic_batch(row, {"completed": 4})["ended_at"] == "2026-01-01T00:01:30Z"


def _item(idx: int, custom_id: str, state: str, error: str | None, code: str | None, status: int | None,
          response: bytes | None = None) -> ResultItem:
    return ResultItem(idx, state, response, error, code, custom_id, status)


STORED = b'{"ok":1, "text":"caf\xc3\xa9"}'  # a stored response: as the upstream sent it, on one line
OUTCOMES = {
    "completed": _item(0, "a", "completed", None, None, None, STORED),
    "discarded": _item(1, "b", "discarded", "upstream returned status 400", "upstream_error", 400),
    "cancelled": _item(2, "c", "cancelled", "cancelled", "batch_cancelled", 499),
    "expired": _item(3, "d", "cancelled", "expired", "batch_expired", 499),
    "unrecorded": _item(4, "e", "discarded", "worker lost", "worker_lost", None),
}


def test_every_outcome_has_its_openai_line() -> None:
    lines = {name: json.loads(openai_result_line(BATCH, o)) for name, o in OUTCOMES.items()}
    assert lines["completed"]["response"] == {"status_code": 200, "request_id": f"{BATCH}:0",
                                              "body": {"ok": 1, "text": "café"}}
    assert lines["discarded"]["response"]["status_code"] == 400
    assert lines["discarded"]["response"]["body"]["error"]["code"] == "upstream_error"
    assert lines["cancelled"]["error"] == {"code": "batch_cancelled", "message": "cancelled"}
    assert lines["expired"]["error"]["code"] == "batch_expired" and lines["expired"]["response"] is None
    assert lines["unrecorded"]["response"]["status_code"] == 500
    assert {line["id"] for line in lines.values()} == {f"batch_req_{BATCH.hex}_{i}" for i in range(5)}
    assert all(line["custom_id"] == o.custom_id for line, o in zip(lines.values(), OUTCOMES.values(), strict=True))


def test_every_outcome_has_its_anthropic_result() -> None:
    results = {name: json.loads(anthropic_result_line(o))["result"] for name, o in OUTCOMES.items()}
    assert results["completed"] == {"type": "succeeded", "message": {"ok": 1, "text": "café"}}
    assert results["discarded"]["error"]["error"]["type"] == "invalid_request_error"
    assert results["cancelled"] == {"type": "canceled"} and results["expired"] == {"type": "expired"}
    assert results["unrecorded"]["error"]["error"]["type"] == "api_error"


def test_result_lines_splice_the_stored_response_bytes_on_one_line() -> None:
    openai = openai_result_line(BATCH, OUTCOMES["completed"])
    anthropic = anthropic_result_line(OUTCOMES["completed"])
    for line in (openai, anthropic):
        assert STORED in line and line.endswith(b"\n") and line.count(b"\n") == 1
    unseen = json.loads(openai_result_line(BATCH, _item(5, "f", "completed", None, None, None, None)))
    assert unseen["response"]["body"] is None  # a response this replica cannot read


def _line(custom_id: str, body: dict[str, Any], url: str = "/v1/chat/completions") -> bytes:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body}).encode() + b"\n"


def test_an_openai_file_becomes_a_relay_body_with_its_custom_ids() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "é"}]}
    lines = [_line("a", body), b"\n", b"   \n", _line("b", body)]
    batch = from_openai_jsonl(lines, shape="openai", endpoint="/v1/chat/completions", metadata={"k": "v"},
                              max_requests=10)
    relay = json.loads(batch.finish())
    assert relay == {"shape": "openai", "metadata": {"k": "v"}, "requests": [body, body]}
    assert batch.custom_ids == ["a", "b"] and batch.positions == [1, 4]


def test_an_openai_file_past_the_request_limit_is_refused_as_soon_as_it_passes() -> None:
    with pytest.raises(BatchTooLarge):
        from_openai_jsonl((_line(str(i), {}) for i in range(4)), shape="openai", endpoint="/v1/chat/completions",
                          metadata=None, max_requests=3)


def test_an_empty_file_is_an_invalid_batch() -> None:
    with pytest.raises(InvalidBatch, match="holds no requests"):
        from_openai_jsonl([b"\n"], shape="openai", endpoint="/v1/chat/completions", metadata=None,
                          max_requests=3).finish()


@pytest.mark.parametrize(("raw", "error"), [
    (b'{"requests": [], "x": 1}', InvalidBatch),
    (b'{"model": "x"}', InvalidBatch),
    (b'{"requests": [{"custom_id": "a", "params": {}}] } junk', InvalidJson),
    (b'{"requests": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", InvalidJson),
    (b'\xff{"requests": []}', InvalidJson),
])
def test_a_malformed_anthropic_body_is_a_400(raw: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        from_anthropic_body(raw, max_requests=10).finish()


def test_an_anthropic_body_names_every_problem_of_every_request_by_index_at_once() -> None:
    good = {"custom_id": "a", "params": {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}}
    batch = from_anthropic_body(json.dumps({"requests": [good, {**good, "custom_id": "b", "extra": 1}, good,
                                                         {"custom_id": "c", "params": {"model": "m"}}]}).encode(),
                                max_requests=10)
    with pytest.raises(InvalidBatch) as refused:
        batch.finish()
    assert [(d["index"], d["field"]) for d in refused.value.details] == [
        (1, "extra"), (2, "custom_id"), (3, "params.max_tokens"), (3, "params.messages")]
    assert refused.value.message == "invalid batch: requests[1]: extra: is not a field of a batch request (and 3 more)"
