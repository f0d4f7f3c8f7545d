"""How the OpenAI- and Anthropic-compatible APIs show the engine's events, registered at boot (app/wiring.py): the
engine and the webhooks know no API by name.

OpenAI's batches end with OpenAI's webhook event (the status their batch object shows: cancelled, expired when
their expiry stopped requests, else completed; never failed, since Relay refuses an invalid batch at create), and
Anthropic's with Relay's event naming the batch by its Anthropic id. Items of both that their batch's expiry
stopped end `cancelled` (`batch_expired`), as those APIs count them."""

from __future__ import annotations

from typing import Any

from app.batches import outcomes
from app.webhooks.events import EventFormat, register_format, relay_event_data, relay_event_type
from schemas.batch_ids import anthropic_batch_id, openai_batch_id

Row = dict[str, Any]


def openai_event_type(batch: Row, expired: bool) -> str:
    """OpenAI's event for an ended batch (EXPIRED: its expiry stopped requests)."""
    if batch["status"] == "cancelled":
        return "batch.cancelled"
    return "batch.expired" if expired else "batch.completed"


def openai_event_data(batch: Row, counts: dict[str, int]) -> dict[str, Any]:
    """OpenAI's event data: only the batch's id, as the SDK spells it."""
    return {"id": openai_batch_id(batch["id"])}


def anthropic_event_data(batch: Row, counts: dict[str, int]) -> dict[str, Any]:
    """Relay's event data, the batch named by its Anthropic id."""
    return relay_event_data(batch, counts, batch_id=anthropic_batch_id(batch["id"]))


def register() -> None:
    """Register both APIs' event formats and expiry outcome (idempotent)."""
    register_format("openai", EventFormat(openai_event_type, openai_event_data, counts=False, expiry=True))
    register_format("anthropic", EventFormat(relay_event_type, anthropic_event_data))
    for api in ("openai", "anthropic"):
        outcomes.expire_as(api, outcomes.expired)
