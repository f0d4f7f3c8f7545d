"""The inference routes' contract as documented: a JSON object in the route's wire shape, and errors in the
caller's shape (OpenAI's error object, or Anthropic's with `type: error`), each with Relay's stable `code`."""

from __future__ import annotations

from marshmallow import INCLUDE, Schema, fields


class ShapedErrorBodySchema(Schema):
    class Meta:
        unknown = INCLUDE

    message = fields.String(required=True)
    code = fields.String(allow_none=True, metadata={"description": "Relay's stable code (an upstream's may be null)"})
    type = fields.String(metadata={"description": "the error type of the shape"})


class ShapedErrorSchema(Schema):
    """An error in the caller's shape: OpenAI's `{"error": {...}}`, or Anthropic's `{"type": "error", ...}`."""

    class Meta:
        unknown = INCLUDE

    type = fields.String(metadata={"description": "`error` (Anthropic shape)"})
    error = fields.Nested(ShapedErrorBodySchema, required=True)
