"""Hand-written bad input on every route: broken or deeply nested JSON, wrong content types, too many items,
control characters and unpaired surrogates in every string field, ids that are not UUIDs or try to climb out of
the payload directory. The answer is always a 4xx JSON error with a stable code, never a 5xx."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest

from devtools.stack import MODEL, Stack, fault_catalog
from tests.fuzz.conftest import error_code

pytestmark = pytest.mark.integration

SHAPED_ROUTES = [f"{prefix}/{path}" for prefix in ("/v1", "/openai/v1", "/anthropic/v1")
                 for path in ("chat/completions", "messages", "responses", "embeddings", "generate")]
RELAY_JSON_ROUTES = ["/v1/batches", *SHAPED_ROUTES]
ADMIN_JSON_ROUTES = ["/admin/relay-keys", "/admin/tokens", "/admin/relay-keys/{key_id}/rotate"]
MISSING = "00000000-0000-4000-8000-000000000000"

# Strings that broke something somewhere: control characters (NUL first of all: Postgres text refuses it),
# JSON-escaped unpaired surrogates (no UTF-8 encoding exists), direction overrides, line separators, astral
# characters, quotes and backslashes, percent-escapes, and a long one.
NASTY = ["\x00", "a\x00b", "\ud800", "x\udfff", "\udc00\ud800", "\x01\x1f\x7f", "\u202e", "\u2028\u2029", "\uffff",
         "😀", "\n\r\t", "'\"\\", "%00", "../../etc/passwd", "x" * 5000]
UNSTORABLE = {"\x00", "a\x00b", "\ud800", "x\udfff", "\udc00\ud800"}


def _unpaired(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def _assert_rejected(res: Any, path: str, *statuses: int) -> None:
    """A 4xx answer (one of STATUSES if given) whose JSON body carries a stable error code."""
    text = res.get_data(as_text=True)
    assert 400 <= res.status_code < 500, f"{path}: {res.status_code} {text[:300]}"
    if statuses:
        assert res.status_code in statuses, f"{path}: {res.status_code} {text[:300]}"
    code = error_code(path, json.loads(text))
    assert isinstance(code, str) and code, f"{path}: no stable error code in {text[:300]}"


def _answered(res: Any, path: str) -> None:
    """Accepted or rejected, but never a server error; a rejection carries a code."""
    if res.status_code >= 400:
        _assert_rejected(res, path)


class Client:
    """The fuzz stack's app with a relay key (`call`) or the admin token (`admin`)."""

    def __init__(self, stack: Stack, key: str) -> None:
        self.stack, self.key = stack, key
        self.key_id = str(stack.new_key_record("kill")["id"])  # a key of its own: bad input may still rotate it

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.stack.call(self.key, method, path, **kwargs)

    def admin(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.stack.admin(method, path.format(key_id=self.key_id), **kwargs)

    def post_raw(self, path: str, body: bytes, content_type: str = "application/json") -> Any:
        if path.startswith("/admin"):
            return self.admin("POST", path, data=body, content_type=content_type)
        return self.call("POST", path, data=body, content_type=content_type)


@pytest.fixture(scope="module")
def client(fuzz_stack: Stack, fuzz_key: str) -> Client:
    return Client(fuzz_stack, fuzz_key)


def _chat(**changes: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **changes}


# -- malformed bodies -------------------------------------------------------------------------------------------

BROKEN_JSON = [b"{", b'{"model":}', b"\xff\xfe{}", b"", b"nul", b'{"a":1}}', b"[", b'{"a":"\\x"}', b"\x00"]


@pytest.mark.parametrize("path", RELAY_JSON_ROUTES + ADMIN_JSON_ROUTES)
def test_invalid_json_is_a_400_with_a_code_on_every_json_route(client: Client, path: str) -> None:
    for body in BROKEN_JSON:
        if body == b"" and path.endswith("/rotate"):
            continue  # rotate's body is optional: no body is a valid rotation
        _assert_rejected(client.post_raw(path, body), path, 400, 415)


@pytest.mark.parametrize("path", RELAY_JSON_ROUTES + ADMIN_JSON_ROUTES)
def test_a_body_sent_as_another_content_type_is_refused_with_a_code(client: Client, path: str) -> None:
    body = json.dumps(_chat()).encode()
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                         "application/xml"):
        _assert_rejected(client.post_raw(path, body, content_type), path, 400, 415)


