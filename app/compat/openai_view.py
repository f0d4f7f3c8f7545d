"""OpenAI's Batch API over Relay's batches: create from an uploaded JSONL file, retrieve, list, cancel, and the
lines of a batch's output and error files. No Flask."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import psycopg

from adapters.registry import openai_batch_endpoints
from app.auth_model import Caller
from app.batches import reads
from app.batches.origin import Rerun
from app.compat import provider
from app.compat.errors import FileNotFound, InvalidInputFile, UnsupportedEndpoint
from app.compat.files import store as files_store
from app.compat.inputs import from_openai_jsonl
from app.compat.views import (
    openai_batch,
    openai_batch_id,
    openai_list,
    openai_result_line,
    parse_file_id,
)
from app.payload_backends import payload_store
from app.payload_port import FileBytesMissing, UploadStore
from app.runtime import Runtime
from app.webhooks.callbacks import callback_columns

API = "openai"


def file_disk(runtime: Runtime) -> UploadStore:
    """This process's store of uploads: its payload store's."""
    return payload_store(runtime).uploads


def create_batch(runtime: Runtime, caller: Caller, body: dict[str, Any], rerun: Rerun | None = None) -> dict[str, Any]:
    """A batch of the uploaded file BODY["input_file_id"] (already checked against the create schema); RERUN: the
    lineage of a re-run."""
    endpoint, shapes = body["endpoint"], openai_batch_endpoints()
    if endpoint not in shapes:
        refused = "embeddings requests cannot be batched" if endpoint.endswith("/embeddings") else \
            f"{endpoint} is not an endpoint Relay runs batches for"
        raise UnsupportedEndpoint(message=f"{refused}: use {' or '.join(shapes)}")
    callback = callback_columns(runtime.settings, body.get("callback_url"), body.get("callback_secret"))
    file_id = _input_file(runtime, caller, body["input_file_id"])
    try:
        handle = file_disk(runtime).open(file_id)
    except FileBytesMissing as exc:
        raise InvalidInputFile(message="the input file's bytes are not visible to this Relay replica") from exc
    with handle:
        batch = from_openai_jsonl(handle, shape=shapes[endpoint], endpoint=endpoint,
                                  metadata=body.get("metadata"),
                                  max_requests=runtime.settings.openai_batch_max_requests)
    columns = {"api": API, "endpoint": endpoint, "input_file_id": file_id,
               "completion_window": body["completion_window"], **callback}
    expiry = (body.get("output_expires_after") or {}).get("seconds")
    batch_id = provider.create(runtime, caller, batch, columns=columns,
                               also=lambda conn, new_id: _record_result_files(conn, caller.owner, new_id, expiry),
                               rerun=rerun)
    return get_batch(runtime, caller, openai_batch_id(batch_id))


def _input_file(runtime: Runtime, caller: Caller, text_id: str) -> UUID:
    """The uploaded batch input file the caller named; FileNotFound (404) when it may not see it."""
    file_id = parse_file_id(text_id)
    with runtime.pool.connection() as conn:
        row = files_store.get_file(conn, file_id, caller.owner) if file_id else None
    if row is None:
        raise FileNotFound(message="input file not found")
    if row["kind"] != "upload":
        raise InvalidInputFile(message="input_file_id must be a file uploaded with purpose batch")
    return row["id"]  # type: ignore[no-any-return]


def _record_result_files(conn: psycopg.Connection[Any], owner: str, batch_id: UUID,
                         expires_after_s: int | None) -> None:
    """The batch's output and error files, listed once it has ended (generated from its results when read) until
    EXPIRES_AFTER_S after that, if given."""
    name = openai_batch_id(batch_id)
    files_store.insert_batch_files(conn, owner, batch_id, [(uuid.uuid4(), "output", f"{name}_output.jsonl"),
                                                           (uuid.uuid4(), "error", f"{name}_error.jsonl")],
                                   expires_after_s)


def get_batch(runtime: Runtime, caller: Caller, text_id: str) -> dict[str, Any]:
    row, counts = provider.load(runtime, caller, text_id, API)
    return _view(runtime, [row], {row["id"]: counts})[0]


def batch_of_row(runtime: Runtime, row: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's batch object of an OpenAI batch's row already read (service.find_batch)."""
    return _view(runtime, [row], {row["id"]: provider.counted(runtime, row)})[0]


def cancel_batch(runtime: Runtime, caller: Caller, text_id: str) -> dict[str, Any]:
    """Cancel an in-progress batch; 409 once it is completed, expired or cancelled, in OpenAI's words."""
    row, counts = provider.cancel(runtime, caller, text_id, API, ended=lambda row, counts: (
        f"Cannot cancel a batch with status '{openai_batch(row, counts, {})['status']}'."))
    return _view(runtime, [row], {row["id"]: counts})[0]


def list_batches(runtime: Runtime, caller: Caller, *, after: str | None, limit: int) -> dict[str, Any]:
    """OpenAI's list envelope of the caller's OpenAI batches, newest first."""
    found = provider.page(runtime, caller, API, after=after, before=None, limit=limit)
    data = _view(runtime, found.rows, found.counts)
    return openai_list(data, found.has_more)


def _view(runtime: Runtime, rows: list[dict[str, Any]], counts: dict[UUID, dict[str, int]]) -> list[dict[str, Any]]:
    """OpenAI's batch objects of ROWS: with their result files, model, and (once ended) usage, exact from the
    items' usage events, summed once per batch (reads.finished_usage)."""
    ids = [row["id"] for row in rows]
    with runtime.pool.connection() as conn:
        files = files_store.batch_files(conn, ids)
        models = reads.first_models(conn, ids)
        usage = reads.finished_usage(conn, [row["id"] for row in rows if row["finished_at"] is not None])
    return [openai_batch(row, counts[row["id"]], {kind: file_id for (batch_id, kind), file_id in files.items()
                                                  if batch_id == row["id"]},
                         model=models.get(row["id"]), usage=usage.get(row["id"])) for row in rows]


def result_lines(runtime: Runtime, caller: Caller, batch_id: UUID, kind: str) -> Iterator[bytes]:
    """The lines of the batch's `output` (completed items) or `error` file (every other item), in idx order."""
    wanted = kind == "output"
    for item in provider.outcomes(runtime, caller, batch_id):
        if (item.state == "completed") == wanted:
            yield openai_result_line(batch_id, item)
