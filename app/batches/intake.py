"""Parse and validate a submitted batch body in one pass, keeping each item's raw bytes instead of its objects.

Most bodies take the typed path: msgspec finds each item's bytes, then decodes each item once into its shape's
`batch_item_type` (a subset of the valid bodies, checked in C) and once untyped (strict numbers, nesting). Anything
that path is not sure of goes to the one-pass scanner, which decides and names every bad item: the body is
scanned with the C JSON scanner item by item, each item decoded, validated and dropped. Either way only each
item's bytes are kept, so the request file holds slices of the original body (no re-serialising) and peak memory
stays near twice the body size.
"""

from __future__ import annotations

import json
import re
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec

from adapters.fields import closed_type
from adapters.registry import ADAPTERS
from app.batches.errors import BatchItemTooLarge, BatchTooLarge, InvalidBatch
from app.batches.validation import (
    MAX_ERRORS,
    STRICT_JSON,
    SURROGATE_ESCAPE,
    ItemError,
    envelope_options,
    item_errors,
    json_problem,
    typed_item_needs_no_checks,
    validate_envelope,
)
from app.errors import InvalidJson

_DECODER = STRICT_JSON
T = TypeVar("T")
_WS = re.compile(r"[ \t\n\r]*")


@dataclass
class ParsedBatch:
    """A validated batch: its envelope fields and each item's raw body and model name."""

    shape: str
    metadata: dict[str, Any] | None
    raw: bytes | bytearray  # the original body when it is ASCII (spans index it directly), else b""
    text: str  # the decoded body
    starts: array = field(default_factory=lambda: array("q"))
    ends: array = field(default_factory=lambda: array("q"))
    models: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)  # the other envelope members (validation.envelope_options)

    @property
    def count(self) -> int:
        return len(self.starts)

    def item_bodies(self) -> Iterator[bytes | bytearray]:
        """Each item's request body, as the caller sent it."""
        for start, end in zip(self.starts, self.ends, strict=True):
            yield self.raw[start:end] if self.raw else self.text[start:end].encode()


def parse_batch(raw: bytes | bytearray, *, max_items: int, max_item_bytes: int | None = None) -> ParsedBatch:
    """Decode, scan and validate a whole batch body (the scanner: what decides when typed_batch() cannot); raise
    InvalidBatch listing every bad item, BatchItemTooLarge (413) for an item of more than MAX_ITEM_BYTES (found
    without decoding past that many characters of it).

    JSON nested near the interpreter's recursion limit raises RecursionError in the decoder or in any later walk
    of it (validation, the model name, the metadata size): that is bad input, answered 400 like malformed JSON.
    """
    try:
        return _parse_batch(raw, max_items=max_items, max_item_bytes=max_item_bytes)
    except RecursionError:
        raise InvalidJson(message="the body is nested too deeply") from None


def _parse_batch(raw: bytes | bytearray, *, max_items: int, max_item_bytes: int | None) -> ParsedBatch:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidJson(message=f"the body is not valid UTF-8: {exc.reason} at byte {exc.start}") from exc
    parsed = ParsedBatch(shape="", metadata=None, raw=raw if len(raw) == len(text) else b"", text=text)
    scanner = _Scanner(parsed, max_items, max_item_bytes)
    envelope = scanner.scan_envelope()
    errors = validate_envelope(envelope, has_requests=scanner.has_requests)
    parsed.shape, parsed.metadata = str(envelope.get("shape")), envelope.get("metadata")
    if not errors:
        parsed.options = envelope_options(envelope)
        errors = scanner.item_errors()
    if errors:
        raise _invalid(errors)
    if parsed.count == 0:
        raise InvalidBatch(message="requests must not be empty",
                           details=[{"idx": None, "field": "requests", "message": "must not be empty"}])
    return parsed


class _Spans(msgspec.Struct, forbid_unknown_fields=True):
    """The envelope with each item's bytes (a member the envelope does not have sends the body to the scanner)."""

    requests: list[msgspec.Raw]
    shape: str | msgspec.UnsetType = msgspec.UNSET
    metadata: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    completion_window: Any = msgspec.UNSET  # the other envelope members: checked by validation.validate_envelope
    max_cost: Any = msgspec.UNSET
    max_cost_mode: Any = msgspec.UNSET
    callback_url: Any = msgspec.UNSET
    callback_secret: Any = msgspec.UNSET


_SPANS = msgspec.json.Decoder(_Spans)
_STRICT = msgspec.json.Decoder()  # refuses what STRICT_JSON does: NaN, 1e999, 4,301-digit integers, lone surrogates


