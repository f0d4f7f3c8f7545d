"""Values Python's json reads but nothing after it can handle: raw surrogate bytes (ED A0 80, not the \\ud800
escape), NaN / Infinity / 1e999, integers of 4,301 digits, metadata nested deep or grown huge, timestamps past
the year 9999. Each is a 4xx with a stable code at the door (in the caller's shape on inference routes), and
nothing of it is stored."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devtools.stack import MODEL, Stack
from tests.fuzz.conftest import error_code
from tests.fuzz.test_bad_input import ADMIN_JSON_ROUTES, SHAPED_ROUTES, Client

pytestmark = pytest.mark.integration

RAW_SURROGATES = [b"\xed\xa0\x80", b"x\xed\xbf\xbf", b"\xed\xb0\x80\xed\xa0\x80"]  # U+D800, U+DFFF, a reversed pair
NON_FINITE = [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e999"]
HUGE_INT = b"1" * 4301


@pytest.fixture(scope="module")
def client(fuzz_stack: Stack, fuzz_key: str) -> Client:
    return Client(fuzz_stack, fuzz_key)


def _rejected(res: Any, where: str, *statuses: int) -> dict[str, Any]:
    text = res.get_data(as_text=True)
    assert res.status_code in (statuses or (400,)), f"{where}: {res.status_code} {text[:300]}"
    body = json.loads(text)
    assert isinstance(error_code(where, body), str), f"{where}: no stable error code in {text[:300]}"
    return body  # type: ignore[no-any-return]


def _chat_with(raw: bytes, where: str) -> bytes:
    """A chat body (that is also a messages, responses, embeddings and generate body) with RAW spliced in at
    WHERE: `content`, `model`, `key`, or `number` (the value of temperature)."""
    spliced = {"content": b'{"model":"%s","messages":[{"role":"user","content":"a%sb"}],"input":"a%sb",'
                          b'"max_tokens":5}' % (MODEL.encode(), raw, raw),
               "model": b'{"model":"m%s","messages":[{"role":"user","content":"hi"}],"input":"hi","max_tokens":5}'
                        % raw,
               "key": b'{"model":"%s","messages":[{"role":"user","content":"hi"}],"input":"hi","max_tokens":5,'
                      b'"k%s":1}' % (MODEL.encode(), raw),
               "number": b'{"model":"%s","messages":[{"role":"user","content":"hi"}],"input":"hi","max_tokens":5,'
                         b'"temperature":%s}' % (MODEL.encode(), raw)}
    return spliced[where]


def _shape_of(path: str, body: dict[str, Any]) -> None:
    """Errors on /messages come in the Anthropic shape, elsewhere in the OpenAI shape."""
    if path.endswith("/messages"):
        assert body.get("type") == "error", body
    else:
        assert set(body["error"]) >= {"message", "type", "code"}, body


@pytest.mark.parametrize("raw", RAW_SURROGATES, ids=repr)
@pytest.mark.parametrize("where", ["content", "model", "key"])
def test_raw_surrogate_bytes_in_any_live_string_are_a_400_in_the_callers_shape(client: Client, raw: bytes,
                                                                                where: str) -> None:
    for path in SHAPED_ROUTES:
        body = _rejected(client.post_raw(path, _chat_with(raw, where)), path)
        _shape_of(path, body)
        assert "UTF-8" in json.dumps(body)


@pytest.mark.parametrize("raw", [*NON_FINITE, HUGE_INT], ids=lambda r: r[:12].decode())
def test_non_finite_and_4301_digit_numbers_in_a_live_body_are_a_400_never_sent_upstream(
        client: Client, fuzz_stack: Stack, raw: bytes) -> None:
    before = len(fuzz_stack.upstream.requests())
    for path in SHAPED_ROUTES:
        _shape_of(path, _rejected(client.post_raw(path, _chat_with(raw, "number")), path))
    assert len(fuzz_stack.upstream.requests()) == before


def _batch(metadata: bytes = b"null", item: bytes | None = None) -> bytes:
    item = item or b'{"model":"%s","messages":[{"role":"user","content":"hi"}]}' % MODEL.encode()
    return b'{"shape":"openai","metadata":%s,"requests":[%s]}' % (metadata, item)


def _stores_nothing(client: Client, body: bytes, *statuses: int) -> dict[str, Any]:
    before = client.stack.db_one("SELECT count(*) AS n FROM batches")["n"]
    answer = _rejected(client.post_raw("/v1/batches", body), "/v1/batches", *statuses)
    assert client.stack.db_one("SELECT count(*) AS n FROM batches")["n"] == before
    return answer


@pytest.mark.parametrize("raw", [*NON_FINITE, HUGE_INT], ids=lambda r: r[:12].decode())
def test_non_finite_and_4301_digit_numbers_in_batch_metadata_or_items_are_a_400(client: Client, raw: bytes) -> None:
    for body in (_batch(metadata=b'{"n":%s}' % raw), _batch(metadata=b'{"a":[1,{"b":%s}]}' % raw),
                 _batch(item=_chat_with(raw, "number"))):
        assert _stores_nothing(client, body)["error"]["code"] == "invalid_json"


@pytest.mark.parametrize("raw", RAW_SURROGATES, ids=repr)
def test_raw_surrogate_bytes_anywhere_in_a_batch_are_a_400(client: Client, raw: bytes) -> None:
    for body in (_batch(metadata=b'{"k":"%s"}' % raw), _batch(metadata=b'{"%s":1}' % raw),
                 _batch(item=_chat_with(raw, "content")), _batch(item=_chat_with(raw, "model"))):
        assert _stores_nothing(client, body)["error"]["code"] == "invalid_json"


@pytest.mark.parametrize("depth", [17, 100, 976])
def test_batch_metadata_nested_deeper_than_16_levels_is_a_400_and_every_read_still_works(
        client: Client, depth: int) -> None:
    nested = b'{"m":' + b"[" * (depth - 1) + b"1" + b"]" * (depth - 1) + b"}"
    answer = _stores_nothing(client, _batch(metadata=nested))
    assert "16 levels deep" in json.dumps(answer) or "nested too deeply" in answer["error"]["message"]
    assert client.call("GET", "/v1/batches").status_code == 200


def test_batch_metadata_of_16_levels_is_stored_and_read_back(client: Client) -> None:
    nested = b'{"m":' + b"[" * 15 + b"1" + b"]" * 15 + b"}"
    res = client.post_raw("/v1/batches", _batch(metadata=nested))
    assert res.status_code == 202, res.get_data(as_text=True)
    read = client.call("GET", f"/v1/batches/{res.json['id']}")
    assert read.status_code == 200 and read.json["metadata"] == json.loads(nested)
    assert client.call("GET", "/v1/batches").status_code == 200


@pytest.mark.parametrize("size", [16 * 1024 + 1, 1 << 20, 8 << 20])
def test_huge_batch_metadata_is_a_400(client: Client, size: int) -> None:
    metadata = b'{"m":"%s"}' % (b"x" * size)
    assert _stores_nothing(client, _batch(metadata=metadata))["error"]["code"] == "invalid_batch"


@pytest.mark.parametrize("expires_at", ["9999-12-31T23:00:00-05:00", "10000-01-01T00:00:00Z",
                                        "9999-12-31T23:59:59.999999-00:01", "+010000-01-01T00:00:00Z"])
def test_an_expires_at_past_the_year_9999_is_a_400(client: Client, expires_at: str) -> None:
    res = client.admin("POST", "/admin/relay-keys", json={"principal_kind": "service_account",
                                                          "principal": "faults-svc", "policy": "kill",
                                                          "expires_at": expires_at})
    assert "expires_at" in json.dumps(_rejected(res, "/admin/relay-keys"))
    assert client.admin("GET", "/admin/relay-keys").status_code == 200


@pytest.mark.parametrize("raw", RAW_SURROGATES + NON_FINITE + [HUGE_INT], ids=lambda r: repr(r[:12]))
@pytest.mark.parametrize("path", ADMIN_JSON_ROUTES)
def test_hostile_values_in_admin_bodies_are_a_4xx_with_a_code(client: Client, raw: bytes, path: str) -> None:
    bodies = [b'{"principal_kind":"service_account","principal":"faults-svc","policy":"kill","name":"%s"}' % raw,
              b'{"user":"%s","ttl_seconds":60}' % raw, b'{"grace_seconds":%s}' % raw, b'{"ttl_seconds":%s}' % raw]
    for body in bodies:
        res = client.post_raw(path, body)
        assert res.status_code < 500, f"{path}: {res.status_code} {res.get_data(as_text=True)[:300]}"
        if res.status_code >= 400:
            _rejected(res, path, res.status_code)


@pytest.mark.parametrize("raw", [*RAW_SURROGATES, *NON_FINITE, HUGE_INT], ids=lambda r: repr(r[:12]))
def test_hostile_values_in_a_catalog_are_a_400_and_change_nothing(client: Client, raw: bytes) -> None:
    for content_type in ("application/json", "application/yaml"):
        body = (b'{"hosts": [{"name": "h", "base_url": "http://x/", "keys": [{"name": "k", "value": "v"}]}],'
                b' "models": [{"name": "m", "bindings": [{"host": "h", "adapter": "openai", "upstream_model": "u",'
                b' "pricing": {"input_per_mtok": %s, "output_per_mtok": 1}}]}]}' % raw)
        res = client.admin("PUT", "/admin/catalog", data=body, content_type=content_type,
                           query_string={"dry_run": "true"})
        _rejected(res, "/admin/catalog")
