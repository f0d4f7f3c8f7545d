"""Errors raised by the batch service; each has a status and a stable code."""

from __future__ import annotations

from app.errors import BadRequest, Conflict, NotFound, PayloadTooLarge


class BatchNotFound(NotFound):
    """No batch with that id that this caller may see (also for malformed ids: existence is not revealed)."""

    code = "batch_not_found"


class BatchNotEnded(Conflict):
    """The batch still has queued or running items (deleting it, or reading provider results, must wait)."""

    code = "batch_not_ended"


class InvalidBatch(BadRequest):
    """The batch body or one of its items is invalid; `details` lists {idx, field, message}."""

    code = "invalid_batch"


class BatchTooLarge(PayloadTooLarge):
    """More items than RELAY_BATCH_MAX_ITEMS."""

    code = "batch_too_large"


class BatchBodyTooLarge(PayloadTooLarge):
    """More bytes than RELAY_BATCH_MAX_BYTES."""

    code = "payload_too_large"


class BatchNotFinished(Conflict):
    """The batch still has queued or running items, so it cannot be deleted yet."""

    code = "batch_not_finished"

class BatchItemTooLarge(PayloadTooLarge):
    """One item holds more bytes than the largest live request (RELAY_MAX_REQUEST_BYTES)."""

    code = "item_too_large"


class BatchAlreadyFinished(Conflict):
    """A cancel of a batch whose every item was already final: nothing is left to cancel, nothing changes."""

    code = "batch_finished"


class MaxCostUnpriced(BadRequest):
    """A batch with `max_cost` names a model with an unpriced binding: its cost could not be counted."""

    code = "max_cost_unpriced"


class PacedShareTooSmall(Conflict):
    """The caller's policy paces batches at a share of a rate limit that is less than one request or token a
    window: no item of the batch could ever start, so it is not accepted."""

    code = "paced_share_too_small"


class NothingToRerun(Conflict):
    """A re-run of a batch none of whose items match what was asked to run again; `details` counts its items by
    error code."""

    code = "nothing_to_rerun"


class ItemNotFound(NotFound):
    """The batch (which the caller may see) has no item with that idx."""

    code = "item_not_found"


class RerunExists(Conflict):
    """A re-run without an idempotency key or `force` of items that a re-run of the same batch already holds."""

    code = "rerun_exists"
