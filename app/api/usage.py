"""Usage API: events (paged, newest first), grouped summaries, and a streamed CSV / JSON Lines export.

The admin token sees every event; a relay key sees its own key value's events; an inference token sees its
user's token events (app/usage_query.py: Visibility). Anything else is a 401.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any, cast

from apispec.exceptions import DuplicateComponentNameError
from flask import Response, current_app, g, request, stream_with_context
from flask_smorest import Api, Blueprint
from marshmallow import RAISE

from app.api.openapi import error_answers, with_docs
from app.auth import authenticate, credential_from_headers
from app.cursors import EventCursor
from app.runtime import Runtime
from app.usage.queries import UsageFilter, Visibility, csv_lines, event_json, jsonl_lines, summary_json
from app.usage.store import iter_events, list_events, summarize
from schemas.usage import EventListArgs, EventPageSchema, ExportArgs, SummaryArgs, SummarySchema

MAX_SUMMARY_ROWS = 10_000
SECURITY: list[dict[str, list[str]]] = [{"adminToken": []}, {"relayCredential": []}]
EXPORT_TYPES = {"csv": "text/csv", "jsonl": "application/x-ndjson"}

blp = Blueprint("usage", __name__, url_prefix="/v1/usage",
                description="Usage events and cost: the admin token sees all, a relay key or token its own")


def register(api: Api) -> None:
    """Register the usage blueprint and the relay-credential security scheme in the OpenAPI document."""
    try:
        api.spec.components.security_scheme("relayCredential", {
            "type": "http", "scheme": "bearer", "description": "a relay key (rk_...) or inference token (rt_...)"})
    except DuplicateComponentNameError:
        pass  # another blueprint documented it already
    api.register_blueprint(blp)


def _runtime() -> Runtime:
    rt: Runtime = current_app.extensions["relay"]
    return rt


def reader_visibility() -> Visibility:
    """What this request may read: everything for the admin token, else the relay key's or token's own events."""
    runtime = _runtime()
    secret = credential_from_headers(cast("Mapping[str, str]", request.headers))
    if secret and hmac.compare_digest(secret.encode("utf-8", "replace"), runtime.settings.admin_token.encode()):
        return Visibility.everything()
    return Visibility.for_caller(authenticate(runtime, secret))


@blp.before_request
def _authenticate_reader() -> None:
    """Authenticate before the query arguments are read, so a stranger gets 401 whatever they send."""
    g.usage_visibility = reader_visibility()


def _documented(summary: str) -> Any:
    def decorate(func: Any) -> Any:
        return with_docs(error_answers(blp, 400, 401)(func), blp.doc(summary=summary, security=SECURITY))
    return decorate


@blp.route("/events")
@blp.arguments(EventListArgs, location="query", as_kwargs=False, unknown=RAISE, error_status_code=400)
@blp.response(200, EventPageSchema)
@_documented("Usage events, newest first, one page at a time (follow next_cursor); events folded by"
             " `relay usage purge` are counted by the summary only")
def list_usage_events(args: dict[str, Any]) -> dict[str, Any]:
    vis: Visibility = g.usage_visibility
    after = EventCursor.decode(args["cursor"]) if "cursor" in args else None
    limit = args["limit"]
    with _runtime().pool.connection() as conn:
        rows = list_events(conn, UsageFilter.from_args(args), vis, limit=limit + 1, after=after)
    page = rows[:limit]
    more = len(rows) > limit
    next_cursor = EventCursor(page[-1]["created_at"], page[-1]["id"]).encode() if more else None
    return {"events": [event_json(r) for r in page], "next_cursor": next_cursor}


@blp.route("/summary")
@blp.arguments(SummaryArgs, location="query", as_kwargs=False, unknown=RAISE, error_status_code=400)
@blp.response(200, SummarySchema)
@_documented("Requests, errors, tokens and cost, grouped and bucketed; totals exact to the nano-dollar, events"
             " folded into hourly sums by `relay usage purge` included")
def usage_summary(args: dict[str, Any]) -> dict[str, Any]:
    vis: Visibility = g.usage_visibility
    group_by, bucket = args["group_by"], args.get("bucket")
    with _runtime().pool.connection() as conn:
        totals, rows = summarize(conn, UsageFilter.from_args(args), vis, group_by=group_by, bucket=bucket,
                                 max_rows=MAX_SUMMARY_ROWS)
    return summary_json(totals, rows, group_by=group_by, bucket=bucket, max_rows=MAX_SUMMARY_ROWS)


@blp.route("/events/export")
@blp.arguments(ExportArgs, location="query", as_kwargs=False, unknown=RAISE, error_status_code=400)
@blp.doc(responses={"200": {"description": "every matching event, newest first, streamed",
                            "content": {t: {"schema": {"type": "string"}} for t in EXPORT_TYPES.values()}}})
@_documented("Every matching event as CSV or JSON Lines, streamed")
def export_usage_events(args: dict[str, Any]) -> Response:
    vis: Visibility = g.usage_visibility
    flt, fmt = UsageFilter.from_args(args), args["format"]
    runtime = _runtime()
    lines = csv_lines if fmt == "csv" else jsonl_lines

    response = Response(stream_with_context(lines(iter_events(runtime.pool, flt, vis))), mimetype=EXPORT_TYPES[fmt])
    response.headers["Content-Disposition"] = f'attachment; filename="usage-events.{fmt}"'
    response.headers["Cache-Control"] = "no-store"
    return response
