"""Batches: submit (202), read, list, stream results, cancel, delete. Only the submitter sees a batch (else 404).

The same routes serve OpenAI's Batch API (app/api/compat/openai_batches.py): a body naming `input_file_id` is OpenAI's
create; the list is OpenAI's unless `format=relay`; a batch created through the OpenAI API (or named `batch_...`)
is read and cancelled in OpenAI's format unless `format=relay`."""

from __future__ import annotations

from typing import Any

from flask import Response, current_app, request, stream_with_context
from flask.typing import ResponseReturnValue
from flask_smorest import Blueprint

from app.api.bodies import read_body, require_json
from app.api.callers import request_caller
from app.api.compat import openai_batches
from app.api.compat.common import answer, shape_errors
from app.api.idempotency import HEADER, idempotent
from app.api.openapi import error_answers
from app.auth_model import Caller
from app.batches import service
from app.batches.errors import BatchBodyTooLarge
from app.batches.estimate import estimate_batch
from app.batches.merged import open_merged_results
from app.batches.rerun import KEEP, plan_rerun, submit_once, submit_rerun
from app.batches.results import open_results
from app.compat import openai_view
from app.compat.rerun import RERUNS
from app.compat.views import openai_batch_id
from app.runtime import Runtime
from app.webhooks import service as webhook_service
from schemas.batch_estimates import BatchEstimateSchema
from schemas.batches import (
    BatchDeletedSchema,
    BatchFormatArgs,
    BatchItemDetailSchema,
    BatchItemsArgs,
    BatchListArgs,
    BatchListSchema,
    BatchRerunSchema,
    BatchResultsArgs,
    BatchResultsSchema,
    BatchSchema,
    BatchSubmitSchema,
)
from schemas.inference import ShapedErrorSchema
from schemas.webhooks import BatchDeliveriesSchema

blp = Blueprint("batches", __name__, url_prefix="/v1/batches",
                description="Batches: many inference requests run in the background by Relay's workers")
# OpenAI's SDK calls these routes too, and a wrong key, a bad query or a body that is not JSON is refused before the
# body tells whose API it is: every error is OpenAI's error object, which holds Relay's (`code`, `message`, `details`)
shape_errors(blp, "openai")

_NDJSON = "application/x-ndjson"
# The results route's 200 in both its bodies: JSON, and JSON Lines (`?format=jsonl` or `Accept:
# application/x-ndjson`). flask-smorest's alt_response of the same status documented only the JSON one.
RESULTS_ANSWER = {"200": {"description": "every item's result, in idx order", "content": {
    "application/json": {"schema": {"$ref": "#/components/schemas/BatchResults"}},
    _NDJSON: {"schema": {"type": "string", "description": "JSON Lines: one BatchResult object per line"}}}}}
SECURITY: list[dict[str, list[str]]] = [{"relayCredential": []}]


def _runtime() -> Runtime:
    return current_app.extensions["relay"]  # type: ignore[no-any-return]


@blp.route("", methods=["POST"])
@idempotent
@blp.doc(summary="Submit a batch: 400 lists every bad item; 413 for too many items or bytes, or an item larger than"
                 " a live request; 409 paced_share_too_small when the caller's policy paces batches at a share that"
                 " lets no item start", security=SECURITY, requestBody={
    "required": True, "content": {"application/json": {"schema": BatchSubmitSchema}}})
@error_answers(blp, 400, 401, 409, 413, 415, 503, 507, schema=ShapedErrorSchema)
@blp.response(202, BatchSchema)
def submit() -> ResponseReturnValue:
    """Validate every item, store the requests (one file per batch), commit the batch; 202 without waiting for the
    broker. OpenAI's create (a body naming `input_file_id`) answers 200 with OpenAI's batch object."""
    caller = request_caller()
    raw = _batch_body()
    if openai_batches.is_create_body(raw):
        return openai_batches.create_answer(caller, raw)
    return service.submit_batch(_runtime(), caller, raw), 202


def _batch_body() -> bytes | bytearray:
    """A submit's body: JSON, at most RELAY_BATCH_MAX_BYTES."""
    require_json(message="send the batch as application/json")
    return read_body(_runtime().settings.batch_max_bytes, _too_large)


