"""What the provider views' batch objects carry beyond the basics, through the unmodified SDKs: OpenAI's `model` and
exact `usage`, and each provider's answer to cancelling a batch whose processing has ended."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.batches.provider_helpers import chat, jsonl, message, usage_by_custom_id, wait_anthropic, wait_openai
from tests.batches.test_anthropic_api import client as anthropic_client
from tests.batches.test_openai_api import client as openai_client
from tests.batches.test_openai_api import upload

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_upstream")]


@pytest.mark.parametrize("prefix", ["/v1", "/openai/v1"])
def test_an_openai_batch_names_its_model_and_once_ended_its_exact_usage(relay_api, make_key, runtime,  # type: ignore[no-untyped-def]
                                                                        prefix) -> None:
    oai = openai_client(relay_api, make_key()["key"], prefix)
    lines = [{"custom_id": f"u-{i}", **chat(f"count my tokens {i}")} for i in range(3)]
    created = oai.batches.create(input_file_id=upload(oai, jsonl(lines)).id, endpoint="/v1/chat/completions",
                                 completion_window="24h")
    assert created.model == "gpt-4o-mini" and created.usage is None  # not known before the batch has ended
    done = wait_openai(oai, created.id)
    events = usage_by_custom_id(runtime, done.id)
    assert done.model == "gpt-4o-mini" and done.usage is not None
    assert done.usage.input_tokens == sum(e["input_tokens"] for e in events.values()) > 0
    assert done.usage.output_tokens == sum(e["output_tokens"] for e in events.values()) > 0
    assert done.usage.input_tokens_details.cached_tokens == sum(e["cached_tokens"] for e in events.values())
    assert done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens
    assert done.usage.output_tokens_details.reasoning_tokens == 0
    listed = next(b for b in oai.batches.list() if b.id == done.id)
    assert listed.usage == done.usage and listed.model == "gpt-4o-mini"


@pytest.mark.parametrize("prefix", ["/v1", "/openai/v1"])
def test_cancelling_an_ended_openai_batch_is_a_409_as_openai_answers(relay_api, key, prefix) -> None:  # type: ignore[no-untyped-def]
    oai = openai_client(relay_api, key, prefix)
    created = oai.batches.create(input_file_id=upload(oai, jsonl([{"custom_id": "a", **chat("hi")}])).id,
                                 endpoint="/v1/chat/completions", completion_window="24h")
    assert wait_openai(oai, created.id).status == "completed"
    with pytest.raises(openai.ConflictError) as refused:
        oai.batches.cancel(created.id)
    error = refused.value.body
    assert error["code"] == "batch_finished" and error["message"] == "Cannot cancel a batch with status 'completed'."
    assert error["type"] == "invalid_request_error"
    assert oai.batches.retrieve(created.id).status == "completed"  # nothing changed


def test_cancelling_an_ended_message_batch_is_a_409_and_changes_nothing(relay_api, key) -> None:  # type: ignore[no-untyped-def]
    claude = anthropic_client(relay_api, key)
    created = claude.messages.batches.create(requests=[{"custom_id": "a", "params": message("hi")}])
    ended = wait_anthropic(claude, created.id)
    with pytest.raises(anthropic.ConflictError) as refused:
        claude.messages.batches.cancel(created.id)
    error = refused.value.body["error"]
    assert error["code"] == "batch_finished" and error["type"] == "invalid_request_error"
    assert "has ended" in error["message"]
    after = claude.messages.batches.retrieve(created.id)
    assert after.request_counts == ended.request_counts and after.cancel_initiated_at is None
