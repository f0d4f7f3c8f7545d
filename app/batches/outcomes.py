"""How a batch item ends: every outcome the product page names, one constructor each.

An item is `completed`, `cancelled`, or `discarded` with an error text (never the upstream's error body) when:
1. the upstream answers non-2xx, or every key of the chosen host fails  → `upstream_error`, `pipeline_rejection`
   (`all_keys_failed`);
2. routing rejects it (unknown model, model not granted, no binding), or its shape does not match the binding
   → `pipeline_rejection` (`model_not_found`, `model_not_allowed`, `no_binding`, `cross_shape_dispatch`);
3. the policy's rate limit is spent when it runs → `pipeline_rejection` (`rate_limited`);
4. the submitting credential stopped working → `credential_stopped`;
5. the batch's policy was deleted or disabled → `policy_stopped` (`policy_deleted`, `policy_disabled`);
6. it runs longer than the item time limit → `time_limit`;
7. its request file cannot be loaded → `load_input_failed`.
Relay adds: the worker running it died (`worker_lost`), its claim was cut by a dropped connection
(`claim_interrupted`), its response could not be stored (`store_failed`), the upstream's 2xx answer is not JSON
(`invalid_upstream_response`), an unexpected error (`internal_error`), and the batch's spend cap reached before
the item started (`budget_exceeded`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.errors import RelayError


@dataclass(frozen=True)
class Outcome:
    """An item's final state, error text and code, and the status of its usage event."""

    state: str
    error: str | None = None
    error_code: str | None = None
    status: int = 200


def completed() -> Outcome:
    return Outcome("completed")


def upstream_error(status: int) -> Outcome:
    return Outcome("discarded", f"upstream returned status {status}", "upstream_error", status)


def pipeline_rejection(exc: RelayError) -> Outcome:
    """Routing, shape, rate limit or key pool refused the item (the pipeline's own error code and text)."""
    return Outcome("discarded", exc.message, exc.code, exc.status)


def credential_stopped(exc: RelayError) -> Outcome:
    return Outcome("discarded", f"the submitting credential stopped working: {exc.message}", exc.code, 401)


def policy_stopped(exc: RelayError) -> Outcome:
    """The batch's policy was deleted or disabled (routing.check_policy's code and text, as a live request's)."""
    return Outcome("discarded", exc.message, exc.code, exc.status)


def time_limit() -> Outcome:
    return Outcome("discarded", "time limit exceeded", "time_limit_exceeded", 504)


def load_input_failed(reason: object) -> Outcome:
    return Outcome("discarded", f"load input: cannot read the item's request file ({reason})", "load_input_failed",
                   500)


def cancelled_running() -> Outcome:
    return Outcome("cancelled", "cancelled while running", "batch_cancelled", 499)


def cancelled_queued() -> Outcome:
    return Outcome("cancelled", "cancelled", "batch_cancelled", 499)


def expired() -> Outcome:
    """A queued item of a provider-API batch whose completion window closed (RELAY_PROVIDER_BATCH_EXPIRY_S)."""
    return Outcome("cancelled", "expired: the batch's completion window closed before the request ran",
                   "batch_expired", 499)


def deadline_passed() -> Outcome:
    """A queued item of a Relay batch whose completion_window closed before it started (e.g. a paced batch that
    its limits could not fit in time)."""
    return Outcome("discarded", "expired: the batch's completion window closed before the item started", "expired",
                   408)


_EXPIRY: dict[str, Callable[[], Outcome]] = {}  # API name → how its items expire (registered at boot)


def expire_as(api: str, outcome: Callable[[], Outcome]) -> None:
    """Register how an item of a batch created through API ends when the batch's deadline passes before it starts
    (the compatible APIs register theirs at boot); unregistered APIs' items end as Relay's (deadline_passed)."""
    _EXPIRY[api] = outcome


def expired_for(api: str) -> Outcome:
    """How an item not started by its batch's deadline ends: as the API that created the batch says."""
    return _EXPIRY.get(api, deadline_passed)()


def budget_exceeded(bound: int | None = None) -> Outcome:
    """A queued item of a batch whose recorded cost reached its `max_cost` (soft cap), or whose cost BOUND
    (nano-dollars) does not fit beside the recorded cost (hard cap): it never starts."""
    if bound is None:
        return Outcome("discarded", "budget exceeded: the batch's recorded cost reached its max_cost before the item"
                                    " started", "budget_exceeded", 402)
    return Outcome("discarded", f"budget exceeded: the item's cost bound (${bound / 1e9:.9f}) does not fit in what"
                                " is left of the batch's max_cost", "budget_exceeded", 402)


def budget_unbounded() -> Outcome:
    """A queued item of a hard-capped batch whose output has no bound: its cost could pass the cap."""
    return Outcome("discarded", "budget exceeded: the item's cost has no bound (set max_tokens, or give the model a"
                                " max_output_tokens; max_cost_mode soft runs it)", "budget_exceeded", 402)


def worker_lost() -> Outcome:
    return Outcome("discarded", "worker lost: the worker running the item stopped", "worker_lost", 500)


def claim_interrupted() -> Outcome:
    return Outcome("discarded", "claim interrupted: the database connection dropped while the item was claimed",
                   "claim_interrupted", 503)


def store_failed(exc: RelayError) -> Outcome:
    return Outcome("discarded", f"cannot store the response: {exc.message}", exc.code, 507)


def invalid_upstream_response() -> Outcome:
    return Outcome("discarded", "the upstream's answer is not JSON", "invalid_upstream_response", 502)


def internal_error() -> Outcome:
    return Outcome("discarded", "internal error while running the item", "internal_error", 500)


def interrupted(reason: str) -> Outcome:
    """The outcome forced by an interrupt: a cancel or the time limit."""
    return cancelled_running() if reason == "cancelled" else time_limit()
