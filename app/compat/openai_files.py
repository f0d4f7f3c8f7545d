"""OpenAI's Files API: batch input uploads (bytes on disk, record in Postgres) and the output and error files of
OpenAI batches (generated from the batch's results when read). A caller sees only its own files. No Flask."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID

from app.auth_model import Caller
from app.batches.results import cut_visibly
from app.batches.validation import text_problem
from app.compat.errors import FileNotFound, FileTooLarge, UnsupportedPurpose
from app.compat.files import store
from app.compat.files.store import Conn, Row
from app.compat.openai_view import file_disk, result_lines
from app.compat.provider import joined
from app.compat.views import openai_cut_line, openai_file, openai_list, parse_file_id
from app.errors import ValidationFailed
from app.payload_port import FileBytesMissing, StagedFile
from app.runtime import Runtime

READ_CHUNK = 1 << 20
MAX_FILENAME = 255


def upload(runtime: Runtime, caller: Caller, staged: StagedFile, *, filename: str, purpose: str,
           expires_after_s: int | None = None) -> dict[str, Any]:
    """Keep STAGED (a received upload) as a batch input file, until EXPIRES_AFTER_S after now if given; its File
    object. STAGED is published or discarded. The caller's expired uploads are forgotten first."""
    disk = file_disk(runtime)
    forget_expired(runtime, caller)
    try:
        if purpose != "batch":
            raise UnsupportedPurpose(message="Relay keeps files for batches only: upload with purpose batch")
        size = staged.size()
        if size > runtime.settings.files_max_bytes:
            raise FileTooLarge(message=f"a file holds at most {runtime.settings.files_max_bytes} bytes")
        name = _filename(filename)
        file_id = uuid.uuid4()
        disk.publish(staged, file_id)
    except BaseException:
        disk.discard(staged)
        raise
    try:
        with runtime.pool.connection() as conn:
            row = store.insert_upload(conn, file_id, caller.owner, name, size, expires_after_s)
    except BaseException:
        disk.remove(file_id)
        raise
    return openai_file(row)


class InvalidFilename(ValidationFailed):
    code = "invalid_filename"


def _filename(filename: str) -> str:
    """The name to keep: its last path component, printable text of at most MAX_FILENAME characters."""
    name = filename.replace("\\", "/").rsplit("/", 1)[-1][:MAX_FILENAME] or "upload.jsonl"
    if (problem := text_problem(name)) is not None or not name.isprintable():
        raise InvalidFilename(message=f"the file name {problem or 'must be printable text'}")
    return name


def forget_expired(runtime: Runtime, caller: Caller) -> None:
    """Delete the caller's uploads past their `expires_after` with their bytes (hidden from the moment they
    expire, removed at the caller's next upload or list)."""
    with runtime.pool.connection() as conn:
        expired = store.take_expired_uploads(conn, caller.owner)
    for file_id in expired:
        file_disk(runtime).remove(file_id)


def retrieve(runtime: Runtime, caller: Caller, text_id: str) -> dict[str, Any]:
    return _with_size(runtime, caller, _row(runtime, caller, text_id))


def list_files(runtime: Runtime, caller: Caller, *, after: str | None, limit: int, order: str,
               purpose: str | None) -> dict[str, Any]:
    """OpenAI's list envelope of the caller's files (uploads, and output/error files of its ended batches)."""
    forget_expired(runtime, caller)
    cursor = parse_file_id(after) if after else None
    if after and cursor is None:
        rows: list[dict[str, Any]] = []
        more = False
    else:
        with runtime.pool.connection() as conn:
            rows = store.list_files(conn, caller.owner, purpose=purpose, after=cursor, limit=limit + 1,
                                    newest_first=order == "desc")
        more = len(rows) > limit
        rows = rows[:limit]
    data = [_with_size(runtime, caller, row) for row in rows]
    return openai_list(data, more)


def delete(runtime: Runtime, caller: Caller, text_id: str) -> dict[str, Any]:
    """Forget the file (an upload's bytes are removed; batches made from it are not affected)."""
    row = _row(runtime, caller, text_id, store.delete_file)
    if row["kind"] == "upload":
        file_disk(runtime).remove(row["id"])
    return {"id": text_id, "object": "file", "deleted": True}


def content(runtime: Runtime, caller: Caller, text_id: str) -> Iterator[bytes]:
    """The file's bytes, in chunks; access is checked before the first one."""
    row = _row(runtime, caller, text_id)
    if row["kind"] != "upload":
        return joined(cut_visibly(result_lines(runtime, caller, row["batch_id"], row["kind"]), openai_cut_line))
    try:
        handle = file_disk(runtime).open(row["id"])
    except FileBytesMissing as exc:
        raise FileNotFound(message="the file's bytes are not visible to this Relay replica") from exc
    return _chunks(handle)


def _chunks(handle: Any) -> Iterator[bytes]:
    with handle:
        while chunk := handle.read(READ_CHUNK):
            yield chunk


def _row(runtime: Runtime, caller: Caller, text_id: str,
         lookup: Callable[[Conn, UUID, str], Row | None] = store.get_file) -> Row:
    """LOOKUP's row of the caller's file TEXT_ID (reading it by default); FileNotFound when there is none."""
    file_id = parse_file_id(text_id)
    with runtime.pool.connection() as conn:
        row = lookup(conn, file_id, caller.owner) if file_id else None
    if row is None:
        raise FileNotFound(message="file not found")
    return row  # type: ignore[no-any-return]


def _with_size(runtime: Runtime, caller: Caller, row: dict[str, Any]) -> dict[str, Any]:
    """The File object; a generated file is measured once (by generating it) and its size remembered."""
    if row["bytes"] is None:
        size = sum(len(line) for line in result_lines(runtime, caller, row["batch_id"], row["kind"]))
        with runtime.pool.connection() as conn:
            store.set_bytes(conn, row["id"], size)
        row["bytes"] = size
    return openai_file(row)