@pytest.mark.parametrize("path", [*RELAY_JSON_ROUTES, *ADMIN_JSON_ROUTES, "/admin/catalog"])
def test_json_nested_100000_levels_deep_is_a_4xx_on_every_json_route(client: Client, path: str) -> None:
    for deep in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000):
        if path == "/admin/catalog":
            res = client.admin("PUT", path, data=deep, content_type="application/json")
        else:
            res = client.post_raw(path, deep)
        _assert_rejected(res, path, 400, 413)


def _nested(depth: int) -> str:
    return "[" * depth + '"x"' + "]" * depth


NEAR_THE_LIMIT = (500, 900, 950, 980, 990, 1000, 1500)


@pytest.mark.parametrize("depth", NEAR_THE_LIMIT)
def test_json_nested_near_the_recursion_limit_in_any_member_is_never_a_server_error(client: Client,
                                                                                   depth: int) -> None:
    def body(template: str) -> bytes:  # @ marks where the nested value goes
        chat = json.dumps(_chat())
        return template.replace("CHAT", chat).replace("@", _nested(depth)).encode()

    for template in ('{"shape":"openai","metadata":{"m":@},"requests":[CHAT]}',
                     '{"shape":"openai","requests":[{"model":@,"messages":[]}]}',
                     '{"shape":"openai","requests":[{"model":"m","messages":[{"role":"user","content":@}]}]}',
                     '{"shape":"openai","requests":[@]}', '{"requests":[@],"shape":"anthropic"}',
                     '{"shape":"openai","extra":@,"requests":[CHAT]}'):
        _answered(client.post_raw("/v1/batches", body(template)), "/v1/batches")
    for path in SHAPED_ROUTES:
        for template in ('{"model":@,"messages":[],"input":"x"}',
                         '{"model":"m","messages":[{"role":"user","content":@}],"input":@}'):
            _answered(client.post_raw(path, body(template)), path)
    for path, template in (("/admin/relay-keys", '{"principal_kind":"user","principal":@,"policy":"kill"}'),
                           ("/admin/tokens", '{"user":@,"ttl_seconds":5}')):
        _assert_rejected(client.post_raw(path, body(template)), path, 400, 413)
    _assert_rejected(client.admin("PUT", "/admin/catalog", data=body('{"hosts":@}'), content_type="application/json"),
                     "/admin/catalog", 400, 413)


def test_a_batch_of_100001_items_is_a_413_and_stores_nothing(client: Client, fuzz_stack: Stack) -> None:
    assert fuzz_stack.settings.batch_max_items == 100_000  # the default
    item = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}]}).encode()
    body = b'{"shape":"openai","requests":[' + b",".join([item] * 100_001) + b"]}"
    before = fuzz_stack.db_one("SELECT count(*) AS n FROM batches")["n"]

    res = client.post_raw("/v1/batches", body)

    _assert_rejected(res, "/v1/batches", 413)
    assert res.json["error"]["code"] == "batch_too_large"
    assert fuzz_stack.db_one("SELECT count(*) AS n FROM batches")["n"] == before


# -- strings ----------------------------------------------------------------------------------------------------

