"""The table of fake API endpoints: path, API family, body validation, answer body and SSE frames."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from devtools.fake_upstream.anthropic_messages import message_object, messages_stream, validate_messages
from devtools.fake_upstream.behaviour import Behaviour
from devtools.fake_upstream.content import Turn, plan_turn
from devtools.fake_upstream.embeddings import embeddings_body, models_body, validate_embeddings
from devtools.fake_upstream.errors import ANTHROPIC, OPENAI
from devtools.fake_upstream.openai_chat import chat_completion, chat_stream, validate_chat
from devtools.fake_upstream.openai_responses import response_object, responses_stream, validate_responses
from devtools.fake_upstream.wire import new_id

Body = Mapping[str, Any]


@dataclass(frozen=True)
class Endpoint:
    """One fake API route; `family` picks the auth header and error shape (None: by `anthropic-version`)."""

    method: str
    path: str
    family: str | None
    validate: Callable[[Body], None] | None
    build: Callable[[Body, Behaviour, str], dict[str, Any]]
    stream: Callable[[Body, Behaviour], list[bytes]] | None = None

    def family_for(self, headers: Mapping[str, str]) -> str:
        """The API family of one call to this endpoint."""
        if self.family is not None:
            return self.family
        return ANTHROPIC if "anthropic-version" in headers else OPENAI


def turn_for(api: str, body: Body, behaviour: Behaviour) -> Turn:
    """The turn of this call, with the key's usage and reply overrides."""
    return plan_turn(api, body, usage=behaviour.usage, reply=behaviour.reply)


def _chat(body: Body, behaviour: Behaviour, family: str) -> dict[str, Any]:
    """A chat completion."""
    return chat_completion(body, turn_for("chat", body, behaviour))


def _chat_stream(body: Body, behaviour: Behaviour) -> list[bytes]:
    """A streamed chat completion."""
    return chat_stream(body, turn_for("chat", body, behaviour))


def _responses(body: Body, behaviour: Behaviour, family: str) -> dict[str, Any]:
    """A response object."""
    turn = turn_for("responses", body, behaviour)
    return response_object(body, turn, response_id=new_id("resp_"), item_id=new_id("msg_"))


def _responses_stream(body: Body, behaviour: Behaviour) -> list[bytes]:
    """A streamed response."""
    return responses_stream(body, turn_for("responses", body, behaviour))


def _messages(body: Body, behaviour: Behaviour, family: str) -> dict[str, Any]:
    """An Anthropic message."""
    return message_object(body, turn_for("messages", body, behaviour))


def _messages_stream(body: Body, behaviour: Behaviour) -> list[bytes]:
    """A streamed Anthropic message."""
    return messages_stream(body, turn_for("messages", body, behaviour))


def _embeddings(body: Body, behaviour: Behaviour, family: str) -> dict[str, Any]:
    """An embeddings list."""
    return embeddings_body(body, behaviour.usage)


def _models(body: Body, behaviour: Behaviour, family: str) -> dict[str, Any]:
    """The model list."""
    return models_body(anthropic=family == ANTHROPIC)


ENDPOINTS = (
    Endpoint("POST", "/v1/chat/completions", OPENAI, validate_chat, _chat, _chat_stream),
    Endpoint("POST", "/v1/responses", OPENAI, validate_responses, _responses, _responses_stream),
    Endpoint("POST", "/v1/messages", ANTHROPIC, validate_messages, _messages, _messages_stream),
    Endpoint("POST", "/v1/embeddings", OPENAI, validate_embeddings, _embeddings),
    Endpoint("GET", "/v1/models", None, None, _models),
)
