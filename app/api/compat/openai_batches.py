"""OpenAI-compatible Files (`/v1/files`, `/openai/v1/files`) and Batches (`/openai/v1/batches`; `/v1/batches`
dispatches here from app/api/batches.py). Errors in OpenAI's shape, with Relay's stable code."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any, cast

from flask import Response, request, stream_with_context
from flask.typing import ResponseReturnValue
from flask_smorest import Blueprint
from marshmallow import ValidationError
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.formparser import FormDataParser

from app.api.callers import request_caller
from app.api.compat.common import SMALL_BODY, answer, json_object, load_object, routes, runtime, shape_errors
from app.api.idempotency import idempotent
from app.api.openapi import error_answers
from app.auth_model import Caller
from app.compat import openai_files, openai_view
from app.compat.errors import FileTooLarge, FormTooLarge
from app.compat.openai_view import file_disk
from app.errors import RelayError, ValidationFailed
from app.payload_port import StagedFile, UploadStore
from schemas.compat import (
    MULTIPART_FILE,
    ExpiresAfterSchema,
    FileListArgs,
    OpenAIBatchCreateSchema,
    OpenAIBatchListSchema,
    OpenAIBatchSchema,
    OpenAIFileDeletedSchema,
    OpenAIFileListSchema,
    OpenAIFileSchema,
    OpenAIListArgs,
)
from schemas.inference import ShapedErrorSchema

blp = Blueprint("openai_batches", __name__,
                description="OpenAI-compatible Files and Batches, run by Relay's own batch workers")
shape_errors(blp, "openai")

PREFIXES = ("/v1", "/openai/v1")
_FORM_OVERHEAD = 1 << 20  # multipart boundaries and the `purpose` field, beyond the file itself
# The most a text field (`purpose`) or a part's headers may hold. werkzeug checks it against each 64 KiB read of
# the body plus what it held back from the one before (up to a boundary's length when a line break ends it), so
# it must be well above 64 KiB: at 64 KiB, an upload whose line break fell near the end of a read was refused.
_FORM_FIELD_LIMIT = 1 << 20
_OCTETS = "application/octet-stream"


def _paths(suffix: str) -> list[str]:
    return [prefix + suffix for prefix in PREFIXES]


# -- files ------------------------------------------------------------------------------------------------------

@routes(blp, _paths("/files"), ["POST"])
@idempotent
@blp.doc(summary="Upload a batch input file (multipart: file, purpose=batch)",
         requestBody={"required": True, "content": {"multipart/form-data": {"schema": MULTIPART_FILE}}})
@blp.response(200, OpenAIFileSchema)
def upload_file() -> ResponseReturnValue:
    caller = request_caller()
    staged, filename, form = _receive_upload(file_disk(runtime()), runtime().settings.files_max_bytes)
    try:
        expiry = _expires_after(form)
    except ValidationFailed:
        file_disk(runtime()).discard(staged)
        raise
    return openai_files.upload(runtime(), caller, staged, filename=filename, purpose=form.get("purpose", ""),
                               expires_after_s=expiry)


def _expires_after(form: Mapping[str, str]) -> int | None:
    """The upload's `expires_after` (the SDK sends `expires_after[anchor]` and `expires_after[seconds]`): its
    seconds, None without one; 400 naming `expires_after` when it is not OpenAI's."""
    given: dict[str, Any] = {name: form[f"expires_after[{name}]"] for name in ("anchor", "seconds")
                             if f"expires_after[{name}]" in form}
    if not given:
        return None
    if str(given.get("seconds", "")).isdigit():
        given["seconds"] = int(given["seconds"])  # a form's text; ExpiresAfterSchema takes JSON's integer
    try:
        return ExpiresAfterSchema().load(given)["seconds"]  # type: ignore[no-any-return]
    except ValidationError as exc:
        raise ValidationFailed(message=f"invalid expires_after: {exc.messages}",
                               details={"expires_after": exc.messages}) from None


def _receive_upload(disk: UploadStore, limit: int) -> tuple[StagedFile, str, Mapping[str, str]]:
    """Parse the multipart body, writing its file part straight into the file store's staging folder (no copy
    in memory or in a temporary file); the staged `file` part, its name and the form's text fields."""
    request.max_content_length = limit + _FORM_OVERHEAD  # werkzeug answers 413 past it, chunked bodies included
    staged: list[StagedFile] = []

    def stream_factory(*_: Any, **__: Any) -> Any:
        staged.append(disk.stage())
        return staged[-1].handle

    parser = FormDataParser(stream_factory=stream_factory, max_form_memory_size=_FORM_FIELD_LIMIT,
                            max_form_parts=16)
    chosen = None
    try:
        _, form, files = parser.parse(cast(IO[bytes], _UploadBody(limit)), request.mimetype, request.content_length,
                                      request.mimetype_params)
        upload = files.get("file")
        chosen = next((s for s in staged if upload is not None and s.handle is upload.stream), None)
        if chosen is None or upload is None:
            raise ValidationFailed(message="send the file as the multipart field `file`")
        return chosen, upload.filename or "", form
    except RequestEntityTooLarge as exc:  # the body passed the limit in _UploadBody, so it is the form's own
        raise FormTooLarge(message=f"a form holds at most 16 parts, and a text field or a part's headers at most"
                                   f" {_FORM_FIELD_LIMIT} bytes") from exc
    finally:
        for other in staged:
            if other is not chosen:
                disk.discard(other)


