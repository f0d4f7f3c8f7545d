"""The pipeline's input and output: what a live route or a batch item hands to app.pipeline.run_inference."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from adapters.base import Usage
from app.auth_model import Caller
from app.pipeline.interrupt import Interrupter
from app.pipeline.ratelimit import Reservation
from app.usage.writer import UsageRecord


@dataclass
class InferenceCall:
    shape: str  # request shape: openai | anthropic | openai_responses | canonical | embeddings
    body: dict[str, Any]  # the parsed request body, as the caller sent it
    caller: Caller
    policy_id: UUID  # live: the caller's policy; batch: the policy recorded on the batch
    source: str  # live | batch
    request_id: str
    route: str = ""
    batch_id: UUID | None = None
    batch_idx: int | None = None
    custom_id: str | None = None  # the batch item's custom_id, carried to its usage event
    deadline: float | None = None  # time.monotonic() by which the call must end
    interrupter: Interrupter | None = None  # lets another thread stop the upstream call
    started_at: float = 0.0  # time.time() when the call began (set by the pipeline if 0)
    record_later: bool = False  # batch items: the usage record is left in `pending` for the item's final commit
    pending: UsageRecord | None = None  # with record_later: the call's usage record, once it ended or was refused
    sent: bool = False  # an upstream request was started (a failure after it must not be retried)
    reservation: Reservation | None = None  # admitted to the rate limits already (a paced batch item, before claim)


@dataclass
class InferenceResult:
    status: int  # the status to answer with (the upstream's on pass-through)
    body: bytes | None = None  # the whole response body, for non-streamed answers
    stream: Iterator[bytes] | None = None  # SSE bytes as they arrive; usage is recorded when it ends
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    error_code: str | None = None  # set when status is not 2xx
    usage: Usage = field(default_factory=Usage)