@blp.route("/estimate", methods=["POST"])
@blp.doc(summary="Estimate a batch before submitting it: the submit's checks, items per model, an upper bound of"
                 " cost; nothing is stored or run",
         description="The body is a submit's. A body a submit would refuse gets the submit's own answer (400"
                     " `invalid_batch` listing every bad item, `invalid_json`, `max_cost_unpriced`; 413), so a 200"
                     " means the submit would be accepted. See docs/batches.md (Re-run, spend cap and estimate) for"
                     " how the bound is computed and what it cannot cover.", security=SECURITY, requestBody={
    "required": True, "content": {"application/json": {"schema": BatchSubmitSchema}}})
@error_answers(blp, 400, 401, 413, 415, 503, schema=ShapedErrorSchema)
@blp.response(200, BatchEstimateSchema)
def estimate() -> ResponseReturnValue:
    caller = request_caller()
    return estimate_batch(_runtime(), caller, _batch_body())


@blp.route("", methods=["GET"])
@blp.doc(summary="List your batches, newest first: OpenAI's batches in OpenAI's format, or with format=relay "
                 "every batch in Relay's view", security=SECURITY)
@blp.arguments(BatchListArgs, location="query")
@blp.response(200, BatchListSchema)
def list_batches(args: dict[str, Any]) -> ResponseReturnValue:
    caller = request_caller()
    if args["format"] == "openai":
        return openai_batches.list_answer(caller, args["after"], args["limit"])
    found = service.list_batches(_runtime(), caller, limit=args["limit"], cursor=args["cursor"],
                                 status=args["status"], finished=args["finished"], search=args["search"])
    data = found["data"]
    return {"object": "list", **found, "first_id": str(data[0]["id"]) if data else None,
            "last_id": str(data[-1]["id"]) if data else None, "has_more": found["next_cursor"] is not None}


@blp.route("/<batch_id>", methods=["GET"])
@blp.doc(summary="A batch: status, counts per item state, a page of items", security=SECURITY)
@blp.arguments(BatchItemsArgs, location="query")
@blp.response(200, BatchSchema)
def get_batch(args: dict[str, Any], batch_id: str) -> ResponseReturnValue:
    caller = request_caller()
    if _openai_named(batch_id, args["format"]):
        return openai_batches.get_answer(caller, batch_id)
    row = service.find_batch(_runtime(), caller, batch_id)  # its `api` decides the view: no other read
    if args["format"] is None and row["api"] == openai_view.API:
        return openai_batches.row_answer(row)
    return service.batch_object(_runtime(), row, state=args["state"], after=args["after"], limit=args["limit"],
                                custom_id=args["custom_id"])


@blp.route("/<batch_id>/items/<idx>", methods=["GET"])
@blp.doc(summary="One item: its state, error, request body and, once completed, the upstream's response",
         security=SECURITY)
@blp.response(200, BatchItemDetailSchema)
def get_item(batch_id: str, idx: str) -> ResponseReturnValue:
    return service.get_item(_runtime(), request_caller(), batch_id, idx)


@blp.route("/<batch_id>/results", methods=["GET"])
@blp.doc(summary="Every item's result in idx order, streamed (JSON, or JSON Lines with ?format=jsonl)",
         security=SECURITY)
@blp.arguments(BatchResultsArgs, location="query")
@blp.response(200, BatchResultsSchema, content_type="application/json")
@blp.doc(responses=RESULTS_ANSWER)
def results(args: dict[str, Any], batch_id: str) -> ResponseReturnValue:
    return results_response(request_caller(), batch_id, args["format"], merged=args["merged"])


def results_response(caller: Caller | None, batch_id: str, fmt: str | None, *, merged: bool = False) -> Response:
    """The streamed results in FMT (or as the Accept header prefers), or the merged results of the batch's re-run
    chain; a caller of None is the operator."""
    jsonl = fmt == "jsonl" or (fmt is None and _wants_ndjson())
    opened = open_merged_results if merged else open_results
    chunks = opened(_runtime(), caller, batch_id, jsonl=jsonl)
    return Response(stream_with_context(chunks), status=200,
                    mimetype=_NDJSON if jsonl else "application/json")


@blp.route("/<batch_id>/cancel", methods=["POST"])
@blp.doc(summary="Cancel a batch: queued items never run, running ones are stopped (idempotent); 409"
                 " batch_finished when every item was already final (nothing is changed)", security=SECURITY)
