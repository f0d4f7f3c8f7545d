"""Bad input to every admin route gets a 4xx JSON error with a clear message, never a 500."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.test_admin import Admin, create_key
from tests.catalog.helpers import base_catalog

pytestmark = pytest.mark.integration


MISSING_ID = "00000000-0000-4000-8000-000000000000"


@pytest.fixture(scope="module")
def key_id(app, settings) -> str:  # type: ignore[no-untyped-def]
    admin = Admin(app.test_client(), settings.admin_token)
    assert admin.put("/admin/catalog", json=base_catalog()).status_code == 200
    return str(create_key(admin)["id"])


@pytest.fixture()
def admin(client, settings) -> Admin:  # type: ignore[no-untyped-def]
    return Admin(client, settings.admin_token)


def assert_client_error(res: Any, status: int | None = None) -> None:
    assert 400 <= res.status_code < 500, (res.status_code, res.get_data(as_text=True)[:500])
    if status is not None:
        assert res.status_code == status, res.json
    body = res.json
    assert isinstance(body["error"]["code"], str) and body["error"]["message"]


KEY_BODIES: list[Any] = [
    {},
    {"principal_kind": "robot", "principal": "t-alice", "policy": "default"},
    {"principal_kind": "user", "principal": 5, "policy": "default"},
    {"principal_kind": "user", "principal": "t-alice"},
    {"principal_kind": "user", "principal": "t-alice", "policy": "default", "colour": "red"},
    {"principal_kind": "user", "principal": "t-alice", "policy": "default", "expires_at": "tomorrow"},
    {"principal_kind": "user", "principal": "t-alice", "policy": "default", "expires_at": "2099-01-01T00:00:00"},
    {"principal_kind": "user", "principal": "t-alice", "policy": "default", "expires_at": "2001-01-01T00:00:00Z"},
    {"principal_kind": "user", "principal": "t-alice", "policy": "default", "name": "a\x00b"},
    {"principal_kind": "user", "principal": "t-alice", "policy": "default", "name": "n" * 500},
    {"principal_kind": "user", "principal": "t-alice\x00", "policy": "default"},
    {"principal_kind": "user", "principal": "t-alice", "policy": "default", "project": ["x"]},
    [], [1, 2], "a string", 7, None,
]


@pytest.mark.parametrize("body", KEY_BODIES)
def test_bad_relay_key_requests_are_400(admin, key_id, body) -> None:
    assert_client_error(admin.post("/admin/relay-keys", json=body), 400)


ROTATE_BODIES: list[Any] = [{"grace_seconds": "10"}, {"grace_seconds": -1}, {"grace_seconds": 10**12},
                            {"grace_seconds": 1.5}, {"grace_seconds": True}, {"grace": 5}, [], "x"]


@pytest.mark.parametrize("body", ROTATE_BODIES)
def test_bad_rotate_requests_are_400(admin, key_id, body) -> None:
    assert_client_error(admin.post(f"/admin/relay-keys/{key_id}/rotate", json=body), 400)


TOKEN_BODIES: list[Any] = [{}, {"user": "t-alice"}, {"user": "t-alice", "ttl_seconds": 0},
                           {"user": "t-alice", "ttl_seconds": "60"}, {"user": "t-alice", "ttl_seconds": 10**10},
                           {"user": 1, "ttl_seconds": 60}, {"user": "t-alice", "ttl_seconds": 60, "scope": "all"},
                           {"user": "nobody", "ttl_seconds": 60}, None]


@pytest.mark.parametrize("body", TOKEN_BODIES)
def test_bad_token_requests_are_400(admin, key_id, body) -> None:
    assert_client_error(admin.post("/admin/tokens", json=body), 400)


@pytest.mark.parametrize(("method", "path"), [
    ("post", "/admin/relay-keys"), ("post", "/admin/tokens"), ("post", "/admin/relay-keys/{id}/rotate"),
    ("put", "/admin/catalog")])
@pytest.mark.parametrize("data", ["{not json", "[" * 100_000, "\xff\xfe", '{"a": 1e999999}'])
def test_bodies_that_are_not_json_are_400(admin, key_id, method, path, data) -> None:
    res = getattr(admin, method)(path.format(id=key_id), data=data.encode("latin-1"), content_type="application/json")
    assert_client_error(res, 400)


@pytest.mark.parametrize(("method", "path"), [("post", "/admin/relay-keys"), ("post", "/admin/tokens")])
def test_bodies_sent_as_something_other_than_json_are_400(admin, key_id, method, path) -> None:
    res = getattr(admin, method)(path, data="principal_kind=user", content_type="application/x-www-form-urlencoded")
    assert_client_error(res, 400)


@pytest.mark.parametrize(("method", "path", "size"), [
    ("post", "/admin/relay-keys", 300_000), ("post", "/admin/tokens", 300_000),
    ("post", "/admin/relay-keys/{id}/rotate", 300_000), ("put", "/admin/catalog", 17 * 1024 * 1024)])
def test_huge_bodies_are_413(admin, key_id, method, path, size) -> None:
    data = b'{"name": "' + b"x" * size + b'"}'
    assert_client_error(getattr(admin, method)(path.format(id=key_id), data=data, content_type="application/json"),
                        413)


@pytest.mark.parametrize("body", ["hosts: [", "- just\n- a list\n", "42", "", "hosts: {a: b}", "\t\x00"])
def test_bad_catalog_documents_are_400(admin, key_id, body) -> None:
    res = admin.put("/admin/catalog", data=body, content_type="application/yaml")
    assert_client_error(res, 400)
    assert res.json["error"]["details"]


@pytest.mark.parametrize("query", ["dry_run=maybe", "colour=red"])
def test_bad_query_arguments_are_400(admin, key_id, query) -> None:
    assert_client_error(admin.put(f"/admin/catalog?{query}", json=base_catalog()), 400)
    assert_client_error(admin.get(f"/admin/tokens?{query}"), 400)


@pytest.mark.parametrize("path", [
    "/admin/relay-keys/not-a-uuid", "/admin/relay-keys/123/disable", "/admin/relay-keys/{missing}/enable",
    "/admin/relay-keys/{missing}/rotate", "/admin/tokens/nope/revoke", "/admin/tokens/{missing}/revoke",
    "/admin/policies/nope/disable", "/admin/policies/a%00b/enable", "/admin/policies/" + "p" * 5000 + "/disable"])
def test_unknown_or_malformed_ids_and_names_are_404(admin, key_id, path) -> None:
    assert_client_error(admin.post(path.format(missing=MISSING_ID)), 404)


@pytest.mark.parametrize("path", ["/admin/policies/a%00b", "/admin/policies/%F0%9F%92%A9"])
def test_odd_policy_names_in_get_and_delete_are_404(admin, key_id, path) -> None:
    assert_client_error(admin.get(path), 404)
    assert_client_error(admin.delete(path), 404)


def test_wrong_methods_are_405(admin, key_id) -> None:
    assert_client_error(admin.delete("/admin/catalog"), 405)
    assert_client_error(admin.put("/admin/relay-keys"), 405)


def test_a_wrong_token_is_refused_before_the_body_is_looked_at(client, key_id) -> None:
    res = client.post("/admin/relay-keys", data="{not json", content_type="application/json",
                      headers={"Authorization": "Bearer wrong-wrong-wrong-wrong"})
    assert res.status_code == 401 and "details" not in res.json["error"]
