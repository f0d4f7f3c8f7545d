"""Anthropic-compatible Message Batches under `/v1/messages/batches` and `/anthropic/v1/messages/batches`.
Credentials as Anthropic's SDK sends them (`x-api-key` or `Authorization: Bearer`); errors in Anthropic's shape,
with Relay's stable code."""

from __future__ import annotations

from typing import Any

from flask import Response, stream_with_context
from flask.typing import ResponseReturnValue
from flask_smorest import Blueprint

from app.api.callers import request_caller
from app.api.compat.common import read_json_bytes, routes, runtime, shape_errors
from app.api.idempotency import idempotent
from app.api.openapi import error_answers
from app.compat import anthropic_view
from schemas.compat import (
    AnthropicBatchListSchema,
    AnthropicBatchSchema,
    AnthropicCreateSchema,
    AnthropicDeletedSchema,
    AnthropicListArgs,
    AnthropicResultSchema,
)
from schemas.inference import ShapedErrorSchema

blp = Blueprint("anthropic_batches", __name__,
                description="Anthropic-compatible Message Batches, run by Relay's own batch workers")
shape_errors(blp, "anthropic")

PREFIXES = ("/v1", "/anthropic/v1")
_JSONL = "application/x-jsonl"


def _paths(suffix: str) -> list[str]:
    return [f"{prefix}/messages/batches{suffix}" for prefix in PREFIXES]


@routes(blp, _paths(""), ["POST"])
@idempotent
@blp.doc(summary="Create a message batch",
         requestBody={"required": True, "content": {"application/json": {"schema": AnthropicCreateSchema}}})
@error_answers(blp, 409, schema=ShapedErrorSchema)
@blp.response(200, AnthropicBatchSchema)
def create_message_batch() -> ResponseReturnValue:
    caller = request_caller()
    raw = read_json_bytes(runtime().settings.batch_max_bytes)
    return anthropic_view.create_batch(runtime(), caller, raw)


@routes(blp, _paths(""), ["GET"])
@blp.doc(summary="Your message batches, newest first")
@blp.arguments(AnthropicListArgs, location="query")
@blp.response(200, AnthropicBatchListSchema)
def list_message_batches(args: dict[str, Any]) -> ResponseReturnValue:
    return anthropic_view.list_batches(runtime(), request_caller(), **args)


@routes(blp, _paths("/<batch_id>"), ["GET"])
@blp.doc(summary="A message batch")
@blp.response(200, AnthropicBatchSchema)
def get_message_batch(batch_id: str) -> ResponseReturnValue:
    return anthropic_view.get_batch(runtime(), request_caller(), batch_id)


@routes(blp, _paths("/<batch_id>"), ["DELETE"])
@blp.doc(summary="Delete a message batch whose processing has ended")
@blp.response(200, AnthropicDeletedSchema)
def delete_message_batch(batch_id: str) -> ResponseReturnValue:
    return anthropic_view.delete_batch(runtime(), request_caller(), batch_id)


@routes(blp, _paths("/<batch_id>/cancel"), ["POST"])
@blp.doc(summary="Cancel a message batch: queued requests never run, running ones are stopped; 409 batch_finished"
                 " once its processing has ended")
@error_answers(blp, 409, schema=ShapedErrorSchema)
@blp.response(200, AnthropicBatchSchema)
def cancel_message_batch(batch_id: str) -> ResponseReturnValue:
    return anthropic_view.cancel_batch(runtime(), request_caller(), batch_id)


@routes(blp, _paths("/<batch_id>/results"), ["GET"])
@blp.doc(summary="The results of an ended message batch, one JSON line per request")
@blp.response(200, AnthropicResultSchema, content_type=_JSONL, description="one result per line")
def message_batch_results(batch_id: str) -> ResponseReturnValue:
    lines = anthropic_view.results(runtime(), request_caller(), batch_id)
    return Response(stream_with_context(lines), status=200, mimetype=_JSONL)
