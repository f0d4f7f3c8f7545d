"""OpenAI Chat Completions (shape `openai`, POST /v1/chat/completions); also the OpenAI auth and error envelope."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec

from adapters import fields as f
from adapters.base import FieldError, ShapeAdapter, Usage, count, dig, wants_stream
from adapters.sse import SseStreamReader, decode_json, text_of

_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_ASSISTANT_WITHOUT_CONTENT = ("tool_calls", "function_call", "audio", "refusal")

_OPTIONAL: dict[str, f.Check] = {
    "stream": f.boolean, "stream_options": f.obj, "temperature": f.number, "top_p": f.number,
    "n": f.positive_integer, "max_tokens": f.positive_integer, "max_completion_tokens": f.positive_integer,
    "stop": f.string_or_strings, "presence_penalty": f.number, "frequency_penalty": f.number,
    "seed": f.integer, "user": f.string, "tools": f.array, "tool_choice": f.string_or_object,
    "response_format": f.obj, "logprobs": f.boolean, "top_logprobs": f.integer, "logit_bias": f.obj,
    "parallel_tool_calls": f.boolean, "metadata": f.obj, "store": f.boolean, "reasoning_effort": f.string,
}


class _Message(msgspec.Struct, tag_field="role"):
    """A message with content (an assistant turn without content is left to _check_message)."""

    content: f.Content


class SystemMessage(_Message, tag="system"):
    pass


class DeveloperMessage(_Message, tag="developer"):
    pass


class UserMessage(_Message, tag="user"):
    pass


class AssistantMessage(_Message, tag="assistant"):
    pass


class FunctionMessage(_Message, tag="function"):
    pass


class ToolMessage(_Message, tag="tool"):
    tool_call_id: f.NonBlank


ChatMessage = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | FunctionMessage | ToolMessage


class StreamOptions(msgspec.Struct):
    include_usage: bool | None = None


class ChatItem(msgspec.Struct):
    """A Chat Completions body as a batch item: a subset of what validate_request accepts (see fields.Content)."""

    model: str  # non-blank, ASCII, NUL-free: checked by the caller, which keeps the name
    messages: Annotated[list[ChatMessage], msgspec.Meta(min_length=1)]
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: f.Choices | None = None
    max_tokens: f.TokenLimit | None = None
    max_completion_tokens: f.TokenLimit | None = None
    stop: f.StringOrStrings | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None
    user: str | None = None
    tools: f.Array | None = None
    tool_choice: f.StringOrObject | None = None
    response_format: f.Object | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    logit_bias: f.Object | None = None
    parallel_tool_calls: bool | None = None
    metadata: f.Object | None = None
    store: bool | None = None
    reasoning_effort: str | None = None


_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "invalid_request_error", 429: "rate_limit_error"}


def bearer_headers(secret: str) -> dict[str, str]:
    """OpenAI-style auth (Chat Completions, Responses, Embeddings); no header for an empty secret."""
    return {"Authorization": f"Bearer {secret}"} if secret else {}


def openai_error_body(status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error envelope; the SDK picks its exception class from the HTTP status. PARAM: the parameter at
    fault, as OpenAI's errors name it."""
    error_type = _ERROR_TYPES.get(status) or ("server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def _check_message(name: str, message: dict[str, Any]) -> list[FieldError]:
    """One entry of `messages`: a known role, and content unless an assistant turn carries tool calls."""
    errors: list[FieldError] = []
    role = message.get("role")
    if (problem := f.one_of(*_ROLES)(role)) is not None:
        errors.append(FieldError(f"{name}.role", problem))
    content = message.get("content")
    if content is None:
        if role != "assistant" or not any(message.get(k) is not None for k in _ASSISTANT_WITHOUT_CONTENT):
            errors.append(FieldError(f"{name}.content", "is required"))
    elif (problem := f.content_parts(content)) is not None:
        errors.append(FieldError(f"{name}.content", problem))
    if role == "tool" and (problem := f.non_empty_string(message.get("tool_call_id"))) is not None:
        errors.append(FieldError(f"{name}.tool_call_id", problem))
    return errors


def chat_usage(usage: Any) -> Usage:
    """Usage from a Chat Completions `usage` object (prompt_tokens already includes the cached ones)."""
    return Usage(
        input_tokens=count(dig(usage, "prompt_tokens")),
        output_tokens=count(dig(usage, "completion_tokens")),
        cached_tokens=count(dig(usage, "prompt_tokens_details", "cached_tokens")),
    )


class ChatStreamReader(SseStreamReader):
    """Chat chunks: text in choices[0].delta.content, usage in the chunk that has it, `[DONE]` at the end."""

    def on_event(self, event: str, data: str) -> list[str]:
        """Interpret one `data:` chunk."""
        if data.strip() == "[DONE]":
            self.state.completed = True
            return []
        chunk = decode_json(data)
        if not isinstance(chunk, dict):
            return []
        if isinstance(chunk.get("error"), dict):
            self.state.error = text_of(chunk["error"].get("message")) or "upstream stream error"
        self.state.response_id = text_of(chunk.get("id")) or self.state.response_id
        self.state.model = text_of(chunk.get("model")) or self.state.model
        if isinstance(chunk.get("usage"), dict):
            self.state.usage = chat_usage(chunk["usage"])
        return self._first_choice(chunk.get("choices"))

    def _first_choice(self, choices: Any) -> list[str]:
        """Text and finish reason of choice 0 (the canonical shape has one choice)."""
        if not isinstance(choices, list):
            return []
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self.state.finish_reason = text_of(choice.get("finish_reason")) or self.state.finish_reason
                text = text_of(dig(choice, "delta", "content"))
                return [text] if text else []
        return []


class ChatCompletionsAdapter:
    """The `openai` shape."""

    shape = "openai"
    title = "OpenAI Chat Completions"
    provider = "openai"
    upstream_path = "/v1/chat/completions"
    batch_item_type = ChatItem
    output_limit_fields: tuple[str, ...] = ("max_completion_tokens", "max_tokens")
    choices_field: str | None = "n"
    canonical_markers: tuple[str, ...] = ()
    bare_input = False

    def validate_request(self, body: Any) -> list[FieldError]:
        """`model`, a non-empty `messages` list of valid messages, and well-typed common options."""
        errors = f.check_body(body, {"model": f.non_empty_string, "messages": f.array}, _OPTIONAL)
        messages = body.get("messages") if isinstance(body, dict) else None
        if isinstance(messages, list):
            if not messages:
                errors.append(FieldError("messages", "must not be empty"))
            errors.extend(f.check_items(messages, "messages", _check_message))
        include_usage = dig(body, "stream_options", "include_usage")
        if include_usage is not None and (problem := f.boolean(include_usage)) is not None:
            errors.append(FieldError("stream_options.include_usage", problem))
        return errors

    def auth_headers(self, secret: str) -> dict[str, str]:
        """Authorization: Bearer."""
        return bearer_headers(secret)

    def extract_usage(self, body: Any) -> Usage:
        """usage.prompt_tokens / completion_tokens / prompt_tokens_details.cached_tokens."""
        return chat_usage(dig(body, "usage"))

    def stream_usage_reader(self) -> ChatStreamReader:
        """A reader for chat.completion.chunk streams."""
        return ChatStreamReader()

    def error_body(self, status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
        """OpenAI's error envelope."""
        return openai_error_body(status, code, message, param)

    def caller_headers(self, headers: dict[str, str], now: datetime) -> dict[str, str]:
        """Relay's names are OpenAI's (`x-ratelimit-*`)."""
        return headers

    def prepare_body(self, body: dict[str, Any], upstream_model: str) -> dict[str, Any]:
        """Rewrite `model`; a stream also gets `stream_options.include_usage` (one extra final chunk, usage only)."""
        prepared = {**body, "model": upstream_model}
        if prepared.get("stream") is True:
            options = prepared.get("stream_options")
            prepared["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        return prepared

    def is_stream(self, body: Any) -> bool:
        """`stream: true`."""
        return wants_stream(body)


ADAPTER: ShapeAdapter = ChatCompletionsAdapter()
