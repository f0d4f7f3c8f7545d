"""What every Relay process plugs into the batch engine at boot (the API's app factory, a worker's context, the
commands that end batches): the engine calls these, and never imports the packages they come from."""

from __future__ import annotations

from app.batches import lifecycle
from app.compat import presentation
from app.webhooks.events import record_ended


def plug_into_engine() -> None:
    """Register the end-of-batch hooks (the webhook event, recorded in the transaction that ends the batch) and the
    compatible APIs' presentations (their event formats, how their items expire); idempotent."""
    lifecycle.on_batch_end("webhooks", record_ended)
    presentation.register()
