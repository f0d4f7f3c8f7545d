"""Deletes racing other requests on a real `relay api` and workers: a batch deleted while its results are read
gives every reader (Relay's JSON and JSON Lines, merged or not, OpenAI's output file, Anthropic's results) a
visibly cut stream, never a shorter document that parses as whole (the stream took "no more rows" for the end: a
well-formed 200 with 2,000 of 2,100 results); of DELETEs racing for one batch, one deletes it and the others
get its 404 (they got `409 batch_not_finished`, "still has N queued")."""

from __future__ import annotations

import http.client
import io
import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import anthropic
import openai
import pytest
import requests

from devtools.fake_upstream.harness import FakeUpstream
from devtools.processes import RelayProcess
from devtools.services import ServiceUrls
from devtools.stack import MODEL, Stack, fault_catalog, upstream_key
from tests.batches.provider_helpers import jsonl, message, wait_anthropic, wait_openai

pytestmark = pytest.mark.integration

ITEMS = 2100  # more than one chunk of the results stream (2,000 items)
REPLY = "x" * 3000  # ~6 MB in the first chunk: more than the server's socket buffers hold while nobody reads


def results_catalog(upstream_url: str) -> dict[str, Any]:
    doc = fault_catalog(upstream_url)
    doc["hosts"].append({"name": "anthropic", "base_url": upstream_url,
                         "keys": [{"name": "an", "value": "sk-results-an"}]})
    doc["models"].append({"name": "claude-sonnet", "bindings": [{"host": "anthropic", "adapter": "anthropic",
                                                                 "upstream_model": "claude-sonnet-4-5"}]})
    doc["policies"][0]["key_pool"].append("an")  # the "kill" policy: both hosts
    return doc


@pytest.fixture(scope="module")
def own_stack(services: ServiceUrls, fault_upstream: FakeUpstream,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    built = Stack.on_own_services("results", upstream=fault_upstream, workdir=tmp_path_factory.mktemp("results"),
                                  catalog=results_catalog(fault_upstream.url))
    yield built
    built.close()


@pytest.fixture()
def results_stack(own_stack: Stack) -> Iterator[Stack]:
    """The module's stack for one test; every process the test started is killed afterwards."""
    yield own_stack
    own_stack.stop_processes()


def open_stream(api: RelayProcess, path: str, key: str) -> tuple[http.client.HTTPResponse, bytes]:
    """GET PATH on a socket with a tiny receive buffer, and the answer's first bytes: the stream is under way, and
    the server's writes block until the rest is read."""
    parts = urlsplit(api.url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(60)
    sock.connect((parts.hostname or "127.0.0.1", parts.port or 80))
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port)
    conn.sock = sock
    conn.request("GET", path, headers={"Authorization": f"Bearer {key}"})
    answer = conn.getresponse()
    assert answer.status == 200, answer.read()[:500]
    return answer, answer.read(4096)


def whole(stream: tuple[http.client.HTTPResponse, bytes]) -> bytes:
    answer, first = stream
    try:
        return first + answer.read()
    except http.client.IncompleteRead as cut:  # a cut in the HTTP framing would be a visible cut too
        return first + cut.partial + b"\x00framing-cut"


def test_a_batch_deleted_while_its_results_are_read_gives_every_reader_a_visibly_cut_stream(
        results_stack: Stack, fresh_upstream: FakeUpstream) -> None:
    stack = results_stack
    key = stack.new_key("kill")
    for upstream in (upstream_key("kill"), "sk-results-an"):
        fresh_upstream.control(upstream, reply=REPLY)
    api = stack.start_api()
    stack.start_worker(threads=8)
    stack.start_worker(threads=8)
    oai = openai.OpenAI(base_url=api.url + "/v1", api_key=key, max_retries=0)
    claude = anthropic.Anthropic(base_url=api.url, api_key=key, max_retries=0)

    lines = [{"custom_id": f"r{i}", "model": MODEL, "messages": [{"role": "user", "content": f"q{i}"}]}
             for i in range(ITEMS)]
    uploaded = oai.files.create(file=("in.jsonl", io.BytesIO(jsonl(lines))), purpose="batch")
    openai_batch = oai.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                      completion_window="24h")
    anthropic_batch = claude.messages.batches.create(
        requests=[{"custom_id": f"m{i}", "params": {**message(f"q{i}"), "max_tokens": 4096}} for i in range(ITEMS)])
    done = wait_openai(oai, openai_batch.id, timeout=180)
    wait_anthropic(claude, anthropic_batch.id, timeout=180)
    assert done.request_counts.completed == ITEMS

    streams = {
        "json": open_stream(api, f"/v1/batches/{openai_batch.id}/results", key),
        "jsonl": open_stream(api, f"/v1/batches/{openai_batch.id}/results?format=jsonl", key),
        "merged": open_stream(api, f"/v1/batches/{openai_batch.id}/results?format=jsonl&merged=true", key),
        "openai": open_stream(api, f"/v1/files/{done.output_file_id}/content", key),
        "anthropic": open_stream(api, f"/v1/messages/batches/{anthropic_batch.id}/results", key),
    }
    time.sleep(0.5)  # every stream's server side is blocked writing the first chunk
    for path in (f"/v1/batches/{openai_batch.id}", f"/v1/messages/batches/{anthropic_batch.id}"):
        deleted = requests.delete(api.url + path, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert deleted.status_code == 200, deleted.text
    bodies = {name: whole(stream) for name, stream in streams.items()}

    assert bodies["json"].startswith(b'{"results":[{"idx":0,')
    assert bodies["json"].count(b'{"idx":') < ITEMS
    with pytest.raises(ValueError):
        json.loads(bodies["json"])  # no closing bracket: not a document
    for name in ("jsonl", "merged", "openai", "anthropic"):
        *results, last = bodies[name].rstrip(b"\n").split(b"\n")
        cut = json.loads(last)
        error = cut["result"]["error"]["error"] if name == "anthropic" else cut["error"]
        assert error["code"] == "results_incomplete", (name, last[:300])
        assert 0 < len(results) < ITEMS


def test_of_deletes_racing_for_a_finished_batch_one_deletes_it_and_the_others_get_404(results_stack: Stack) -> None:
    stack = results_stack
    key = stack.new_key("kill")
    api = stack.start_api()
    headers = {"Authorization": f"Bearer {key}"}
    answers: list[tuple[int, str]] = []
    for _ in range(4):
        batch_id = stack.submit(key, "race", 1000)  # no worker runs: the cancel makes every item final
        assert stack.call(key, "POST", f"/v1/batches/{batch_id}/cancel").status_code == 200
        stack.wait_finished(key, batch_id)

        def delete(_: int, batch_id: str = batch_id) -> tuple[int, str]:
            res = requests.delete(f"{api.url}/v1/batches/{batch_id}", headers=headers, timeout=30)
            return res.status_code, res.json().get("error", {}).get("code", "")

        with ThreadPoolExecutor(8) as pool:
            raced = list(pool.map(delete, range(8)))
        assert raced.count((200, "")) == 1, raced
        answers += raced
    assert {answer for answer in answers if answer[0] != 200} == {(404, "batch_not_found")}