def _without_custom_id(item_type: Any) -> Any:
    """ITEM_TYPE with a `custom_id` member that must be absent: a body that has one (which no body may: see
    validation.NO_CUSTOM_ID) fails the typed path, and the scanner names it."""
    return msgspec.defstruct(item_type.__name__, [("custom_id", msgspec.UnsetType, msgspec.UNSET)],
                             bases=(item_type,), module=__name__)


_ITEMS: dict[str, msgspec.json.Decoder[Any]] = {
    shape: msgspec.json.Decoder(_without_custom_id(adapter.batch_item_type)) for shape, adapter in ADAPTERS.items()
    if adapter.batch_item_type is not None}
# Each item decoder's type closed (closed_type): most items decode as it, once, and need no strict decode after.
_CLOSED = {items: msgspec.json.Decoder(closed_type(items.type)) for items in _ITEMS.values()}
_UNSURE = (msgspec.DecodeError, RecursionError, UnicodeError)  # DecodeError includes ValidationError
# msgspec and the json module both give up on nesting where the interpreter's recursion limit is reached, counted
# from where they are called: the typed path decodes this many frames deeper than the scanner ever does, so an item
# nested near the limit fails there first and goes to the scanner, which decides.
TYPED_PATH_HEADROOM = 16
CHECK_CHUNK = 512  # items checked at a time by TypedBatch.checked_models (while the previous ones are copied)


class NeedsScanner(Exception):
    """An item of a TypedBatch does not fit the typed path: parse the body with parse_batch()."""


@dataclass
class TypedBatch:
    """A body whose envelope the typed path read: its items' bytes, not yet checked (see models())."""

    shape: str
    metadata: dict[str, Any] | None
    spans: list[msgspec.Raw]
    items: msgspec.json.Decoder[Any]
    options: dict[str, Any] = field(default_factory=dict)  # the other envelope members (validation.envelope_options)

    def bodies(self) -> list[msgspec.Raw]:
        """Each item's request body, as the caller sent it (msgspec.Raw: a view of the body's bytes)."""
        return self.spans

    def checked_models(self) -> Iterator[str]:
        """Each item's model name, checked CHECK_CHUNK items at a time as they are consumed; NeedsScanner (after
        some names were yielded) when an item does not fit the typed path."""
        for start in range(0, len(self.spans), CHECK_CHUNK):
            models = self.models(start, start + CHECK_CHUNK)
            if models is None:
                raise NeedsScanner
            yield from models

    def models(self, start: int = 0, stop: int | None = None) -> list[str] | None:
        """The model names of items START:STOP when each decodes as its shape's batch_item_type, is strict JSON and
        needs no other check; None as soon as one does not (the scanner must decide)."""
        try:
            return _deeper(TYPED_PATH_HEADROOM, _typed_models, self.items, self.spans[start:stop])
        except _UNSURE:
            return None


def typed_batch(raw: bytes | bytearray, *, max_items: int, max_item_bytes: int | None) -> TypedBatch | None:
    """The batch's envelope and item bytes when the envelope is valid and the items may all fit the typed path;
    None when the scanner must decide (bad input, or valid input outside those types)."""
    try:
        envelope = _SPANS.decode(raw)
    except _UNSURE:
        return None
    spans, shape = envelope.requests, envelope.shape
    if not isinstance(shape, str) or (items := _ITEMS.get(shape)) is None or not spans or len(spans) > max_items:
        return None
    if max_item_bytes is not None and max(map(len, spans)) > max_item_bytes:
        return None  # the scanner answers 413
    members = {name: value for name in _Spans.__struct_fields__
               if name != "requests" and (value := getattr(envelope, name)) is not msgspec.UNSET}
    if validate_envelope(members, has_requests=True):
        return None
    return TypedBatch(shape, members.get("metadata"), spans, items, envelope_options(members))


def _typed_models(items: msgspec.json.Decoder[Any], spans: list[msgspec.Raw]) -> list[str] | None:
    models: list[str] = []
    closed = _CLOSED[items]
    for span in spans:
        try:
            item = closed.decode(span)
        except msgspec.ValidationError:  # a member the closed type does not know (or a wrong type: then again)
            item = items.decode(span)
            _STRICT.decode(span)  # what the item type skipped (unknown members, raw values) must be strict JSON too
        if not typed_item_needs_no_checks(item):
            return None
        models.append(item.model)
        if len(models) % 256 == 0:
            time.sleep(0)  # let the other requests of a gevent API worker run
    return models


