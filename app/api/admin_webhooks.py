"""Admin API (webhooks): every delivery of every batch's event, its attempts (time, status, latency, error), and
"send again" (admin token). The event bodies are documented as the OpenAIBatchEvent and RelayBatchEvent
components."""

from __future__ import annotations

from typing import Any

from flask.typing import ResponseReturnValue
from flask_smorest import Api, Blueprint
from marshmallow import RAISE

from app.api.admin_auth import documented, require_admin, runtime
from app.webhooks import service
from schemas.webhooks import DeliveryDetailSchema, DeliveryListArgs, DeliveryListSchema, event_schemas

blp = Blueprint("admin-webhooks", __name__, url_prefix="/admin/webhooks",
                description="Webhook deliveries: each attempt, and send again (admin token)")
blp.before_request(require_admin)


def register(api: Api) -> None:
    """The blueprint, and the event bodies as components of the OpenAPI document."""
    for name, schema in event_schemas().items():
        api.spec.components.schema(name, schema=schema)
    api.register_blueprint(blp)


@blp.route("/deliveries", methods=["GET"])
@documented(blp, "Webhook deliveries, newest first: by state or by batch")
@blp.arguments(DeliveryListArgs, location="query", unknown=RAISE)
@blp.response(200, DeliveryListSchema)
def list_deliveries(args: dict[str, Any]) -> ResponseReturnValue:
    return service.list_deliveries(runtime(), **args)


@blp.route("/deliveries/<delivery_id>", methods=["GET"])
@documented(blp, "One delivery: every attempt (time, status, latency, error) and the event body it sends", 404)
@blp.response(200, DeliveryDetailSchema)
def get_delivery(delivery_id: str) -> ResponseReturnValue:
    return service.get_delivery(runtime(), delivery_id)


@blp.route("/deliveries/<delivery_id>/send-again", methods=["POST"])
@documented(blp, "Send the delivery again now: the same event and webhook-id, a new give-up window", 404)
@blp.response(202, DeliveryDetailSchema)
def send_again(delivery_id: str) -> ResponseReturnValue:
    return service.resend(runtime(), delivery_id), 202
