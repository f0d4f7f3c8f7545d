"""Relay's canonical `/v1/generate` shape: validation, translation to and from each upstream shape, streaming.

Request:  {model, input: str | [{role, content: str}], instructions?, max_tokens?, temperature?, stream?}
Response: {id, model, output_text, finish_reason, usage: {input_tokens, output_tokens, cached_tokens}}
Stream:   data: {"type": "delta", "text": ...} ... then data: {"type": "done", id, model, finish_reason, usage}
          or data: {"type": "error", "message": ...} when the upstream stream fails or ends early.
Unknown request fields are ignored. finish_reason is one of stop, length, tool_calls, content_filter, or the
upstream's own word when it has no equivalent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from adapters import fields as f
from adapters.anthropic import MessagesStreamReader
from adapters.base import FieldError, Usage, dig
from adapters.errors import UnknownShape
from adapters.openai import ChatStreamReader
from adapters.openai_responses import ResponsesStreamReader, responses_finish_reason
from adapters.registry import get_adapter
from adapters.sse import SseStreamReader, encode_event, text_of

ANTHROPIC_DEFAULT_MAX_TOKENS = 1024  # Messages requires max_tokens; canonical makes it optional
_ROLES = ("user", "assistant", "system")
_OPTIONAL: dict[str, f.Check] = {
    "instructions": f.string, "max_tokens": f.positive_integer, "temperature": f.number, "stream": f.boolean,
}
_FINISH_REASONS = {
    "stop": "stop", "end_turn": "stop", "stop_sequence": "stop", "completed": "stop",
    "length": "length", "max_tokens": "length", "max_output_tokens": "length",
    "tool_calls": "tool_calls", "function_call": "tool_calls", "tool_use": "tool_calls",
    "content_filter": "content_filter", "refusal": "content_filter",
}


def _model(value: Any) -> str | None:
    """One model name (a list would mean multiplexing, which Relay does not do)."""
    return f.non_empty_string(value)


def _input(value: Any) -> str | None:
    """A non-empty string or a non-empty list of messages."""
    if isinstance(value, str):
        return f.non_empty_string(value)
    if isinstance(value, list):
        return None if value else "must not be empty"
    return "must be a string or an array of {role, content} messages"


def _check_message(name: str, message: dict[str, Any]) -> list[FieldError]:
    """One input message: role user, assistant or system; content a string."""
    errors: list[FieldError] = []
    if (problem := f.one_of(*_ROLES)(message.get("role"))) is not None:
        errors.append(FieldError(f"{name}.role", problem))
    if (problem := f.string(message.get("content"))) is not None:
        errors.append(FieldError(f"{name}.content", problem))
    return errors


def validate_canonical(body: Any) -> list[FieldError]:
    """Is BODY a valid /v1/generate request? Never raises."""
    errors = f.check_body(body, {"model": _model, "input": _input}, _OPTIONAL)
    items = body.get("input") if isinstance(body, dict) else None
    if isinstance(items, list):
        errors.extend(f.check_items(items, "input", _check_message))
    return errors


def _messages(canonical: dict[str, Any]) -> list[dict[str, str]]:
    """The input as a list of {role, content} messages."""
    value = canonical["input"]
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return [{"role": m["role"], "content": m["content"]} for m in value]


def _to_openai(canonical: dict[str, Any]) -> dict[str, Any]:
    """Chat Completions: instructions become a leading system message."""
    instructions = canonical.get("instructions")
    system = [{"role": "system", "content": instructions}] if instructions else []
    body: dict[str, Any] = {"model": canonical["model"], "messages": system + _messages(canonical)}
    _copy(canonical, body, {"max_tokens": "max_completion_tokens", "temperature": "temperature"})
    if canonical.get("stream") is True:
        body.update(stream=True, stream_options={"include_usage": True})
    return body


def _to_anthropic(canonical: dict[str, Any]) -> dict[str, Any]:
    """Messages: instructions and system-role messages are joined into `system`; max_tokens gets a default."""
    messages = _messages(canonical)
    system = [canonical["instructions"]] if canonical.get("instructions") else []
    system += [m["content"] for m in messages if m["role"] == "system"]
    body: dict[str, Any] = {
        "model": canonical["model"],
        "max_tokens": canonical.get("max_tokens") or ANTHROPIC_DEFAULT_MAX_TOKENS,
        "messages": [m for m in messages if m["role"] != "system"],
    }
    if system:
        body["system"] = "\n\n".join(system)
    _copy(canonical, body, {"temperature": "temperature", "stream": "stream"})
    return body


def _to_responses(canonical: dict[str, Any]) -> dict[str, Any]:
    """Responses: input and instructions map one to one; max_tokens becomes max_output_tokens."""
    input_value = canonical["input"]
    body: dict[str, Any] = {"model": canonical["model"],
                            "input": input_value if isinstance(input_value, str) else _messages(canonical)}
    _copy(canonical, body, {"instructions": "instructions", "max_tokens": "max_output_tokens",
                            "temperature": "temperature", "stream": "stream"})
    return body


def _copy(source: dict[str, Any], target: dict[str, Any], names: dict[str, str]) -> None:
    """Copy the non-null SOURCE fields into TARGET under their new names."""
    for old, new in names.items():
        if source.get(old) is not None:
            target[new] = source[old]


_TO_SHAPE: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "openai": _to_openai, "anthropic": _to_anthropic, "openai_responses": _to_responses,
}


def to_shape(canonical: dict[str, Any], target_shape: str) -> dict[str, Any]:
    """The upstream request body for a VALID canonical request; `model` is kept (the adapter rewrites it)."""
    translate = _TO_SHAPE.get(target_shape)
    if translate is None:
        raise UnknownShape(f"/v1/generate cannot be translated to shape {target_shape!r}")
    return translate(canonical)


def _openai_output(response: Any) -> tuple[str, str | None]:
    """Text and finish reason of choice 0."""
    choices = dig(response, "choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    return text_of(dig(choice, "message", "content")) or "", text_of(dig(choice, "finish_reason"))


def _anthropic_output(response: Any) -> tuple[str, str | None]:
    """The text blocks joined, and the stop reason."""
    blocks = dig(response, "content")
    blocks = blocks if isinstance(blocks, list) else []
    text = "".join(text_of(dig(b, "text")) or "" for b in blocks if dig(b, "type") == "text")
    return text, text_of(dig(response, "stop_reason"))


def _responses_output(response: Any) -> tuple[str, str | None]:
    """The output_text parts of the message items joined, and why the response ended."""
    items = dig(response, "output")
    parts: list[Any] = []
    for item in items if isinstance(items, list) else []:
        content = dig(item, "content") if dig(item, "type") == "message" else None
        parts += content if isinstance(content, list) else []
    text = "".join(text_of(dig(p, "text")) or "" for p in parts if dig(p, "type") == "output_text")
    return text, responses_finish_reason(response)


_OUTPUT: dict[str, Callable[[Any], tuple[str, str | None]]] = {
    "openai": _openai_output, "anthropic": _anthropic_output, "openai_responses": _responses_output,
}


def finish_reason(reason: str | None) -> str | None:
    """An upstream finish/stop reason in the canonical vocabulary."""
    return _FINISH_REASONS.get(reason, reason) if reason is not None else None


def _canonical_response(response_id: str | None, model: str | None, text: str, reason: str | None,
                        usage: Usage) -> dict[str, Any]:
    """The canonical response object."""
    return {"id": response_id, "model": model, "output_text": text, "finish_reason": finish_reason(reason),
            "usage": usage.to_dict()}


def from_shape(shape: str, response_json: Any) -> dict[str, Any]:
    """The canonical response for an upstream 2xx body of SHAPE; missing parts come back empty, never raises
    for a known shape."""
    output = _OUTPUT.get(shape)
    if output is None:
        raise UnknownShape(f"no canonical translation from shape {shape!r}")
    text, reason = output(response_json)
    usage = get_adapter(shape).extract_usage(response_json)
    return _canonical_response(text_of(dig(response_json, "id")), text_of(dig(response_json, "model")),
                               text, reason, usage)


_READERS: dict[str, Callable[[], SseStreamReader]] = {
    "openai": ChatStreamReader, "anthropic": MessagesStreamReader, "openai_responses": ResponsesStreamReader,
}


class CanonicalStreamTranslator:
    """Upstream SSE of one shape in (chunks split anywhere), canonical SSE out; also a StreamUsageReader."""

    def __init__(self, shape: str) -> None:
        reader = _READERS.get(shape)
        if reader is None:
            raise UnknownShape(f"no canonical stream translation from shape {shape!r}")
        self._reader = reader()
        self._ended = False

    def translate(self, chunk: bytes) -> bytes:
        """Consume an upstream CHUNK; return the canonical events it completes (maybe b"")."""
        if self._ended:
            self._reader.feed(chunk)
            return b""
        out = [encode_event({"type": "delta", "text": text}) for text in self._reader.read(chunk)]
        state = self._reader.state
        if state.error is not None:
            out.append(self._end({"type": "error", "message": state.error}))
        elif state.completed:
            out.append(self._end(self._done()))
        return b"".join(out)

    def finish(self) -> bytes:
        """Call when the upstream stream ends: an error event if it ended before its end-of-stream marker."""
        if self._ended:
            return b""
        return self._end({"type": "error", "message": "upstream stream ended before completion"})

    def _done(self) -> dict[str, Any]:
        """The final `done` event, carrying what a non-streamed canonical response carries but the text."""
        state = self._reader.state
        response = _canonical_response(state.response_id, state.model, "", state.finish_reason, state.usage)
        del response["output_text"]
        return {"type": "done", **response}

    def _end(self, event: dict[str, Any]) -> bytes:
        """Emit the last event of the canonical stream."""
        self._ended = True
        return encode_event(event)

    def __call__(self, chunk: bytes) -> bytes:
        """`translate(chunk)`; an empty CHUNK means the upstream stream ended (`finish()`)."""
        return self.translate(chunk) if chunk else self.finish()

    def feed(self, chunk: bytes) -> None:
        """StreamUsageReader.feed (output discarded)."""
        self.translate(chunk)

    def usage(self) -> Usage:
        """The upstream usage so far."""
        return self._reader.usage()

    def completed(self) -> bool:
        """True once the upstream stream reached its end-of-stream marker."""
        return self._reader.completed()


def stream_translator(shape: str) -> CanonicalStreamTranslator:
    """A translator from SHAPE's upstream stream to canonical events (call it per chunk, then with b"")."""
    return CanonicalStreamTranslator(shape)