class _UploadBody:
    """The request body for the form parser: past the size limit (werkzeug's 413, declared or streamed) it is the
    file's `file_too_large`, told apart from the form parser's own limits."""

    def __init__(self, limit: int) -> None:
        self._limit = limit

    def read(self, size: int = -1) -> bytes:
        try:
            return request.stream.read(size)
        except RequestEntityTooLarge as exc:
            raise FileTooLarge(message=f"a file holds at most {self._limit} bytes") from exc


@routes(blp, _paths("/files"), ["GET"])
@blp.doc(summary="Your files: batch inputs, and the output and error files of your ended batches")
@blp.arguments(FileListArgs, location="query")
@blp.response(200, OpenAIFileListSchema)
def list_files(args: dict[str, Any]) -> ResponseReturnValue:
    return openai_files.list_files(runtime(), request_caller(), **args)


@routes(blp, _paths("/files/<file_id>"), ["GET"])
@blp.doc(summary="A file")
@blp.response(200, OpenAIFileSchema)
def get_file(file_id: str) -> ResponseReturnValue:
    return openai_files.retrieve(runtime(), request_caller(), file_id)


@routes(blp, _paths("/files/<file_id>"), ["DELETE"])
@blp.doc(summary="Delete a file")
@blp.response(200, OpenAIFileDeletedSchema)
def delete_file(file_id: str) -> ResponseReturnValue:
    return openai_files.delete(runtime(), request_caller(), file_id)


@routes(blp, _paths("/files/<file_id>/content"), ["GET"])
@blp.doc(summary="A file's bytes (output and error files: JSON Lines generated from the batch's results)")
@blp.response(200, content_type=_OCTETS, description="the file's bytes")
def file_content(file_id: str) -> ResponseReturnValue:
    chunks = openai_files.content(runtime(), request_caller(), file_id)
    return Response(stream_with_context(chunks), status=200, mimetype=_OCTETS)


# -- batches (the /v1/batches routes call the functions below from app/api/batches.py) -----------------------------

@routes(blp, ["/openai/v1/batches"], ["POST"])
@idempotent
@blp.doc(summary="Create a batch from an uploaded file",
         requestBody={"required": True, "content": {"application/json": {"schema": OpenAIBatchCreateSchema}}})
@error_answers(blp, 409, schema=ShapedErrorSchema)
@blp.response(200, OpenAIBatchSchema)
def create_batch() -> ResponseReturnValue:
    caller = request_caller()
    return openai_view.create_batch(runtime(), caller, json_object(OpenAIBatchCreateSchema()))


@routes(blp, ["/openai/v1/batches"], ["GET"])
@blp.doc(summary="Your OpenAI batches, newest first")
@blp.arguments(OpenAIListArgs, location="query")
@blp.response(200, OpenAIBatchListSchema)
def list_batches(args: dict[str, Any]) -> ResponseReturnValue:
    return openai_view.list_batches(runtime(), request_caller(), after=args["after"], limit=args["limit"])


@routes(blp, ["/openai/v1/batches/<batch_id>"], ["GET"])
@blp.doc(summary="A batch in OpenAI's format")
@blp.response(200, OpenAIBatchSchema)
def get_batch(batch_id: str) -> ResponseReturnValue:
    return openai_view.get_batch(runtime(), request_caller(), batch_id)


@routes(blp, ["/openai/v1/batches/<batch_id>/cancel"], ["POST"])
@blp.doc(summary="Cancel a batch: queued requests never run, running ones are stopped; 409 batch_finished once it"
                 " is completed, expired or cancelled")
@error_answers(blp, 409, schema=ShapedErrorSchema)
@blp.response(200, OpenAIBatchSchema)
def cancel_batch(batch_id: str) -> ResponseReturnValue:
    return openai_view.cancel_batch(runtime(), request_caller(), batch_id)


def is_create_body(raw: bytes | bytearray) -> bool:
    """Whether a `POST /v1/batches` body is OpenAI's create (it names `input_file_id`) rather than Relay's own."""
    if len(raw) > SMALL_BODY or b'"input_file_id"' not in raw:
        return False
    try:
        return "input_file_id" in load_object(raw)
    except RelayError:  # not a JSON object: Relay's own submit answers it
        return False


def create_answer(caller: Caller, raw: bytes | bytearray) -> ResponseReturnValue:
    """The OpenAI create through `POST /v1/batches`, answered in OpenAI's format (errors included)."""
    return answer("openai", lambda: openai_view.create_batch(runtime(), caller,
                                                             load_object(raw, OpenAIBatchCreateSchema())))


def get_answer(caller: Caller, batch_id: str) -> ResponseReturnValue:
    return answer("openai", lambda: openai_view.get_batch(runtime(), caller, batch_id))


def cancel_answer(caller: Caller, batch_id: str) -> ResponseReturnValue:
    return answer("openai", lambda: openai_view.cancel_batch(runtime(), caller, batch_id))


def list_answer(caller: Caller, after: str | None, limit: int) -> ResponseReturnValue:
    return answer("openai", lambda: openai_view.list_batches(runtime(), caller, after=after, limit=limit))


def row_answer(row: dict[str, Any]) -> ResponseReturnValue:
    """The OpenAI batch of a row already read through `GET /v1/batches/{id}`, in OpenAI's format."""
    return answer("openai", lambda: openai_view.batch_of_row(runtime(), row))