def _batch_bodies(text: str) -> dict[str, dict[str, Any]]:
    chat = _chat()
    return {
        "shape": {"shape": text, "requests": [chat]},
        "metadata value": {"shape": "openai", "metadata": {"k": text}, "requests": [chat]},
        "metadata key": {"shape": "openai", "metadata": {text: 1}, "requests": [chat]},
        "envelope key": {"shape": "openai", text: 1, "requests": [chat]},
        "model": {"shape": "openai", "requests": [_chat(model=text)]},
        "role": {"shape": "openai", "requests": [_chat(messages=[{"role": text, "content": "x"}])]},
        "content": {"shape": "openai", "requests": [_chat(messages=[{"role": "user", "content": text}])]},
        "item key": {"shape": "openai", "requests": [_chat(**{text: 1})]},
    }


@pytest.mark.parametrize("text", NASTY, ids=repr)
def test_any_string_in_any_batch_field_is_accepted_or_refused_never_a_server_error(client: Client,
                                                                                  text: str) -> None:
    for field, body in _batch_bodies(text).items():
        res = client.post_raw("/v1/batches", json.dumps(body).encode())
        _answered(res, f"/v1/batches ({field})")
        if text in UNSTORABLE and field in ("metadata value", "metadata key", "model", "content", "item key"):
            if "\x00" not in text or field not in ("content", "item key"):  # a NUL in the request text is fine
                _assert_rejected(res, f"/v1/batches ({field})", 400)


@pytest.mark.parametrize("text", NASTY, ids=repr)
def test_any_string_in_any_admin_field_is_accepted_or_refused_never_a_server_error(client: Client,
                                                                                  text: str) -> None:
    bodies = {
        "/admin/relay-keys": [{"principal_kind": "service_account", "principal": text, "policy": "kill"},
                              {"principal_kind": text, "principal": "faults-svc", "policy": "kill"},
                              {"principal_kind": "service_account", "principal": "faults-svc", "policy": text},
                              {"principal_kind": "service_account", "principal": "faults-svc", "policy": "kill",
                               "name": text},
                              {"principal_kind": "service_account", "principal": "faults-svc", "policy": "kill",
                               "project": text, "team": text, "expires_at": text}],
        "/admin/tokens": [{"user": text, "ttl_seconds": 60}, {"user": "x", "ttl_seconds": text}],
        "/admin/relay-keys/{key_id}/rotate": [{"grace_seconds": text}],
    }
    for path, cases in bodies.items():
        for body in cases:
            res = client.admin("POST", path, json=body)
            assert res.status_code != 200 or "rotate" not in path  # no case here is a valid rotation
            _answered(res, path)
    catalog = {"hosts": [{"name": text, "base_url": f"http://{text}/", "keys": [{"name": text, "value": text}]}],
               "models": [{"name": text, "bindings": [{"host": text, "adapter": "openai", "upstream_model": text}]}]}
    _assert_rejected(client.admin("PUT", "/admin/catalog", json=catalog, query_string={"dry_run": "true"}),
                     "/admin/catalog", 400)
    catalog = fault_catalog(client.stack.upstream.url)
    catalog["hosts"][0]["keys"][0]["value"] = text  # a host-key secret: sent upstream in a header, stored encrypted
    res = client.admin("PUT", "/admin/catalog", json=catalog, query_string={"dry_run": "true"})
    _answered(res, "/admin/catalog")
    if text in UNSTORABLE or any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        _assert_rejected(res, "/admin/catalog", 400)
    if not _unpaired(text):  # a URL cannot carry one
        _answered(client.admin("GET", "/admin/tokens", query_string={"user": text}), "/admin/tokens")


USAGE_TEXT_FILTERS = ("model", "host", "policy", "project", "team", "principal", "credential", "batch_id",
                      "error_code", "source", "status", "from", "to")


@pytest.mark.parametrize("text", [t for t in NASTY if not _unpaired(t)], ids=repr)
def test_any_string_in_any_usage_filter_is_answered_never_a_server_error(client: Client, text: str) -> None:
    for path in ("/v1/usage/events", "/v1/usage/summary", "/v1/usage/events/export"):
        for name in (*USAGE_TEXT_FILTERS, "cursor", "group_by", "bucket", "format", "limit"):
            for who in (client.call, client.admin):
                res = who("GET", path, query_string={name: text})
                _answered(res, f"{path}?{name}")
                if "\x00" in text and res.status_code < 400:
                    raise AssertionError(f"{path}?{name}: a NUL was accepted ({res.status_code})")
    for name in ("cursor", "limit"):
        _answered(client.call("GET", "/v1/batches", query_string={name: text}), f"/v1/batches?{name}")


