"""OpenAI's `expires_after` (an upload) and `output_expires_after` (a batch's output and error files): the File
object says when, and from then on the file is gone. The clock is moved by moving the rows' anchors back."""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest

from app.compat.openai_view import file_disk
from devtools.waiting import until
from tests.batches.provider_helpers import batch_uuid, chat, jsonl

pytestmark = pytest.mark.integration
HOUR = 3600


def _upload(client: Any, key: str, **form: str) -> Any:
    res = client.post("/v1/files", headers={"Authorization": f"Bearer {key}"}, content_type="multipart/form-data",
                      data={"file": (io.BytesIO(jsonl([{"custom_id": "a", **chat("a")}])), "in.jsonl"),
                            "purpose": "batch", **form})
    assert res.status_code == 200, res.get_data(as_text=True)
    return res.json


def _age(runtime: Any, sql: str, row_id: uuid.UUID) -> None:
    with runtime.pool.connection() as conn:
        conn.execute(sql, (row_id,))


def test_an_upload_past_its_expiry_is_gone_and_its_bytes_removed(client, make_key, runtime) -> None:  # type: ignore[no-untyped-def]
    key = make_key()["key"]
    auth = {"Authorization": f"Bearer {key}"}
    kept = _upload(client, key)
    expiring = _upload(client, key, **{"expires_after[anchor]": "created_at", "expires_after[seconds]": str(HOUR)})
    assert (kept["expires_at"], expiring["expires_at"]) == (None, expiring["created_at"] + HOUR)
    file_id = uuid.UUID(expiring["id"].removeprefix("file-"))
    assert file_disk(runtime).path(file_id).exists()
    _age(runtime, "UPDATE files SET created_at = created_at - interval '1 hour 1 second' WHERE id = %s", file_id)
    assert client.get(f"/v1/files/{expiring['id']}", headers=auth).status_code == 404
    assert client.get(f"/v1/files/{expiring['id']}/content", headers=auth).status_code == 404
    listed = client.get("/v1/files", headers=auth).json
    assert [f["id"] for f in listed["data"]] == [kept["id"]]
    assert not file_disk(runtime).path(file_id).exists()  # removed by the list
    assert client.get(f"/v1/files/{kept['id']}", headers=auth).status_code == 200


def test_a_batches_output_files_expire_after_its_end_as_asked(client, make_key, runtime, fresh_upstream) -> None:  # type: ignore[no-untyped-def]
    key = make_key()["key"]
    auth = {"Authorization": f"Bearer {key}"}
    upload = _upload(client, key)
    created = client.post("/v1/batches", headers=auth, json={
        "input_file_id": upload["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h",
        "output_expires_after": {"anchor": "created_at", "seconds": 2 * HOUR}}).json
    read = lambda: client.get(f"/v1/batches/{created['id']}", headers=auth).json  # noqa: E731
    done = until(lambda: (batch := read())["status"] == "completed" and batch, timeout=60, what="the batch's end")
    output = client.get(f"/v1/files/{done['output_file_id']}", headers=auth).json
    assert output["expires_at"] == done["completed_at"] + 2 * HOUR
    _age(runtime, "UPDATE batches SET finished_at = finished_at - interval '2 hours 1 second' WHERE id = %s",
         batch_uuid(done["id"]))
    assert client.get(f"/v1/files/{done['output_file_id']}", headers=auth).status_code == 404
    assert client.get(f"/v1/files/{upload['id']}", headers=auth).status_code == 200  # the input had no expiry