def _deeper(frames: int, fn: Callable[..., T], *args: Any) -> T:
    """FN(*ARGS), called FRAMES Python frames further down the stack."""
    return fn(*args) if frames <= 0 else _deeper(frames - 1, fn, *args)


class _Scanner:
    """One pass over the body: envelope members decoded, `requests` items decoded one by one and dropped."""

    def __init__(self, parsed: ParsedBatch, max_items: int, max_item_bytes: int | None = None) -> None:
        self.parsed, self.text, self.max_items = parsed, parsed.text, max_items
        self.items = _ItemReader(parsed, max_item_bytes)
        self.has_requests = False
        self.shape: str | None = None  # known while scanning when `shape` comes before `requests`
        self.errors: list[ItemError] | None = None  # inline item errors, when the shape was known
        self.surrogate_free: bool | None = None  # the body has no surrogate escape at all (known once searched)

    def scan_envelope(self) -> dict[str, Any]:
        """The top-level members except `requests` (whose items are scanned in place)."""
        text = self.text
        pos = skip_space(text, 0)
        if not text.startswith("{", pos):
            raise _not_object(text, pos)
        envelope: dict[str, Any] = {}
        pos = skip_space(text, pos + 1)
        if text.startswith("}", pos):
            return envelope
        while True:
            key, pos = decode_value(text, pos)
            pos = skip_space(text, pos)
            if not text.startswith(":", pos):
                raise InvalidJson(message=f"expected ':' at char {pos}")
            pos = skip_space(text, pos + 1)
            if key == "requests" and text.startswith("[", pos):
                self.has_requests = True
                envelope.pop("requests", None)
                pos = self._scan_items(pos, envelope.get("shape"))
            else:
                envelope[key], pos = decode_value(text, pos)
                if key == "requests":
                    self.has_requests = False
                    self._reset_items()
            pos = skip_space(text, pos)
            if text.startswith(",", pos):
                pos = skip_space(text, pos + 1)
            elif text.startswith("}", pos) and skip_space(text, pos + 1) == len(text):
                return envelope
            else:
                raise InvalidJson(message=f"expected ',' or '}}' at char {pos}")

    def item_errors(self) -> list[ItemError]:
        """Item errors for the final shape: the inline ones, or a second pass when the shape came later."""
        if self.errors is not None and self.shape == self.parsed.shape:
            return self.errors
        errors: list[ItemError] = []
        for idx, (start, end) in enumerate(zip(self.parsed.starts, self.parsed.ends, strict=True)):
            if len(errors) >= MAX_ERRORS:
                break
            errors.extend(item_errors(self.parsed.shape, idx, decode_value(self.text, start)[0],
                                      may_hold_surrogates=self._may_hold_surrogates(start, end)))
        return errors

    def _may_hold_surrogates(self, start: int, end: int) -> bool:
        """Whether the text of the item at START:END has a surrogate escape (one search of the whole body first:
        most bodies have none)."""
        if self.surrogate_free is None:
            self.surrogate_free = SURROGATE_ESCAPE.search(self.text) is None
        return not self.surrogate_free and SURROGATE_ESCAPE.search(self.text, start, end) is not None

    def _scan_items(self, pos: int, shape: Any) -> int:
        """Record each item's span and model; validate it now if the shape is already known."""
        self._reset_items()
        parsed, text = self.parsed, self.text
        if isinstance(shape, str) and not validate_envelope({"shape": shape}, has_requests=True):
            self.shape, self.errors = shape, []
        pos = skip_space(text, pos + 1)
        if text.startswith("]", pos):
            return pos + 1
        while True:
            if parsed.count >= self.max_items:
                raise BatchTooLarge(message=f"a batch holds at most {self.max_items} requests")
            item, end = self.items.decode(pos)
            if self.errors is not None and len(self.errors) < MAX_ERRORS:
                self.errors.extend(item_errors(self.shape or "", parsed.count, item,
                                               may_hold_surrogates=self._may_hold_surrogates(pos, end)))
            parsed.starts.append(pos)
            parsed.ends.append(end)
            parsed.models.append(str(item.get("model", "")) if isinstance(item, dict) else "")
            if parsed.count % 256 == 0:
                time.sleep(0)  # long validation: let the other requests of a gevent API worker run
            pos = skip_space(text, end)
            if text.startswith(",", pos):
                pos = skip_space(text, pos + 1)
            elif text.startswith("]", pos):
                return pos + 1
            else:
                raise InvalidJson(message=f"expected ',' or ']' at char {pos}")

    def _reset_items(self) -> None:
        """A repeated `requests` member replaces the earlier one, as in json.loads."""
        self.parsed.starts, self.parsed.ends, self.parsed.models = array("q"), array("q"), []
        self.shape, self.errors = None, None


