"""Relay's error bodies make the official SDKs raise their proper exception classes."""

from __future__ import annotations

import json

import anthropic
import httpx2
import openai
import pytest

from adapters.anthropic import ADAPTER as MESSAGES
from adapters.openai import ADAPTER as CHAT


def transport(status: int, body: dict[str, object]) -> httpx2.Client:
    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, content=json.dumps(body).encode(), headers={"content-type": "application/json"})

    return httpx2.Client(transport=httpx2.MockTransport(answer))


@pytest.mark.parametrize(("status", "exception"), [
    (400, openai.BadRequestError), (401, openai.AuthenticationError), (403, openai.PermissionDeniedError),
    (404, openai.NotFoundError), (429, openai.RateLimitError), (502, openai.InternalServerError),
])
def test_the_openai_sdk_raises_its_class_for_each_status(status: int, exception: type[Exception]) -> None:
    client = openai.OpenAI(api_key="k", base_url="http://relay.test/v1", max_retries=0,
                           http_client=transport(status, CHAT.error_body(status, "some_code", "nope")))
    with pytest.raises(exception) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.code == "some_code"  # type: ignore[attr-defined]
    assert "nope" in str(caught.value)


@pytest.mark.parametrize(("status", "exception"), [
    (400, anthropic.BadRequestError), (401, anthropic.AuthenticationError),
    (403, anthropic.PermissionDeniedError), (404, anthropic.NotFoundError), (429, anthropic.RateLimitError),
    (500, anthropic.InternalServerError), (529, anthropic.OverloadedError),
])
def test_the_anthropic_sdk_raises_its_class_for_each_status(status: int, exception: type[Exception]) -> None:
    client = anthropic.Anthropic(api_key="k", base_url="http://relay.test", max_retries=0,
                                 http_client=transport(status, MESSAGES.error_body(status, "some_code", "nope")))
    with pytest.raises(exception) as caught:
        client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert "nope" in str(caught.value)
