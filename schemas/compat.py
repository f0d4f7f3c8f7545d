"""The OpenAI Files + Batches and Anthropic Message Batches contracts: request bodies, query arguments and the
objects returned, as the official SDKs send and parse them."""

from __future__ import annotations

from typing import Any

from marshmallow import EXCLUDE, RAISE, Schema, ValidationError, fields, validate, validates

from adapters.registry import openai_batch_endpoints
from schemas.catalog import PRINTABLE
from schemas.webhooks import CallbackSchema

OPENAI_BATCH_STATUSES = ("validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling",
                         "cancelled")
MAX_METADATA_PAIRS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512
EXPIRY_RANGE_S = (3600, 2_592_000)  # OpenAI's bounds of `expires_after.seconds`: an hour to 30 days
MULTIPART_FILE = {"type": "object", "required": ["file", "purpose"], "properties": {
    "file": {"type": "string", "format": "binary", "description": "a JSONL file of {custom_id, method, url, body}"},
    "purpose": {"type": "string", "enum": ["batch"]},
    "expires_after[anchor]": {"type": "string", "enum": ["created_at"]},
    "expires_after[seconds]": {"type": "integer", "minimum": EXPIRY_RANGE_S[0], "maximum": EXPIRY_RANGE_S[1],
                               "description": "the file expires this long after its upload (default: never)"},
}}


class ExpiresAfterSchema(Schema):
    """OpenAI's file expiration policy: `seconds` (an hour to 30 days) after `anchor` (`created_at`)."""

    class Meta:
        unknown = RAISE

    anchor = fields.String(required=True, validate=validate.OneOf(("created_at",)))
    seconds = fields.Integer(required=True, strict=True, validate=validate.Range(*EXPIRY_RANGE_S))


class OpenAIBatchCreateSchema(CallbackSchema):
    """`POST /v1/batches` in OpenAI's form (a body with `input_file_id`); `callback_url` and `callback_secret` are
    Relay's (the SDK's `extra_body`)."""

    class Meta:
        unknown = RAISE

    input_file_id = fields.String(required=True, validate=validate.Length(max=100))
    endpoint = fields.String(required=True, validate=validate.Length(max=200),
                             metadata={"description": " or ".join(openai_batch_endpoints())})
    completion_window = fields.String(required=True, validate=validate.OneOf(("24h",)))
    metadata = fields.Dict(keys=fields.String(), values=fields.String(), load_default=None, allow_none=True)
    output_expires_after = fields.Nested(ExpiresAfterSchema, load_default=None, allow_none=True, metadata={
        "description": "the output and error files expire this long after the batch ends (default: never)"})

    @validates("metadata")
    def _metadata(self, value: dict[str, str] | None, **_: Any) -> None:
        if value is None:
            return
        if len(value) > MAX_METADATA_PAIRS:
            raise ValidationError(f"at most {MAX_METADATA_PAIRS} pairs")
        if any(len(k) > MAX_METADATA_KEY or len(v) > MAX_METADATA_VALUE for k, v in value.items()):
            raise ValidationError(f"keys hold at most {MAX_METADATA_KEY} characters, values {MAX_METADATA_VALUE}")
        if any("\x00" in k or "\x00" in v for k, v in value.items()):
            raise ValidationError("must not contain NUL characters")


class OpenAIListArgs(Schema):
    """`GET /v1/batches`: a page of the caller's OpenAI batches, newest first."""

    class Meta:
        unknown = RAISE

    after = fields.String(load_default=None, validate=[validate.Length(max=100), PRINTABLE],
                          metadata={"description": "the last id of the previous page"})
    limit = fields.Integer(load_default=20, validate=validate.Range(min=1, max=100))


class FileListArgs(Schema):
    """`GET /v1/files`."""

    class Meta:
        unknown = EXCLUDE

    after = fields.String(load_default=None, validate=[validate.Length(max=100), PRINTABLE])
    limit = fields.Integer(load_default=10_000, validate=validate.Range(min=1, max=10_000))
    order = fields.String(load_default="desc", validate=validate.OneOf(("asc", "desc")))
    purpose = fields.String(load_default=None, validate=[validate.Length(max=100), PRINTABLE])


class AnthropicListArgs(Schema):
    """`GET /v1/messages/batches`: newest first; `after_id` pages on, `before_id` pages back."""

    class Meta:
        unknown = EXCLUDE

    after_id = fields.String(load_default=None, validate=validate.Length(max=100))
    before_id = fields.String(load_default=None, validate=validate.Length(max=100))
    limit = fields.Integer(load_default=20, validate=validate.Range(min=1, max=1000))


