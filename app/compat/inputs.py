"""A provider API's batch input turned into a Relay submit body, so that the one batch intake validates and
stores it: the same checks of every item, the same limits and the same storage as Relay's own batches.

OpenAI's input is a JSONL file of `{custom_id, method, url, body}`; Anthropic's a body of
`{"requests": [{custom_id, params}, ...]}`. Each item is decoded, checked for its envelope, re-encoded (ASCII, so
lone surrogates stay visible to the intake's checks) and dropped: memory holds the input and one body's worth.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from app.batches.errors import BatchTooLarge, InvalidBatch
from app.batches.intake import decode_value, parse_batch, skip_space  # the intake and its public JSON steps
from app.batches.validation import MAX_ERRORS, text_problem
from app.errors import InvalidJson, RelayError

_ANTHROPIC_CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
MAX_OPENAI_CUSTOM_ID = 512


@dataclass
class ProviderBatch:
    """A Relay submit body built from a provider's input, and where each of its items came from."""

    body: bytearray
    label: str  # how a position is told: "line {}" (OpenAI) or "requests[{}]" (Anthropic)
    key: str  # the name of the position in error details: "line" or "index"
    body_field: str  # the name of the request body in the provider's input: "body" or "params"
    custom_ids: list[str] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)  # OpenAI: line number (1-based); Anthropic: index
    errors: list[dict[str, Any]] = field(default_factory=list)

    def add(self, position: int, custom_id: str, body: Any) -> None:
        self.body += (b"," if self.custom_ids else b"") + json.dumps(body).encode()
        self.custom_ids.append(custom_id)
        self.positions.append(position)

    def fail(self, position: int, custom_id: Any, name: str, message: str) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append({self.key: position, "custom_id": custom_id if isinstance(custom_id, str) else None,
                                "field": name, "message": message})

    def finish(self, max_item_bytes: int | None = None) -> bytes:
        """The submit body; InvalidBatch listing every bad request when there is one: the envelope's problems and,
        in the same answer, what the intake finds in the bodies of the other requests (one round, not two)."""
        if not self.custom_ids and not self.errors:
            raise InvalidBatch(message="the batch holds no requests",
                               details=[{self.key: None, "custom_id": None, "field": "", "message": "is empty"}])
        self.body += b"]}"
        raw = bytes(self.body)
        self.body = bytearray()  # one copy of the body in memory, not two, while the intake reads it
        if not self.errors:
            return raw
        errors = list(self.errors)
        if self.custom_ids:
            try:
                parse_batch(raw, max_items=len(self.custom_ids), max_item_bytes=max_item_bytes)
            except InvalidBatch as exc:
                errors += self.remap(exc).details or []
            except RelayError:
                pass  # a body too large to check: the envelope's problems are told first
        errors.sort(key=lambda e: -1 if e[self.key] is None else e[self.key])
        raise InvalidBatch(message=self.summary(errors), details=errors[:MAX_ERRORS])

    def remap(self, exc: InvalidBatch) -> InvalidBatch:
        """The intake's errors (by item idx) told by position and custom_id, with the body's field name before the
        field."""
        body_field, details = self.body_field, []
        for detail in exc.details or []:
            idx = detail.get("idx")
            if idx is None:
                details.append({self.key: None, "custom_id": None, "field": detail["field"],
                                "message": detail["message"]})
                continue
            name = f"{body_field}.{detail['field']}" if detail["field"] else body_field
            details.append({self.key: self.positions[idx], "custom_id": self.custom_ids[idx], "field": name,
                            "message": detail["message"]})
        return InvalidBatch(message=self.summary(details), details=details)

    def summary(self, details: list[dict[str, Any]]) -> str:
        """One sentence naming the first problem and how many more there are."""
        first = details[0]
        where = self.label.format(first[self.key]) + ": " if first[self.key] is not None else ""
        name = f"{first['field']}: " if first["field"] else ""
        more = f" (and {len(details) - 1} more)" if len(details) > 1 else ""
        return f"invalid batch: {where}{name}{first['message']}{more}"


def from_openai_jsonl(lines: Iterable[bytes], *, shape: str, endpoint: str, metadata: dict[str, str] | None,
                      max_requests: int) -> ProviderBatch:
    """The batch of an OpenAI input file: every line `{custom_id, method: POST, url: ENDPOINT, body}`, custom_id
    unique; blank lines are skipped."""
    head = {"shape": shape, "metadata": metadata} if metadata is not None else {"shape": shape}
    batch = ProviderBatch(bytearray(json.dumps(head)[:-1].encode() + b',"requests":['), "line {}", "line", "body")
    seen: set[str] = set()
    requests = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if requests >= max_requests:
            raise BatchTooLarge(message=f"an input file holds at most {max_requests} requests")
        requests += 1
        try:
            request = json.loads(line)
        except (ValueError, RecursionError):
            batch.fail(number, None, "", "is not a JSON object (each line holds one request)")
            continue
        _take(batch, number, request, _openai_line_problems(request, endpoint, seen), seen)
    return batch


