"""The official openai SDK, unchanged, talks to the fake upstream: bodies, streams and errors parse."""

from __future__ import annotations

import math

import openai
import pytest

from devtools.fake_upstream import count_tokens, plan_turn
from devtools.fake_upstream.harness import FakeUpstream

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me about the sea."}]


@pytest.fixture()
def client(upstream: FakeUpstream) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-openai-test", base_url=upstream.openai_base_url, max_retries=0)


def test_chat_create_echoes_the_last_user_message_with_usage(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    turn = plan_turn("chat", {"messages": MESSAGES})
    assert completion.id.startswith("chatcmpl-")
    assert completion.object == "chat.completion"
    assert completion.model == "gpt-4o-mini"
    assert completion.choices[0].message.content == "Tell me about the sea."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == count_tokens("Be brief.\nTell me about the sea.") == turn.input_tokens
    assert completion.usage.completion_tokens == count_tokens("Tell me about the sea.")
    assert completion.usage.total_tokens == turn.total_tokens
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 0


def test_chat_stream_gives_the_same_text_and_a_final_usage_chunk(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True,  # type: ignore[arg-type]
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Tell me about the sea."
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == plan_turn("chat", {"messages": MESSAGES}).total_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_stream_without_include_usage_has_no_usage_chunk(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))  # type: ignore[arg-type]
    assert all(c.choices for c in chunks)


def test_chat_max_tokens_truncates_the_reply(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="m", messages=MESSAGES, max_completion_tokens=2)  # type: ignore[arg-type]
    assert completion.choices[0].message.content == "Tell me "
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 2


def test_responses_create_returns_a_response_object(client: openai.OpenAI) -> None:
    response = client.responses.create(model="gpt-5", input="What is a tide?", instructions="Answer well.")
    assert response.id.startswith("resp_")
    assert response.object == "response"
    assert response.status == "completed"
    assert response.model == "gpt-5"
    assert response.output_text == "What is a tide?"
    assert response.usage is not None
    assert response.usage.input_tokens == count_tokens("Answer well.\nWhat is a tide?")
    assert response.usage.output_tokens == count_tokens("What is a tide?")
    assert response.usage.input_tokens_details.cached_tokens == 0
    assert response.usage.output_tokens_details.reasoning_tokens == 0


def test_responses_raw_stream_ends_with_completed_usage(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model="gpt-5", input=[{"role": "user", "content": "Hello waves"}],
                                          stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response  # type: ignore[union-attr]
    assert final.usage is not None and final.usage.output_tokens == count_tokens("Hello waves")
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Hello waves"


def test_responses_stream_helper_builds_the_final_response(client: openai.OpenAI) -> None:
    with client.responses.stream(model="gpt-5", input="Stream me, please") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Stream me, please"
    assert final.output_text == "Stream me, please"
    assert final.usage is not None and final.usage.total_tokens == plan_turn(
        "responses", {"input": "Stream me, please"}).total_tokens


def test_responses_max_output_tokens_gives_an_incomplete_response(client: openai.OpenAI) -> None:
    response = client.responses.create(model="gpt-5", input="a long question indeed", max_output_tokens=1)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "a lo"


def test_embeddings_decode_with_the_sdk_default_base64(client: openai.OpenAI) -> None:
    result = client.embeddings.create(model="text-embedding-3-small", input=["alpha", "beta gamma"])
    assert [d.index for d in result.data] == [0, 1]
    assert len(result.data[0].embedding) == 1536
    assert math.isclose(sum(x * x for x in result.data[0].embedding), 1.0, rel_tol=1e-4)
    assert result.usage.prompt_tokens == count_tokens("alpha") + count_tokens("beta gamma")
    again = client.embeddings.create(model="text-embedding-3-small", input="alpha", encoding_format="float",
                                     dimensions=8)
    assert len(again.data[0].embedding) == 8


def test_embeddings_are_deterministic_per_text(client: openai.OpenAI) -> None:
    first = client.embeddings.create(model="e", input="same", dimensions=16).data[0].embedding
    second = client.embeddings.create(model="e", input=["other", "same"], dimensions=16).data[1].embedding
    assert first == second


def test_models_list(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert "gpt-4o-mini" in ids and "text-embedding-3-small" in ids


def test_sdk_raises_authentication_error_for_an_invalid_key(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.control("sk-openai-test", mode="invalid")
    with pytest.raises(openai.AuthenticationError) as raised:
        client.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    assert raised.value.status_code == 401
    assert raised.value.code == "invalid_api_key"
    assert "sk-openai-test" not in raised.value.message


def test_sdk_raises_rate_limit_error_with_retry_after(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.control("sk-openai-test", mode="rate_limited", retry_after=7)
    with pytest.raises(openai.RateLimitError) as raised:
        client.responses.create(model="gpt-5", input="hi")
    assert raised.value.response.headers["retry-after"] == "7"
    assert raised.value.code == "rate_limit_exceeded"


def test_sdk_raises_bad_request_for_a_chat_body_sent_to_responses(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="gpt-5", input="hi", extra_body={"messages": MESSAGES})
    assert raised.value.param == "messages"
    assert raised.value.type == "invalid_request_error"


def test_sdk_retries_reach_the_upstream_after_a_failure(upstream: FakeUpstream) -> None:
    upstream.control("sk-flaky", mode="fail", fail_status=503, times=1)
    client = openai.OpenAI(api_key="sk-flaky", base_url=upstream.openai_base_url, max_retries=2)
    completion = client.with_options(timeout=10).chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    assert completion.choices[0].message.content == "Tell me about the sea."
    assert upstream.stats()["by_status"] == {"503": 1, "200": 1}
