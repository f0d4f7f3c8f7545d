"""Admin API (batches): every owner's batches, for the operator and for users whose key was revoked or rotated
(whose batches no inference credential reaches any more); the workers alive and the item queue's depth.

The same service functions as /v1/batches, called without a caller (the operator sees any owner's batch).
"""

from __future__ import annotations

from typing import Any

from flask.typing import ResponseReturnValue
from flask_smorest import Blueprint
from marshmallow import RAISE

from app.api.admin_auth import documented, require_admin, runtime
from app.api.batches import RESULTS_ANSWER, results_response
from app.batches import service
from app.batches.fleet import fleet_status
from schemas.admin_batches import AdminBatchListArgs, AdminBatchListSchema, FleetSchema
from schemas.batches import (
    BatchItemDetailSchema,
    BatchItemsArgs,
    BatchResultsArgs,
    BatchResultsSchema,
    BatchSchema,
)

blp = Blueprint("admin-batches", __name__, url_prefix="/admin",
                description="Every owner's batches, the workers and the item queue (admin token)")
blp.before_request(require_admin)


@blp.route("/batches", methods=["GET"])
@documented(blp, "Every owner's batches, newest first, filtered by principal, credential, policy, time, status")
@blp.arguments(AdminBatchListArgs, location="query", unknown=RAISE)
@blp.response(200, AdminBatchListSchema)
def list_batches(args: dict[str, Any]) -> ResponseReturnValue:
    return service.list_all_batches(runtime(), **args)


@blp.route("/batches/<batch_id>", methods=["GET"])
@documented(blp, "Any batch: status, counts per item state, a page of items", 404)
@blp.arguments(BatchItemsArgs, location="query", unknown=RAISE)
@blp.response(200, BatchSchema)
def get_batch(args: dict[str, Any], batch_id: str) -> ResponseReturnValue:
    return service.get_batch(runtime(), None, batch_id, state=args["state"], after=args["after"], limit=args["limit"],
                             custom_id=args["custom_id"])


@blp.route("/batches/<batch_id>/items/<idx>", methods=["GET"])
@documented(blp, "One item of any batch: its state, error, request body and response", 404)
@blp.response(200, BatchItemDetailSchema)
def get_item(batch_id: str, idx: str) -> ResponseReturnValue:
    return service.get_item(runtime(), None, batch_id, idx)


@blp.route("/batches/<batch_id>/results", methods=["GET"])
@documented(blp, "Any batch's results in idx order, streamed (JSON, or JSON Lines with ?format=jsonl)", 404)
@blp.arguments(BatchResultsArgs, location="query", unknown=RAISE)
@blp.response(200, BatchResultsSchema, content_type="application/json")
@blp.doc(responses=RESULTS_ANSWER)
def results(args: dict[str, Any], batch_id: str) -> ResponseReturnValue:
    return results_response(None, batch_id, args["format"], merged=args["merged"])


@blp.route("/batches/<batch_id>/cancel", methods=["POST"])
@documented(blp, "Cancel any batch: queued items never run, running ones are stopped (idempotent)", 404)
@blp.response(200, BatchSchema)
def cancel(batch_id: str) -> ResponseReturnValue:
    return service.cancel_batch(runtime(), None, batch_id)


@blp.route("/workers", methods=["GET"])
@documented(blp, "Worker processes from their heartbeats (alive or not) and the item queue's depth")
@blp.response(200, FleetSchema)
def workers() -> ResponseReturnValue:
    return fleet_status(runtime())
