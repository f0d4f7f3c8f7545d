"""What the fake model says and what it charges: deterministic reply text and token counts.

Rules (tests compute expectations with the same functions):
- `count_tokens(text)` is ceil(len(text) / 4), at least 1.
- The prompt is the text of every message (and `system` / `instructions`) joined with newlines;
  `input_tokens` is `count_tokens(prompt)`.
- The reply echoes the last user message (`"ok"` when there is none), cut to `max_tokens * 4`
  characters when the request's output limit is smaller (the answer then says it was truncated).
- `Turn.input_tokens` INCLUDES cached and cache-creation tokens (OpenAI semantics); the Anthropic body
  reports the uncached part as `input_tokens`, as the real API does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

CHARS_PER_TOKEN = 4
EMPTY_REPLY = "ok"
USAGE_FIELDS = ("input_tokens", "output_tokens", "cached_tokens", "cache_creation_tokens", "reasoning_tokens")
APIS = ("chat", "responses", "messages")


def count_tokens(text: str) -> int:
    """Tokens the fake upstream charges for `text`: ceil(len / 4), at least 1."""
    return max(1, -(-len(text) // CHARS_PER_TOKEN))


@dataclass(frozen=True)
class Turn:
    """One answered call: the reply text and its usage (input includes cached tokens)."""

    reply: str
    truncated: bool
    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    cache_creation_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    @property
    def uncached_input_tokens(self) -> int:
        """Input tokens neither read from nor written to the cache (Anthropic's `input_tokens`)."""
        return max(0, self.input_tokens - self.cached_tokens - self.cache_creation_tokens)


def text_of(content: Any) -> str:
    """The text of a message `content`: a string, a content part, or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(text for text in (text_of(part) for part in content) if text)
    if isinstance(content, Mapping):
        for name in ("text", "output", "content"):
            if name in content:
                return text_of(content[name])
    return ""


def _messages_text(messages: Any) -> tuple[list[str], str]:
    """Texts of all messages, and the text of the last `user` message."""
    texts: list[str] = []
    last_user = ""
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, Mapping):
            continue
        text = text_of(message.get("content", message.get("output", "")))
        texts.append(text)
        if message.get("role") == "user":
            last_user = text
    return texts, last_user


def prompt_of(api: str, body: Mapping[str, Any]) -> tuple[str, str]:
    """(whole prompt text, last user text) of a request body of `api` (chat, responses, messages)."""
    if api == "responses":
        head = [text_of(body.get("instructions"))]
        items = body.get("input")
        if isinstance(items, str):
            return "\n".join([*head, items]).strip("\n"), items
        texts, last_user = _messages_text(items)
    else:
        head = [text_of(body.get("system"))] if api == "messages" else []
        texts, last_user = _messages_text(body.get("messages"))
    return "\n".join(t for t in [*head, *texts] if t), last_user


def output_limit(api: str, body: Mapping[str, Any]) -> int | None:
    """The request's cap on output tokens, if it sets one."""
    names = {"chat": ("max_completion_tokens", "max_tokens"), "responses": ("max_output_tokens",),
             "messages": ("max_tokens",)}[api]
    for name in names:
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def plan_turn(api: str, body: Mapping[str, Any], *, usage: Mapping[str, int] | None = None,
              reply: str | None = None) -> Turn:
    """The reply and usage the fake upstream gives `body` on `api`; `usage` overrides single counts."""
    prompt, last_user = prompt_of(api, body)
    text = reply if reply is not None else (last_user or EMPTY_REPLY)
    limit = output_limit(api, body)
    truncated = limit is not None and count_tokens(text) > limit
    if truncated and limit is not None:
        text = text[: limit * CHARS_PER_TOKEN]
    turn = Turn(reply=text, truncated=truncated, input_tokens=count_tokens(prompt),
                output_tokens=count_tokens(text))
    overrides: dict[str, Any] = dict(usage or {})
    return replace(turn, **overrides) if overrides else turn


def embedding_inputs(body: Mapping[str, Any]) -> list[str]:
    """The texts of an embeddings request (token arrays are rendered as their numbers)."""
    value = body.get("input")
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return [" ".join(str(v) for v in value)]
    if isinstance(value, list):
        return [v if isinstance(v, str) else " ".join(str(t) for t in v) for v in value]
    return []
