"""The official openai and anthropic SDKs, pointed at a real `relay api`, work unchanged."""

from __future__ import annotations

import anthropic
import openai
import pytest
import requests

pytestmark = pytest.mark.integration

MESSAGES = [{"role": "user", "content": "Hello from the SDK"}]


@pytest.fixture(params=["/v1", "/openai/v1"])
def oai(request, relay_api, make_key):  # type: ignore[no-untyped-def]
    return openai.OpenAI(base_url=relay_api.url + request.param, api_key=make_key(), max_retries=0)


@pytest.fixture(params=["", "/anthropic"])
def claude(request, relay_api, make_key):  # type: ignore[no-untyped-def]
    return anthropic.Anthropic(base_url=relay_api.url + request.param, api_key=make_key(), max_retries=0)


def test_openai_sdk_chat(oai) -> None:
    out = oai.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert out.choices[0].message.content
    assert out.usage.prompt_tokens > 0


def test_openai_sdk_chat_streaming(oai) -> None:
    chunks = list(oai.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_openai_sdk_responses(oai) -> None:
    out = oai.responses.create(model="gpt-5-responses", input="Hello")
    assert out.output_text


def test_openai_sdk_responses_streaming(oai) -> None:
    events = list(oai.responses.create(model="gpt-5-responses", input="Hello", stream=True))
    assert events[-1].type == "response.completed"


def test_openai_sdk_embeddings(oai) -> None:
    out = oai.embeddings.create(model="text-embedding", input="Hello")
    assert out.data[0].embedding


def test_openai_sdk_sees_relay_errors_as_its_own_exceptions(oai) -> None:
    with pytest.raises(openai.NotFoundError):
        oai.chat.completions.create(model="no-such-model", messages=MESSAGES)


def test_anthropic_sdk_messages(claude) -> None:
    out = claude.messages.create(model="claude-sonnet", max_tokens=50, messages=MESSAGES)
    assert out.content[0].text
    assert out.usage.output_tokens > 0


def test_anthropic_sdk_messages_streaming(claude) -> None:
    with claude.messages.stream(model="claude-sonnet", max_tokens=50, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.usage.output_tokens > 0


def test_an_old_style_client_sending_x_api_key_works(relay_api, make_key) -> None:
    res = requests.post(relay_api.url + "/v1/messages", timeout=30,
                        headers={"x-api-key": make_key(), "anthropic-version": "2023-06-01"},
                        json={"model": "claude-sonnet", "max_tokens": 20, "messages": MESSAGES})
    assert res.status_code == 200
    assert res.json()["content"][0]["text"]


def test_anthropic_sdk_sees_relay_errors_as_its_own_exceptions(relay_api, make_key) -> None:
    client = anthropic.Anthropic(base_url=relay_api.url, api_key=make_key("narrow"), max_retries=0)
    with pytest.raises(anthropic.PermissionDeniedError):
        client.messages.create(model="claude-sonnet", max_tokens=5, messages=MESSAGES)
