"""The provider batch APIs' configurable limits, on a `relay api` of their own: an expiry for queued requests
(RELAY_PROVIDER_BATCH_EXPIRY_S), the upload size and the lines of an OpenAI input file; and a graceful stop of
such an API, which does not wait for the SDK connections it keeps idle."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator

import anthropic
import openai
import pytest

from devtools.processes import RelayProcess, start_api
from tests.batches.provider_helpers import (
    chat,
    jsonl,
    lines_of,
    message,
    usage_by_custom_id,
    wait_anthropic,
    wait_openai,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_upstream")]

EXPIRY_S = 2
MAX_REQUESTS = 20
LIMITS = {"RELAY_PROVIDER_BATCH_EXPIRY_S": str(EXPIRY_S), "RELAY_FILES_MAX_BYTES": "8192",
          "RELAY_OPENAI_BATCH_MAX_REQUESTS": str(MAX_REQUESTS)}


@pytest.fixture(scope="module")
def limited_api(settings_env, catalog, tmp_path_factory) -> Iterator[RelayProcess]:  # type: ignore[no-untyped-def]
    api = start_api({**settings_env, **LIMITS}, tmp_path_factory.mktemp("limited-api"))
    yield api
    api.stop()


def test_an_openai_batch_past_its_expiry_expires_what_is_still_queued(limited_api, make_key, upstream) -> None:  # type: ignore[no-untyped-def]
    oai = openai.OpenAI(base_url=limited_api.url + "/v1", api_key=make_key("slow")["key"], max_retries=0)
    upstream.control("sk-batch-slow", latency_ms=60_000)
    lines = [{"custom_id": f"e{i}", **chat(f"late {i}")} for i in range(MAX_REQUESTS)]
    uploaded = oai.files.create(file=("in.jsonl", io.BytesIO(jsonl(lines))), purpose="batch")
    created = oai.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert created.expires_at is not None and 1 <= created.expires_at - created.created_at <= 3
    done = wait_openai(oai, created.id, timeout=20)
    assert done.status == "expired" and done.expired_at is not None and done.output_file_id is None
    errors = lines_of(oai.files.content(done.error_file_id).content)
    expired = [e for e in errors if e["error"] and e["error"]["code"] == "batch_expired"]
    ran = [e for e in errors if e["response"]]
    assert len(expired) >= MAX_REQUESTS - 8 and len(expired) + len(ran) == MAX_REQUESTS  # at most 8 run at once
    assert {e["response"]["status_code"] for e in ran} == {504}  # stopped by the item time limit
    assert upstream.stats()["total"] == len(ran)


def test_an_anthropic_batch_past_its_expiry_reports_expired_requests(limited_api, key, upstream,
                                                                     runtime) -> None:  # type: ignore[no-untyped-def]
    claude = anthropic.Anthropic(base_url=limited_api.url, api_key=key, max_retries=0)
    upstream.control("sk-batch-an", latency_ms=60_000)
    created = claude.messages.batches.create(requests=[{"custom_id": f"x{i}", "params": message(f"late {i}")}
                                                       for i in range(20)])
    assert created.expires_at is not None and 1 <= (created.expires_at - created.created_at).total_seconds() <= 3
    done = wait_anthropic(claude, created.id, timeout=20)
    kinds = [r.result.type for r in claude.messages.batches.results(done.id)]
    assert done.request_counts.expired == kinds.count("expired") >= 12  # at most 8 run at once
    assert done.request_counts.errored == kinds.count("errored") == upstream.stats()["total"]
    assert len(kinds) == 20 and len(usage_by_custom_id(runtime, done.id)) == 20


def test_an_upload_past_the_size_limit_is_a_413(limited_api, key) -> None:  # type: ignore[no-untyped-def]
    oai = openai.OpenAI(base_url=limited_api.url + "/v1", api_key=key, max_retries=0)
    with pytest.raises(openai.APIStatusError) as refused:
        oai.files.create(file=("big.jsonl", io.BytesIO(b"x" * 9000)), purpose="batch")
    assert refused.value.status_code == 413 and refused.value.body["code"] == "file_too_large"
    assert all(f.filename != "big.jsonl" for f in oai.files.list())


def test_an_input_file_past_the_request_limit_is_a_413(limited_api, key) -> None:  # type: ignore[no-untyped-def]
    oai = openai.OpenAI(base_url=limited_api.url + "/v1", api_key=key, max_retries=0)
    lines = [{"custom_id": f"n{i}", **chat("hi")} for i in range(MAX_REQUESTS + 1)]
    uploaded = oai.files.create(file=("many.jsonl", io.BytesIO(jsonl(lines))), purpose="batch")
    with pytest.raises(openai.APIStatusError) as refused:
        oai.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert refused.value.status_code == 413 and refused.value.body["code"] == "batch_too_large"


def test_a_graceful_stop_does_not_wait_out_the_keep_alive_of_idle_sdk_connections(  # type: ignore[no-untyped-def]
        settings_env, catalog, key, tmp_path) -> None:
    api = start_api({**settings_env, **LIMITS}, tmp_path)
    oai = openai.OpenAI(base_url=api.url + "/v1", api_key=key, max_retries=0)
    assert oai.files.list() is not None  # its connection is then kept alive, idle (up to the 15 s header deadline)
    started = time.monotonic()
    api.stop()
    took = time.monotonic() - started
    oai.close()
    assert api.proc.returncode == 0, api.log()[-2000:]
    assert took < 8, f"the stop waited {took:.1f} s for an idle connection"