def _take(batch: ProviderBatch, position: int, request: Any, problems: list[tuple[str, str]],
          seen: set[str]) -> None:
    """Add REQUEST to BATCH, or record each of its PROBLEMS; its custom_id counts as seen either way."""
    custom_id = request.get("custom_id") if isinstance(request, dict) else None
    if isinstance(custom_id, str):
        seen.add(custom_id)
    if problems:
        for name, message in problems:
            batch.fail(position, custom_id, name, message)
        return
    batch.add(position, request["custom_id"], request[batch.body_field])


def _openai_line_problems(request: Any, endpoint: str, seen: set[str]) -> list[tuple[str, str]]:
    """Every problem of one line's envelope (its body is checked by the intake)."""
    if not isinstance(request, dict):
        return [("", "must be a JSON object {custom_id, method, url, body}")]
    problems = _custom_id_problems(request.get("custom_id"), seen, "line")
    if request.get("method") != "POST":
        problems.append(("method", "must be POST"))
    if request.get("url") != endpoint:
        problems.append(("url", f"must be the batch's endpoint {endpoint}"))
    if not isinstance(request.get("body"), dict):
        problems.append(("body", "must be a JSON object (the request body)"))
    return problems


def _custom_id_problems(custom_id: Any, seen: set[str], earlier: str) -> list[tuple[str, str]]:
    """OpenAI's rule for a custom_id: a unique string of 1 to 512 characters that can be stored."""
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_OPENAI_CUSTOM_ID:
        return [("custom_id", f"must be a string of 1 to {MAX_OPENAI_CUSTOM_ID} characters")]
    if (problem := text_problem(custom_id)) is not None:
        return [("custom_id", problem)]
    if custom_id in seen:
        return [("custom_id", f"is used by an earlier {earlier}: every custom_id must be unique")]
    return []


def from_anthropic_body(raw: bytes | bytearray, *, max_requests: int) -> ProviderBatch:
    """The batch of an Anthropic create body `{"requests": [{custom_id, params}, ...]}`."""
    batch = ProviderBatch(bytearray(b'{"shape":"anthropic","requests":['), "requests[{}]", "index", "params")
    seen: set[str] = set()

    def take(idx: int, request: Any) -> None:
        if idx >= max_requests:
            raise BatchTooLarge(message=f"a message batch holds at most {max_requests} requests")
        _take(batch, idx, request, _anthropic_request_problems(request, seen), seen)

    try:
        _scan_requests(_text(raw), take)
    except RecursionError:
        raise InvalidJson(message="the body is nested too deeply") from None
    return batch


def _anthropic_request_problems(request: Any, seen: set[str]) -> list[tuple[str, str]]:
    """Every problem of one request's envelope (its params are checked by the intake)."""
    if not isinstance(request, dict):
        return [("", "must be a JSON object {custom_id, params}")]
    problems = [(name, "is not a field of a batch request") for name in sorted(set(request) - {"custom_id", "params"})]
    custom_id = request.get("custom_id")
    if not isinstance(custom_id, str) or not _ANTHROPIC_CUSTOM_ID.fullmatch(custom_id):
        problems.append(("custom_id", "must be 1 to 64 letters, digits, '_' or '-'"))
    elif custom_id in seen:
        problems.append(("custom_id", "is used by an earlier request: every custom_id must be unique"))
    if not isinstance(request.get("params"), dict):
        problems.append(("params", "must be a JSON object (the Messages request)"))
    return problems


def _text(raw: bytes | bytearray) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidJson(message=f"the body is not valid UTF-8: {exc.reason} at byte {exc.start}") from exc


def _scan_requests(text: str, take: Callable[[int, Any], None]) -> None:
    """Walk `{"requests": [...]}` calling TAKE(idx, item) for each item as it is decoded; no other member."""
    pos = _expect(text, 0, "{")
    key, pos = decode_value(text, pos)
    if key != "requests":
        raise _not_a_field(key)
    pos = _expect(text, _expect(text, pos, ":"), "[")
    idx = 0
    while not text.startswith("]", pos):
        item, pos = decode_value(text, pos)
        take(idx, item)
        idx += 1
        pos = skip_space(text, pos)
        if text.startswith(",", pos):
            pos = skip_space(text, pos + 1)
        elif not text.startswith("]", pos):
            raise InvalidJson(message=f"expected ',' or ']' at char {pos}")
    pos = skip_space(text, pos + 1)
    if text.startswith(",", pos):
        raise _not_a_field(decode_value(text, skip_space(text, pos + 1))[0])
    pos = _expect(text, pos, "}")
    if pos != len(text):
        raise InvalidJson(message=f"unexpected data after the body at char {pos}")


def _not_a_field(key: Any) -> InvalidBatch:
    return InvalidBatch(message='the body must be {"requests": [...]}',
                        details=[{"index": None, "custom_id": None, "field": str(key)[:100],
                                  "message": "is not a field of a message batch"}])


def _expect(text: str, pos: int, char: str) -> int:
    """The position after CHAR (and the whitespace around it) at POS."""
    pos = skip_space(text, pos)
    if not text.startswith(char, pos):
        raise InvalidJson(message=f"expected '{char}' at char {pos}")
    return skip_space(text, pos + 1)

