"""Every file and folder Relay writes has RELAY_BATCH_PAYLOAD_MODE's modes, whatever the umask: batch payloads
(request files, response segments, their folders) and uploaded files (which hold every prompt of a batch, and
were 0644 in 0755 folders), written by a real `relay api` and `relay worker`."""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
import requests

from devtools.stack import MODEL, Stack
from tests.batches.provider_helpers import jsonl, wait_openai

pytestmark = pytest.mark.integration

FILE_MODE, DIR_MODE = 0o640, 0o750  # the setting, and the folders' mode it gives


def modes_under(root: Path) -> dict[str, int]:
    """Every path under ROOT (ROOT itself as "."), relative, with its permission bits."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def test_every_file_and_folder_relay_writes_has_the_configured_modes(
        security_stack: Stack, issue: Callable[..., dict[str, Any]], tmp_path: Path) -> None:
    stack = security_stack
    root = tmp_path / "payloads"  # Relay creates it
    settings = {"batch_payload_dir": str(root), "batch_payload_mode": f"{FILE_MODE:04o}"}
    api = stack.start_api(**settings)
    stack.start_worker(threads=4, **settings)
    key = issue("key", "svc-a")["secret"]
    headers = {"Authorization": f"Bearer {key}"}
    try:
        submitted = requests.post(f"{api.url}/v1/batches", headers=headers, timeout=30, json={
            "shape": "openai", "requests": [{"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}] * 3})
        assert submitted.status_code == 202, submitted.text
        oai = openai.OpenAI(base_url=api.url + "/v1", api_key=key, max_retries=0)
        lines = [{"custom_id": f"m{i}", "model": MODEL, "messages": [{"role": "user", "content": f"q{i}"}]}
                 for i in range(3)]
        uploaded = oai.files.create(file=("prompts.jsonl", io.BytesIO(jsonl(lines))), purpose="batch")
        created = oai.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                     completion_window="24h")
        assert wait_openai(oai, created.id).request_counts.completed == 3
        stack.wait_finished(key, submitted.json()["id"])
    finally:
        stack.stop_processes()

    modes = modes_under(root)
    kinds = {"folders": [p for p in modes if (root / p).is_dir()], "files": [p for p in modes if (root / p).is_file()]}
    assert {".", ".staging", "files", "files/.staging"} <= set(kinds["folders"])
    assert sum(p.endswith("/requests.bin") for p in kinds["files"]) == 2
    assert sum(p.endswith(".seg") for p in kinds["files"]) >= 2
    assert sum(p.startswith("files/") and not p.startswith("files/.staging") for p in kinds["files"]) == 1
    wrong = {p: f"{m:04o}" for p, m in modes.items() if m != (DIR_MODE if p in kinds["folders"] else FILE_MODE)}
    assert not wrong
