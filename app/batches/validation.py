"""What makes a batch or one of its items invalid: the envelope (marshmallow) and each item (the shape adapters)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from marshmallow import ValidationError

from adapters import get_adapter
from adapters.canonical import validate_canonical
from adapters.embeddings import ADAPTER as EMBEDDINGS
from adapters.fields import MAX_CHOICES, MAX_TOKEN_LIMIT
from adapters.registry import SHAPES
from schemas.batches import BatchEnvelopeSchema

MAX_ERRORS = 1000  # item errors listed in one 400 answer
MAX_METADATA_BYTES = 16 * 1024
MAX_METADATA_DEPTH = 16  # levels of objects and arrays in `metadata` (a deeper one could not be read back)
_ENVELOPE = BatchEnvelopeSchema()
_EMBEDDINGS_ONLY = ("encoding_format", "dimensions")  # fields only an embeddings request has
_CANONICAL_ONLY = ("max_tokens", "instructions")  # canonical fields that an embeddings body does not have
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")  # JSON text that may decode to a lone surrogate
# A request body has no custom_id (the upstream would refuse the unknown member): Relay's own batches key their items
# by idx, the OpenAI and Anthropic batch APIs by the custom_id beside each body.
NO_CUSTOM_ID = ("is not a member of a request body: a batch item is known by its idx here; to key results by"
                " custom_id, create the batch through the OpenAI or Anthropic batch API (custom_id beside each body)")


class UnsupportedNumber(ValueError):
    """NaN, Infinity or a number past a double's range: Python's json reads them, JSON, upstreams and Postgres
    do not."""


def _refuse_constant(name: str) -> Any:
    raise UnsupportedNumber(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise UnsupportedNumber(f"the number {text[:40]} is out of range")
    return value


# Every request body Relay reads is decoded by this: strict JSON (RFC 8259) numbers only.
STRICT_JSON = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def json_problem(exc: ValueError) -> str:
    """Why STRICT_JSON refused a text: a syntax error with its place, a non-finite number, or an integer past
    Python's 4,300-digit limit."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    return str(exc)


@dataclass(frozen=True)
class ItemError:
    idx: int | None  # None for the envelope
    field: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"idx": self.idx, "field": self.field, "message": self.message}


def validate_envelope(envelope: dict[str, Any], *, has_requests: bool) -> list[ItemError]:
    """Errors of the top-level members: `shape`, `metadata`, and `requests` being an array."""
    errors: list[ItemError] = []
    try:
        _ENVELOPE.load({k: v for k, v in envelope.items() if k != "requests"})
    except ValidationError as exc:
        messages = exc.messages if isinstance(exc.messages, dict) else {"": exc.messages}
        for name, problems in messages.items():
            errors.append(ItemError(None, str(name), "; ".join(_flatten(problems))))
    if not has_requests:
        problem = "must be an array of request bodies" if "requests" in envelope else "is required"
        errors.append(ItemError(None, "requests", problem))
    metadata = envelope.get("metadata")
    if isinstance(metadata, dict) and json_depth(metadata) > MAX_METADATA_DEPTH:
        errors.append(ItemError(None, "metadata", f"must nest at most {MAX_METADATA_DEPTH} levels deep"))
    elif isinstance(metadata, dict) and len(json.dumps(metadata)) > MAX_METADATA_BYTES:
        errors.append(ItemError(None, "metadata", f"must be at most {MAX_METADATA_BYTES} bytes as JSON"))
    elif isinstance(metadata, dict) and (unstorable := text_problem(metadata)):
        errors.append(ItemError(None, "metadata", unstorable))
    return errors


def envelope_options(envelope: dict[str, Any]) -> dict[str, Any]:
    """The envelope's members beyond `shape`, `metadata` and `requests` (e.g. `completion_window`) that were
    given, as the schema loads them; call it once validate_envelope() found nothing wrong."""
    loaded = _ENVELOPE.load({k: v for k, v in envelope.items() if k != "requests"})
    return {k: v for k, v in loaded.items() if k not in ("shape", "metadata") and v is not None}


