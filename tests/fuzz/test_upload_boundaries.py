"""`POST /v1/files` on a real `relay api`: JSONL uploads of 1 to 5 MB are kept byte for byte wherever their line
breaks fall against the form parser's reads (werkzeug refused one whose line break fell near a read's end with
`413 file_too_large`), and only a body past the size limit is `file_too_large`."""

from __future__ import annotations

import io
import json
import random
import re
from collections.abc import Iterator

import openai
import pytest
import requests

from devtools.processes import RelayProcess
from devtools.stack import Stack

pytestmark = pytest.mark.integration

READ = 64 * 1024  # what the upload's form parser reads at a time
BOUNDARY = "relay-upload-test-boundary-0123456789"
OFFSETS = range(-8, 72)  # line breaks this many bytes before a read's last byte (negative: just after it)


@pytest.fixture(scope="module")
def api(fuzz_stack: Stack) -> Iterator[RelayProcess]:
    proc = fuzz_stack.start_api()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def key(fuzz_stack: Stack, api: RelayProcess) -> str:
    return fuzz_stack.new_key("kill")


def request_line(idx: int, length: int) -> bytes:
    """One batch input line of exactly LENGTH bytes, its line break included."""
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": ""}]}
    bare = json.dumps({"custom_id": f"r{idx}", "method": "POST", "url": "/v1/chat/completions", "body": body})
    body["messages"][0]["content"] = "x" * (length - len(bare) - 1)
    line = json.dumps({"custom_id": f"r{idx}", "method": "POST", "url": "/v1/chat/completions",
                       "body": body}).encode() + b"\n"
    assert len(line) == length
    return line


def form(content: bytes, *, purpose: str = "batch") -> tuple[bytes, bytes]:
    """The multipart body's head (purpose field, file part headers) and tail around CONTENT."""
    head = (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n{purpose}\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="input.jsonl"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    return head, f"\r\n--{BOUNDARY}--\r\n".encode()


def file_with_breaks_at_every_offset() -> bytes:
    """A JSONL file (~5 MB) whose line break falls, for read number k of the body, OFFSETS[k] bytes before that
    read's last byte, with ordinary 200-byte lines in between."""
    head_length = len(form(b"")[0])
    lines: list[bytes] = []
    size = 0
    for k, offset in enumerate(OFFSETS, start=1):
        target = k * READ - 1 - offset - head_length  # the file offset of this read's line break
        while target - size > 2 * 200:
            lines.append(request_line(len(lines), 200))
            size += 200
        lines.append(request_line(len(lines), target - size + 1))
        size = target + 1
    return b"".join(lines)


def ordinary_file(megabytes: int, seed: int) -> bytes:
    rng = random.Random(seed)
    lines: list[bytes] = []
    size = 0
    while size < megabytes * 1_000_000:
        lines.append(request_line(len(lines), rng.randint(200, 900)))
        size += len(lines[-1])
    return b"".join(lines)


def content_of(api: RelayProcess, key: str, file_id: str) -> bytes:
    res = requests.get(f"{api.url}/v1/files/{file_id}/content", headers={"Authorization": f"Bearer {key}"},
                       timeout=60)
    assert res.status_code == 200, res.text
    return res.content


def post_form(api: RelayProcess, key: str, body: bytes) -> requests.Response:
    return requests.post(f"{api.url}/v1/files", data=body, timeout=120,
                         headers={"Authorization": f"Bearer {key}",
                                  "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})


def test_an_upload_with_a_line_break_at_every_offset_around_the_read_size_is_kept_byte_for_byte(
        api: RelayProcess, key: str) -> None:
    content = file_with_breaks_at_every_offset()
    head, tail = form(content)
    body = head + content + tail
    breaks = {(READ - 1 - found.start()) % READ for found in re.compile(b"\n").finditer(body, len(head))}
    assert {o % READ for o in OFFSETS} <= breaks  # the body really puts a line break at every offset
    res = post_form(api, key, body)
    assert res.status_code == 200, res.text
    assert res.json()["bytes"] == len(content)
    assert content_of(api, key, res.json()["id"]) == content


@pytest.mark.parametrize("megabytes", [1, 2, 3, 5])
def test_ordinary_jsonl_files_of_1_to_5_mb_upload_through_the_openai_sdk(
        api: RelayProcess, key: str, megabytes: int) -> None:
    oai = openai.OpenAI(base_url=api.url + "/v1", api_key=key, max_retries=0)
    content = ordinary_file(megabytes, seed=megabytes)
    uploaded = oai.files.create(file=("requests.jsonl", io.BytesIO(content)), purpose="batch")
    assert uploaded.bytes == len(content)
    assert oai.files.content(uploaded.id).content == content


def test_a_form_field_past_the_forms_limit_is_form_too_large_not_file_too_large(api: RelayProcess, key: str) -> None:
    head, tail = form(b"", purpose="b" * (2 << 20))
    res = post_form(api, key, head + request_line(0, 300) + tail)
    assert res.status_code == 413, res.text
    assert res.json()["error"]["code"] == "form_too_large"
