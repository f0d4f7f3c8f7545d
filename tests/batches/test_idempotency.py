"""Idempotency keys on every create, and re-runs that a double click or a retry cannot double: on the real API app,
Postgres and the workers."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest

from tests.batches.helpers import CHAT, submit, wait_finished
from tests.batches.provider_helpers import chat, jsonl, message

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_upstream")]
MISSING = {**CHAT, "model": "no-such-model"}  # discarded unrun: model_not_found


def _headers(key: str, idem: str | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **({"Idempotency-Key": idem} if idem else {})}


def _batch_rows(runtime: Any, owner_like: str) -> int:
    with runtime.pool.connection() as conn:
        return int(conn.execute("SELECT count(*) AS n FROM batches WHERE metadata->>'tag' = %s",
                                (owner_like,)).fetchone()["n"])


def test_a_submit_retried_with_its_key_answers_the_first_answer_and_creates_nothing(client, key, runtime) -> None:
    body = {"shape": "openai", "requests": [CHAT], "metadata": {"tag": "idem-submit"}}
    first = client.post("/v1/batches", json=body, headers=_headers(key, "submit-1"))
    again = client.post("/v1/batches", json=body, headers=_headers(key, "submit-1"))
    assert first.status_code == again.status_code == 202, again.get_data(as_text=True)
    assert again.json["id"] == first.json["id"] and again.get_data() == first.get_data()
    assert again.headers["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first.headers
    assert _batch_rows(runtime, "idem-submit") == 1


def test_the_same_key_with_another_body_is_a_409_and_keys_of_other_callers_never_meet(client, key, make_key,
                                                                                      runtime) -> None:
    body = {"shape": "openai", "requests": [CHAT], "metadata": {"tag": "idem-other"}}
    first = client.post("/v1/batches", json=body, headers=_headers(key, "shared-key"))
    assert first.status_code == 202
    changed = client.post("/v1/batches", json={**body, "requests": [CHAT, CHAT]}, headers=_headers(key, "shared-key"))
    assert changed.status_code == 409 and changed.json["error"]["code"] == "idempotency_key_reused"
    elsewhere = client.post("/v1/batches", json=body, headers=_headers(str(make_key()["key"]), "shared-key"))
    assert elsewhere.status_code == 202 and elsewhere.json["id"] != first.json["id"]
    assert _batch_rows(runtime, "idem-other") == 2


def test_a_refused_create_leaves_its_key_free_and_a_bad_key_is_a_400(client, key) -> None:
    refused = client.post("/v1/batches", json={"shape": "openai", "requests": []}, headers=_headers(key, "fix-me"))
    assert refused.status_code == 400
    fixed = client.post("/v1/batches", json={"shape": "openai", "requests": [CHAT]}, headers=_headers(key, "fix-me"))
    assert fixed.status_code == 202, fixed.get_data(as_text=True)
    for bad in (" ", "x" * 256, "caf\u00e9"):
        res = client.post("/v1/batches", json={"shape": "openai", "requests": [CHAT]},
                          headers={"Authorization": f"Bearer {key}", "Idempotency-Key": bad})
        assert res.status_code == 400 and res.json["error"]["code"] == "invalid_idempotency_key"


def test_concurrent_submits_with_one_key_make_one_batch(app, key, runtime) -> None:
    body = {"shape": "openai", "requests": [CHAT] * 20, "metadata": {"tag": "idem-race"}}

    def send(_: int) -> Any:
        return app.test_client().post("/v1/batches", json=body, headers=_headers(key, "race-key"))

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(send, range(6)))
    assert {a.status_code for a in answers} == {202}
    assert len({a.json["id"] for a in answers}) == 1
    assert _batch_rows(runtime, "idem-race") == 1


def _finished_with_discards(client: Any, key: str, tag: str) -> dict[str, Any]:
    res = submit(client, key, [CHAT, MISSING, MISSING, MISSING], metadata={"tag": tag})
    assert res.status_code == 202, res.get_data(as_text=True)
    done = wait_finished(client, key, res.json["id"])
    assert done["counts"]["discarded"] == 3
    return done


def _reruns_of(runtime: Any, batch_id: str) -> int:
    with runtime.pool.connection() as conn:
        return int(conn.execute("SELECT count(*) AS n FROM batches WHERE rerun_of = %s", (batch_id,)).fetchone()["n"])


def test_concurrent_reruns_without_a_key_make_one_batch_and_the_others_name_it(app, client, key, runtime) -> None:
    done = _finished_with_discards(client, key, "idem-rerun")

    def rerun(_: int) -> Any:
        return app.test_client().post(f"/v1/batches/{done['id']}/rerun", json={}, headers=_headers(key))

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(rerun, range(4)))
    made = [a for a in answers if a.status_code == 202]
    refused = [a for a in answers if a.status_code != 202]
    assert len(made) == 1 and len(refused) == 3, [a.get_data(as_text=True) for a in answers]
    for res in refused:
        assert res.status_code == 409 and res.json["error"]["code"] == "rerun_exists"
        assert res.json["error"]["details"] == {"rerun_id": made[0].json["id"], "items": 3}
    wait_finished(client, key, made[0].json["id"])
    later = client.post(f"/v1/batches/{done['id']}/rerun", json={}, headers=_headers(key))
    assert later.status_code == 409 and later.json["error"]["details"]["rerun_id"] == made[0].json["id"]
    forced = client.post(f"/v1/batches/{done['id']}/rerun", json={"force": True}, headers=_headers(key))
    assert forced.status_code == 202 and forced.json["id"] != made[0].json["id"]
    assert _reruns_of(runtime, done["id"]) == 2


def test_a_rerun_retried_with_its_key_answers_the_same_batch(app, client, key, runtime) -> None:
    done = _finished_with_discards(client, key, "idem-rerun-key")

    def rerun(_: int) -> Any:
        return app.test_client().post(f"/v1/batches/{done['id']}/rerun", json={}, headers=_headers(key, "rr-1"))

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(rerun, range(4)))
    assert {a.status_code for a in answers} == {202}
    assert len({a.json["id"] for a in answers}) == 1
    assert _reruns_of(runtime, done["id"]) == 1


def test_an_upload_and_the_provider_creates_retried_with_their_keys_create_nothing_more(client, key) -> None:
    content = jsonl([{"custom_id": "a", **chat("one")}, {"custom_id": "b", **chat("two")}])

    def upload() -> Any:  # werkzeug draws a new multipart boundary each time, as an SDK's retry does
        return client.post("/v1/files", data={"purpose": "batch", "file": (io.BytesIO(content), "in.jsonl")},
                           headers=_headers(key, "upload-1"))

    first, again = upload(), upload()
    assert first.status_code == again.status_code == 200, again.get_data(as_text=True)
    assert again.json["id"] == first.json["id"]
    create = {"input_file_id": first.json["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    made = [client.post(path, json=create, headers=_headers(key, "oai-create-1"))
            for path in ("/openai/v1/batches", "/openai/v1/batches")]
    assert {m.status_code for m in made} == {200} and made[0].json["id"] == made[1].json["id"]
    other_route = client.post("/v1/batches", json=create, headers=_headers(key, "oai-create-1"))
    assert other_route.status_code == 409  # another path is another request
    body = {"requests": [{"custom_id": "a", "params": message("hello")}]}
    created = [client.post("/v1/messages/batches", json=body, headers=_headers(key, "anth-1")) for _ in range(2)]
    assert {c.status_code for c in created} == {200} and created[0].json["id"] == created[1].json["id"]
    reused = client.post("/v1/messages/batches", json={"requests": [{"custom_id": "b", "params": message("x")}]},
                         headers=_headers(key, "anth-1"))
    assert reused.status_code == 409 and reused.json["error"]["type"] and "idempotency_key_reused" in \
        reused.get_data(as_text=True)


def test_the_openai_sdk_retrying_with_its_key_on_a_real_server_gets_the_same_file_and_batch(relay_api, key) -> None:
    oai = openai.OpenAI(base_url=relay_api.url + "/v1", api_key=key, max_retries=0)
    content = jsonl([{"custom_id": "a", **chat("one")}])
    files = [oai.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch",
                              extra_headers={"Idempotency-Key": "sdk-upload"}) for _ in range(2)]
    assert files[0].id == files[1].id
    batches = [oai.batches.create(input_file_id=files[0].id, endpoint="/v1/chat/completions",
                                  completion_window="24h", extra_headers={"Idempotency-Key": "sdk-create"})
               for _ in range(2)]
    assert batches[0].id == batches[1].id
    with pytest.raises(openai.ConflictError) as refused:
        oai.batches.create(input_file_id=files[0].id, endpoint="/v1/chat/completions", completion_window="24h",
                           metadata={"other": "body"}, extra_headers={"Idempotency-Key": "sdk-create"})
    assert refused.value.code == "idempotency_key_reused"


def test_a_key_older_than_24_hours_creates_again(client, key, runtime) -> None:
    body = {"shape": "openai", "requests": [CHAT], "metadata": {"tag": "idem-old"}}
    first = client.post("/v1/batches", json=body, headers=_headers(key, "old-key"))
    with runtime.pool.connection() as conn:
        conn.execute("UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE key = 'old-key'")
    later = client.post("/v1/batches", json=body, headers=_headers(key, "old-key"))
    again = client.post("/v1/batches", json=body, headers=_headers(key, "old-key"))
    assert first.status_code == later.status_code == again.status_code == 202
    assert later.json["id"] != first.json["id"] and again.json["id"] == later.json["id"]
    assert _batch_rows(runtime, "idem-old") == 2


def test_the_openapi_document_lists_the_header_and_its_409_on_every_create(client) -> None:
    paths = client.get("/openapi.json").json["paths"]
    creates = ["/v1/batches", "/v1/batches/{batch_id}/rerun", "/v1/files", "/openai/v1/files", "/openai/v1/batches",
               "/v1/messages/batches", "/anthropic/v1/messages/batches"]
    for path in creates:
        operation = paths[path]["post"]
        assert "Idempotency-Key" in [p["name"] for p in operation["parameters"] if p["in"] == "header"], path
        assert "409" in operation["responses"], path
    assert not any(p["name"] == "Idempotency-Key" for p in paths["/v1/batches/estimate"]["post"].get("parameters", []))