def item_errors(shape: str, idx: int, item: Any, *, may_hold_surrogates: bool = False) -> list[ItemError]:
    """Why ITEM cannot be a request of SHAPE in a batch; empty when it can.

    MAY_HOLD_SURROGATES: the item's JSON text has a surrogate escape (\\udXXX); only then is it walked for an
    unpaired one, which no upstream request could encode.
    """
    if not isinstance(item, dict):
        return [ItemError(idx, "", "must be a JSON object (a request body)")]
    model = item.get("model")
    if isinstance(model, str) and ("\x00" in model or not model.isascii()) and (problem := text_problem(model)):
        return [ItemError(idx, "model", problem)]  # the model name is stored with the item
    if may_hold_surrogates and (problem := text_problem(item, nul=False)):
        return [ItemError(idx, "", problem)]
    if item.get("stream") not in (None, False):
        return [ItemError(idx, "stream", "must not be set: batch responses are stored whole, never streamed")]
    if "custom_id" in item:
        return [ItemError(idx, "custom_id", NO_CUSTOM_ID)]
    if _is_embeddings(shape, item):
        return [ItemError(idx, "", "embeddings requests cannot be batched")]
    problems = get_adapter(shape).validate_request(item)
    if _is_canonical(shape, item, bool(problems)):
        return [ItemError(idx, "", "canonical /v1/generate bodies cannot be batched: "
                                   f"send the request in the {shape} shape")]
    return [ItemError(idx, p.field, p.message) for p in problems] or _limit_errors(shape, idx, item)


def _limit_errors(shape: str, idx: int, item: dict[str, Any]) -> list[ItemError]:
    """An output limit or `n` past what any provider takes (the typed path's TokenLimit and Choices): refused at
    submit and estimate alike, so a cost bound is always a number a price can multiply."""
    adapter = get_adapter(shape)
    caps = dict.fromkeys(adapter.output_limit_fields, MAX_TOKEN_LIMIT)
    if adapter.choices_field is not None:
        caps[adapter.choices_field] = MAX_CHOICES
    return [ItemError(idx, name, f"must be at most {cap}") for name, cap in caps.items()
            if isinstance(item.get(name), int) and not isinstance(item[name], bool) and item[name] > cap]



def typed_item_needs_no_checks(item: Any) -> bool:
    """Whether an item its shape's batch_item_type decoded is valid as it is: its model name can be stored (ASCII,
    no NUL, not blank), it does not stream, and the name cannot make it an embeddings request (_is_embeddings)."""
    model = item.model
    return (model.isascii() and "\x00" not in model and not model.isspace() and bool(model)
            and not item.stream and "embedding" not in model.lower())

def text_problem(value: Any, *, nul: bool = True) -> str | None:
    """Why VALUE's strings (keys included) cannot be stored or sent as UTF-8 text: an unpaired surrogate, or (when
    NUL) a NUL character, which Postgres text and jsonb refuse. None when they can."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if nul and "\x00" in item:
                return "must not contain NUL characters (\\u0000)"
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "must not contain unpaired surrogates (\\ud800-\\udfff)"
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def json_depth(value: Any) -> int:
    """How many levels of objects and arrays VALUE nests (0 for a scalar), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _is_embeddings(shape: str, item: dict[str, Any]) -> bool:
    """An embeddings request (model + input, or an embeddings-only field or model) sent as a batch item."""
    if "messages" in item or EMBEDDINGS.validate_request(item) or any(name in item for name in _CANONICAL_ONLY):
        return False
    model = item.get("model")
    named = isinstance(model, str) and "embedding" in model.lower()
    if get_adapter(shape).bare_input:  # model + input is also a valid body of SHAPE
        return named or any(name in item for name in _EMBEDDINGS_ONLY)
    return True


def _is_canonical(shape: str, item: dict[str, Any], invalid_for_shape: bool) -> bool:
    """A /v1/generate body: invalid in SHAPE but valid canonical, or carrying a canonical-only field."""
    if validate_canonical(item):
        return False
    if invalid_for_shape:
        return True
    return any(name in item for name in get_adapter(shape).canonical_markers)


def _flatten(problems: Any) -> list[str]:
    if isinstance(problems, dict):
        return [f"{k}: {m}" for k, v in problems.items() for m in _flatten(v)]
    if isinstance(problems, list):
        return [str(p) for p in problems]
    return [str(problems)]


__all__ = ["MAX_ERRORS", "NO_CUSTOM_ID", "SHAPES", "STRICT_JSON", "SURROGATE_ESCAPE", "ItemError", "UnsupportedNumber",
           "item_errors", "json_depth", "json_problem", "text_problem", "typed_item_needs_no_checks",
           "validate_envelope"]