@pytest.mark.parametrize("text", NASTY, ids=repr)
@pytest.mark.parametrize("field", ["model", "content", "key"])
def test_any_string_in_a_live_request_is_answered_never_a_server_error(client: Client, text: str,
                                                                       field: str) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "input": "hi", "max_tokens": 5,
            "prompt": "hi"}
    if field == "key":
        body[text] = 1
    else:
        body[field] = text
        if field == "content":
            body["messages"] = [{"role": "user", "content": text}]
            body["input"] = text
    problems = []
    for path in SHAPED_ROUTES:
        res = client.call("POST", path, json=body)
        if res.status_code >= 500:
            problems.append(f"{path}: {res.status_code}")
        else:
            _answered(res, path)
    assert not problems, problems


# -- ids --------------------------------------------------------------------------------------------------------

BAD_IDS = ["nope", "0" * 40, "00000000-0000-0000-0000-00000000000g", "-1", "..", "%2e%2e",
           quote("../../etc/passwd", safe=""), quote(quote("../../etc/passwd", safe=""), safe=""),
           "..%2F..%2F..%2Fetc%2Fpasswd", "%2e%2e%2f%2e%2e%2fetc%2fpasswd", "..%5C..%5Cwindows", "%00",
           quote("\x00", safe=""), quote("😀", safe=""), "a" * 2000]
RAW_TRAVERSALS = ["../../etc/passwd", "../../../../etc/passwd", "..\\..\\etc\\passwd", "./.././"]


def _id_routes(bad: str) -> list[tuple[str, str, str]]:
    """(caller, method, path) of every route that takes an id."""
    return [("relay", "GET", f"/v1/batches/{bad}"), ("relay", "GET", f"/v1/batches/{bad}/results"),
            ("relay", "POST", f"/v1/batches/{bad}/cancel"), ("admin", "GET", f"/admin/relay-keys/{bad}"),
            *[("admin", "POST", f"/admin/relay-keys/{bad}/{action}") for action in
              ("rotate", "disable", "enable", "revoke")],
            ("admin", "POST", f"/admin/tokens/{bad}/revoke"), ("admin", "GET", f"/admin/policies/{bad}"),
            ("admin", "POST", f"/admin/policies/{bad}/disable"), ("admin", "POST", f"/admin/policies/{bad}/enable"),
            ("admin", "DELETE", f"/admin/policies/{bad}")]


@pytest.mark.parametrize("bad", [*BAD_IDS, *RAW_TRAVERSALS, MISSING], ids=repr)
def test_ids_that_are_not_ours_or_not_ids_at_all_are_a_404_on_every_route(client: Client, bad: str) -> None:
    for who, method, path in _id_routes(bad):
        call = client.call if who == "relay" else client.admin
        res = call(method, path, json={} if method == "POST" and "rotate" in path else None)
        _assert_rejected(res, path, 404, 405)
        if path.startswith("/v1/batches"):  # never a different answer for a malformed id than for a missing one
            assert res.status_code == 404


def test_no_id_reads_a_file_outside_the_payload_directory(client: Client, fuzz_stack: Stack, tmp_path: Any) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"leaked": true}')
    relative = "../" * 12 + str(secret).lstrip("/")
    for bad in (relative, quote(relative, safe=""), quote(str(secret), safe="")):
        for who, method, path in _id_routes(bad):
            call = client.call if who == "relay" else client.admin
            res = call(method, path)
            assert b"leaked" not in res.get_data()
            _assert_rejected(res, path, 404, 405)