@error_answers(blp, 409, schema=ShapedErrorSchema)
@blp.arguments(BatchFormatArgs, location="query")
@blp.response(200, BatchSchema)
def cancel(args: dict[str, Any], batch_id: str) -> ResponseReturnValue:
    caller = request_caller()
    if _openai_named(batch_id, args["format"]) or (
            args["format"] is None and service.find_batch(_runtime(), caller, batch_id)["api"] == openai_view.API):
        return openai_batches.cancel_answer(caller, batch_id)
    return service.cancel_batch(_runtime(), caller, batch_id)


@blp.route("/<batch_id>/rerun", methods=["POST"])
@idempotent
@blp.doc(summary="Re-run what failed: a new batch of the finished batch's discarded items (or those with the"
                 " chosen error codes), with their original requests, under your current policy",
         description="The new batch records `rerun_of` and `original_id`, each item its `source_idx`; read the chain's"
                     " merged results with `GET /v1/batches/{id}/results?merged=true`. 409 `batch_not_finished` while"
                     " items are queued or running; 409 `nothing_to_rerun` when no item matches (`details.error_codes`"
                     " counts the discarded and cancelled items by code). A batch created through the OpenAI API is"
                     " re-run as an OpenAI batch of a new input file (answered in OpenAI's format unless"
                     " `format=relay`), one created through Anthropic's as a message batch.", security=SECURITY)
@error_answers(blp, 409, 413, 503, 507, schema=ShapedErrorSchema)
@blp.arguments(BatchFormatArgs, location="query")
@blp.arguments(BatchRerunSchema, required=False)
@blp.response(202, BatchSchema)
def rerun(args: dict[str, Any], body: dict[str, Any], batch_id: str) -> ResponseReturnValue:
    caller = request_caller()
    plan = plan_rerun(_runtime(), caller, batch_id, codes=body.get("codes"), metadata=body.get("metadata", KEEP),
                      max_cost=body.get("max_cost", KEEP))
    api = plan.source["api"]
    force = body.get("force", False) or request.headers.get(HEADER) is not None  # a key decides on its own
    new_id = submit_once(_runtime(), plan, lambda: RERUNS.get(api, submit_rerun)(_runtime(), caller, plan),
                         force=force)
    if (args["format"] or ("openai" if api == "openai" else "relay")) == "openai":
        return answer("openai", lambda: openai_view.get_batch(_runtime(), caller, openai_batch_id(new_id)),
                      status=202)
    return service.get_batch(_runtime(), caller, str(new_id), limit=0), 202


def _openai_named(batch_id: str, requested: str | None) -> bool:
    """Whether to answer in OpenAI's format whatever the batch: asked for, or by default for a `batch_` id (an
    OpenAI SDK's). Otherwise the batch's `api` decides: OpenAI's batches are answered in OpenAI's format unless
    `format=relay`."""
    return requested == "openai" if requested is not None else batch_id.startswith("batch_")


@blp.route("/<batch_id>/webhooks", methods=["GET"])
@blp.doc(summary="The webhook deliveries of your batch's events: each destination's state and every attempt"
                 " (time, status, latency, error)", security=SECURITY)
@error_answers(blp, 401, 404, schema=ShapedErrorSchema)
@blp.response(200, BatchDeliveriesSchema)
def webhooks(batch_id: str) -> ResponseReturnValue:
    row = service.find_batch(_runtime(), request_caller(), batch_id)  # 404 for anyone but its submitter
    return webhook_service.batch_deliveries(_runtime(), row["id"])


@blp.route("/<batch_id>", methods=["DELETE"])
@blp.doc(summary="Delete a finished batch: its items and stored requests and responses (usage events stay)",
         description="409 `batch_not_finished` while items are queued or running; afterwards the batch is 404.")
@blp.response(200, BatchDeletedSchema)
def delete(batch_id: str) -> ResponseReturnValue:
    return service.delete_batch(_runtime(), request_caller(), batch_id)


def _too_large(limit: int) -> BatchBodyTooLarge:
    return BatchBodyTooLarge(message=f"a batch body holds at most {limit} bytes")


def _wants_ndjson() -> bool:
    best = request.accept_mimetypes.best_match(["application/json", _NDJSON])
    return best == _NDJSON and request.accept_mimetypes[_NDJSON] > request.accept_mimetypes["application/json"]