class AnthropicRequestSchema(Schema):
    custom_id = fields.String(required=True, validate=validate.Regexp(r"^[a-zA-Z0-9_-]{1,64}$"))
    params = fields.Dict(required=True, metadata={"description": "a Messages request body, without `stream`"})


class AnthropicCreateSchema(Schema):
    """`POST /v1/messages/batches` (documentation: the body is scanned request by request)."""

    requests = fields.List(fields.Nested(AnthropicRequestSchema), required=True)


class RequestCountsSchema(Schema):
    total = fields.Integer()
    completed = fields.Integer()
    failed = fields.Integer()


class OpenAIBatchUsageSchema(Schema):
    input_tokens = fields.Integer()
    input_tokens_details = fields.Dict(metadata={"description": "{cached_tokens}"})
    output_tokens = fields.Integer()
    output_tokens_details = fields.Dict(metadata={"description": "{reasoning_tokens} (Relay counts none: 0)"})
    total_tokens = fields.Integer()


class OpenAIBatchSchema(Schema):
    id = fields.String()
    object = fields.Constant("batch")
    endpoint = fields.String()
    input_file_id = fields.String(allow_none=True)
    completion_window = fields.String()
    status = fields.String(validate=validate.OneOf(OPENAI_BATCH_STATUSES))
    errors = fields.Dict(allow_none=True)
    output_file_id = fields.String(allow_none=True)
    error_file_id = fields.String(allow_none=True)
    created_at = fields.Integer()
    in_progress_at = fields.Integer(allow_none=True)
    expires_at = fields.Integer(allow_none=True)
    finalizing_at = fields.Integer(allow_none=True)
    completed_at = fields.Integer(allow_none=True)
    failed_at = fields.Integer(allow_none=True)
    expired_at = fields.Integer(allow_none=True)
    cancelling_at = fields.Integer(allow_none=True)
    cancelled_at = fields.Integer(allow_none=True)
    request_counts = fields.Nested(RequestCountsSchema)
    metadata = fields.Dict(allow_none=True)
    model = fields.String(allow_none=True, metadata={"description": "the model the batch's (first) request names"})
    usage = fields.Nested(OpenAIBatchUsageSchema, allow_none=True, metadata={
        "description": "the batch's tokens, exact, once it has ended (null before)"})


class OpenAIBatchListSchema(Schema):
    object = fields.Constant("list")
    data = fields.List(fields.Nested(OpenAIBatchSchema))
    first_id = fields.String(allow_none=True)
    last_id = fields.String(allow_none=True)
    has_more = fields.Boolean()


class OpenAIFileSchema(Schema):
    id = fields.String()
    object = fields.Constant("file")
    bytes = fields.Integer()
    created_at = fields.Integer()
    filename = fields.String()
    purpose = fields.String(validate=validate.OneOf(("batch", "batch_output")))
    status = fields.String()
    expires_at = fields.Integer(allow_none=True)
    status_details = fields.String(allow_none=True)


class OpenAIFileListSchema(OpenAIBatchListSchema):
    data = fields.List(fields.Nested(OpenAIFileSchema))


class OpenAIFileDeletedSchema(Schema):
    id = fields.String()
    object = fields.Constant("file")
    deleted = fields.Boolean()


class AnthropicCountsSchema(Schema):
    processing = fields.Integer()
    succeeded = fields.Integer()
    errored = fields.Integer()
    canceled = fields.Integer()
    expired = fields.Integer()


class AnthropicBatchSchema(Schema):
    id = fields.String()
    type = fields.Constant("message_batch")
    processing_status = fields.String(validate=validate.OneOf(("in_progress", "canceling", "ended")))
    request_counts = fields.Nested(AnthropicCountsSchema)
    created_at = fields.String()
    expires_at = fields.String(allow_none=True)
    ended_at = fields.String(allow_none=True)
    cancel_initiated_at = fields.String(allow_none=True)
    archived_at = fields.String(allow_none=True)
    results_url = fields.String(allow_none=True, metadata={"description": "relative to Relay's base URL"})


class AnthropicBatchListSchema(Schema):
    data = fields.List(fields.Nested(AnthropicBatchSchema))
    has_more = fields.Boolean()
    first_id = fields.String(allow_none=True)
    last_id = fields.String(allow_none=True)


class AnthropicDeletedSchema(Schema):
    id = fields.String()
    type = fields.Constant("message_batch_deleted")


class AnthropicResultSchema(Schema):
    """One line of a message batch's results (documentation: the route streams JSON Lines)."""

    custom_id = fields.String()
    result = fields.Dict(metadata={"description": "{type: succeeded, message} | {type: errored, error} | "
                                                  "{type: canceled} | {type: expired}"})