class _ItemReader:
    """Decodes items, refusing one longer than the limit (the live request limit) before decoding more than that
    many characters of it: in a body larger than the limit, items are decoded from a window of limit + 1
    characters (one copy of the body in total, window by window), so an oversized item fails to decode there."""

    def __init__(self, parsed: ParsedBatch, limit: int | None) -> None:
        self.parsed, self.text, self.limit = parsed, parsed.text, limit
        self.window, self.window_start = "", 0

    def decode(self, pos: int) -> tuple[Any, int]:
        limit = self.limit
        if limit is None or len(self.text) - pos <= limit:
            item, end = decode_value(self.text, pos)
        else:
            item, end = self._decode_windowed(pos, limit)
        if limit is not None and end - pos > limit // 4 and self._bytes(pos, end) > limit:
            raise self._too_large()
        return item, end

    def _decode_windowed(self, pos: int, limit: int) -> tuple[Any, int]:
        fresh = not (self.window_start <= pos < self.window_start + len(self.window))
        if fresh:
            self.window, self.window_start = self.text[pos:pos + limit + 1], pos
        try:
            item, end = _DECODER.raw_decode(self.window, pos - self.window_start)
            cut = end >= len(self.window)  # a number at the window's end may be the start of a longer one
        except json.JSONDecodeError as exc:
            if not _cut_short(exc, len(self.window)):
                return decode_value(self.text, pos)  # a real syntax error: reported at its place in the body
            cut = True
        except ValueError as exc:
            raise InvalidJson(message=f"the body is not valid JSON: {json_problem(exc)}") from exc
        if not cut:
            return item, end + self.window_start
        if not fresh:
            self.window = ""
            return self._decode_windowed(pos, limit)  # the item runs past this window: one starting at it
        raise self._too_large()

    def _bytes(self, start: int, end: int) -> int:
        return end - start if self.parsed.raw else len(self.text[start:end].encode("utf-8", "surrogatepass"))

    def _too_large(self) -> BatchItemTooLarge:
        return BatchItemTooLarge(message=f"requests[{self.parsed.count}] holds more than {self.limit} bytes (the "
                                         "largest live request, RELAY_MAX_REQUEST_BYTES)")


def _cut_short(exc: json.JSONDecodeError, length: int) -> bool:
    """Whether a decode of a window of LENGTH characters failed because the window ended inside the value."""
    return exc.pos >= length - 6 or exc.msg.startswith("Unterminated string")


def decode_value(text: str, pos: int) -> tuple[Any, int]:
    """The JSON value at POS and where it ends (InvalidJson when it is not one): the intake's step, and the
    compatible APIs' (app/compat/inputs.py)."""
    try:
        return _DECODER.raw_decode(text, pos)
    except ValueError as exc:  # bad syntax, NaN/Infinity, an integer of more than 4,300 digits
        raise InvalidJson(message=f"the body is not valid JSON: {json_problem(exc)}") from exc


def skip_space(text: str, pos: int) -> int:
    """Where the JSON whitespace at POS ends."""
    match = _WS.match(text, pos)
    return match.end() if match else pos


def _not_object(text: str, pos: int) -> InvalidJson | InvalidBatch:
    if pos >= len(text):
        return InvalidJson(message="the body is empty")
    decode_value(text, pos)  # raises InvalidJson for malformed input
    return InvalidBatch(message="the body must be a JSON object",
                        details=[{"idx": None, "field": "", "message": "must be a JSON object"}])


def _invalid(errors: list[ItemError]) -> InvalidBatch:
    shown = errors[:MAX_ERRORS]
    first = shown[0]
    where = (f"requests[{first.idx}]" + (f".{first.field}" if first.field else "")) if first.idx is not None \
        else (first.field or "body")
    more = f" (and {len(errors) - 1} more)" if 1 < len(errors) < MAX_ERRORS else ""
    if len(errors) >= MAX_ERRORS:
        more = f" (and more: the first {MAX_ERRORS} are listed)"
    return InvalidBatch(message=f"invalid batch: {where}: {first.message}{more}",
                        details=[e.as_dict() for e in shown])
