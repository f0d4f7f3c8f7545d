"""The admin HTTP API: auth, catalog apply/export, listings, policies, relay keys and tokens."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.catalog.helpers import HOST_KEY_SECRETS, base_catalog

pytestmark = pytest.mark.integration


KEY_ANSWER = {"id", "key", "prefix", "policy", "project", "team", "principal_kind", "principal", "expires_at", "state"}


class Admin:
    """A test client that sends the admin token."""

    def __init__(self, client: Any, token: str) -> None:
        self.client = client
        self.headers = {"Authorization": f"Bearer {token}"}

    def __getattr__(self, method: str) -> Any:
        def call(path: str, **kwargs: Any) -> Any:
            headers = {**self.headers, **kwargs.pop("headers", {})}
            return getattr(self.client, method)(path, headers=headers, **kwargs)
        return call


@pytest.fixture()
def admin(client, settings) -> Admin:  # type: ignore[no-untyped-def]
    api = Admin(client, settings.admin_token)
    assert api.put("/admin/catalog", json=base_catalog()).status_code == 200
    return api


def create_key(admin: Admin, **body: Any) -> dict[str, Any]:
    res = admin.post("/admin/relay-keys", json={"principal_kind": "user", "principal": "t-alice", "policy": "default",
                                                **body})
    assert res.status_code == 201, res.json
    return res.json  # type: ignore[no-any-return]


def test_admin_routes_need_the_admin_token(client, settings) -> None:
    assert client.get("/admin/catalog").json["error"]["code"] == "missing_credential"
    wrong = client.get("/admin/catalog", headers={"Authorization": "Bearer " + "x" * 40})
    assert (wrong.status_code, wrong.json["error"]["code"]) == (401, "invalid_credential")
    basic = client.get("/admin/relay-keys", headers={"Authorization": f"Basic {settings.admin_token}"})
    assert basic.status_code == 401
    ok = client.get("/admin/catalog", headers={"Authorization": f"Bearer {settings.admin_token}"})
    assert ok.status_code == 200


def test_a_relay_key_answer_has_exactly_the_contract_fields(admin) -> None:
    created = create_key(admin, name="ci")
    assert set(created) == KEY_ANSWER
    assert created["state"] == "active" and created["key"].startswith(created["prefix"])
    assert (created["policy"], created["project"], created["team"]) == ("default", "t-project", "t-team")
    assert (created["principal_kind"], created["principal"], created["expires_at"]) == ("user", "t-alice", None)
    listed = next(k for k in admin.get("/admin/relay-keys").json if k["id"] == created["id"])
    assert "key" not in listed and listed["name"] == "ci" and listed["prefix"] == created["prefix"]
    assert admin.get(f"/admin/relay-keys/{created['id']}").json == listed


def test_relay_key_state_changes_answer_with_the_new_state(admin) -> None:
    created = create_key(admin, expires_at="2099-01-01T00:00:00Z")
    assert created["expires_at"].startswith("2099-01-01T00:00:00")
    for action, state in (("disable", "disabled"), ("enable", "active"), ("revoke", "revoked")):
        res = admin.post(f"/admin/relay-keys/{created['id']}/{action}")
        assert (res.status_code, res.json["state"]) == (200, state)
    again = admin.post(f"/admin/relay-keys/{created['id']}/enable")
    assert (again.status_code, again.json["error"]["code"]) == (409, "relay_key_revoked")


def test_rotating_a_key_returns_the_new_secret_once(admin) -> None:
    created = create_key(admin)
    rotated = admin.post(f"/admin/relay-keys/{created['id']}/rotate", json={"grace_seconds": 60})
    assert rotated.status_code == 200 and set(rotated.json) == KEY_ANSWER
    assert rotated.json["key"] != created["key"] and rotated.json["id"] == created["id"]
    no_body = admin.post(f"/admin/relay-keys/{created['id']}/rotate")
    assert no_body.status_code == 200 and no_body.json["key"] not in (created["key"], rotated.json["key"])


def test_keys_can_be_made_for_service_accounts_with_another_project(admin) -> None:
    created = create_key(admin, principal_kind="service_account", principal="t-robot", policy="narrow")
    assert (created["principal"], created["policy"], created["project"]) == ("t-robot", "narrow", "t-project")


def test_unknown_names_in_a_key_request_are_400_with_the_field(admin) -> None:
    res = admin.post("/admin/relay-keys", json={"principal_kind": "user", "principal": "nobody", "policy": "default"})
    assert (res.status_code, res.json["error"]["code"]) == (400, "invalid_request")
    assert "principal" in res.json["error"]["details"]
    res = admin.post("/admin/relay-keys", json={"principal_kind": "user", "principal": "t-alice", "policy": "gone"})
    assert "policy" in res.json["error"]["details"]


def test_unknown_ids_are_404(admin) -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    assert admin.get(f"/admin/relay-keys/{missing}").json["error"]["code"] == "relay_key_not_found"
    assert admin.post(f"/admin/relay-keys/{missing}/revoke").status_code == 404
    assert admin.post(f"/admin/tokens/{missing}/revoke").json["error"]["code"] == "token_not_found"
    assert admin.get("/admin/relay-keys/not-a-uuid").status_code == 404


def test_tokens_are_minted_listed_and_revoked(admin) -> None:
    res = admin.post("/admin/tokens", json={"user": "t-alice", "ttl_seconds": 3600})
    assert res.status_code == 201 and set(res.json) == {"id", "token", "user", "expires_at"}
    listed = admin.get("/admin/tokens", query_string={"user": "t-alice"}).json
    mine = next(t for t in listed if t["id"] == res.json["id"])
    assert mine["state"] == "active" and "token" not in mine
    revoked = admin.post(f"/admin/tokens/{res.json['id']}/revoke")
    assert revoked.status_code == 200 and revoked.json["state"] == "revoked"
    assert admin.post("/admin/tokens", json={"user": "ghost", "ttl_seconds": 5}).status_code == 400


def test_the_catalog_is_applied_from_yaml_and_reports_changes(admin) -> None:
    doc = base_catalog()
    doc["teams"].append({"name": "t-yaml"})
    res = admin.put("/admin/catalog", data=yaml.safe_dump(doc), content_type="application/yaml")
    assert res.status_code == 200 and res.json["changes"]["teams"]["created"] == ["t-yaml"]
    again = admin.put("/admin/catalog", data=yaml.safe_dump(doc), content_type="application/yaml")
    assert again.json["changed"] is False and again.json["version"] == res.json["version"]
    dry = admin.put("/admin/catalog?dry_run=true", json=base_catalog())
    assert dry.json["dry_run"] and dry.json["changes"]["teams"]["deleted"] == ["t-yaml"]
    assert admin.put("/admin/catalog", json=base_catalog()).json["changes"]["teams"]["deleted"] == ["t-yaml"]


def test_a_bad_catalog_is_400_with_every_problem_and_its_path(admin) -> None:
    doc = base_catalog()
    doc["models"][1]["bindings"][0]["adapter"] = "gemini"
    doc["users"][1]["policy"] = "missing"
    res = admin.put("/admin/catalog", json=doc)
    assert (res.status_code, res.json["error"]["code"]) == (400, "invalid_catalog")
    assert res.json["error"]["details"] == [
        "models[1].bindings[0].adapter: must be one of openai, anthropic, openai_responses",
        "users[1].policy: no policy named 'missing' in this catalog"]


def test_the_catalog_export_has_the_file_format_and_no_secrets(admin) -> None:
    res = admin.get("/admin/catalog")
    body = res.get_data(as_text=True)
    assert not any(secret in body for secret in HOST_KEY_SECRETS)
    assert res.json["policies"][0]["rate_limits"] == [{"requests": 1000, "per": "1m"}]
    assert admin.put("/admin/catalog", json=res.json).json["changed"] is False


@pytest.mark.parametrize(("path", "names"), [
    ("/admin/hosts", ["anthropic", "openai"]), ("/admin/models", ["claude-sonnet", "gpt-4o-mini"]),
    ("/admin/policies", ["default", "narrow"]), ("/admin/users", ["t-alice", "t-bob"]),
    ("/admin/service-accounts", ["t-robot"]), ("/admin/teams", ["t-team"]), ("/admin/projects", ["t-project"])])
def test_each_kind_is_listed_with_ids(admin, path, names) -> None:
    res = admin.get(path)
    assert res.status_code == 200 and [item["name"] for item in res.json] == names
    assert all(item["id"] for item in res.json)


def test_host_listings_show_no_key_values(admin) -> None:
    hosts = admin.get("/admin/hosts").json
    assert {k["name"] for h in hosts for k in h["keys"]} == {"t-openai-1", "t-anthropic-1"}
    assert all(set(k) <= {"id", "name", "value_env", "enabled"} for h in hosts for k in h["keys"])


def test_policies_are_disabled_enabled_and_deleted(admin) -> None:
    assert admin.post("/admin/policies/narrow/disable").json["enabled"] is False
    assert admin.get("/admin/policies/narrow").json["enabled"] is False
    assert admin.post("/admin/policies/narrow/enable").json["enabled"] is True
    deleted = admin.delete("/admin/policies/narrow")
    assert deleted.status_code == 204 and deleted.get_data() == b""
    assert admin.get("/admin/policies/narrow").json["error"]["code"] == "policy_not_found"
    assert admin.delete("/admin/policies/narrow").status_code == 404
    assert [p["name"] for p in admin.get("/admin/policies").json] == ["default"]
    assert admin.put("/admin/catalog", json=base_catalog()).json["changes"]["policies"]["created"] == ["narrow"]


def test_the_openapi_document_has_the_admin_routes_and_schemas(client) -> None:
    spec = client.get("/openapi.json").json
    for path in ("/admin/catalog", "/admin/relay-keys", "/admin/relay-keys/{key_id}/rotate", "/admin/tokens",
                 "/admin/tokens/{token_id}/revoke", "/admin/policies/{name}", "/admin/hosts"):
        assert path in spec["paths"], path
    schemas = spec["components"]["schemas"]
    for name in ("Catalog", "RelayKeyCreate", "RelayKeySecret", "TokenMint", "ApplyResult", "RelayError"):
        assert name in schemas, name
    assert set(schemas["RelayKeySecret"]["properties"]) == KEY_ANSWER
    put = spec["paths"]["/admin/catalog"]["put"]
    assert set(put["requestBody"]["content"]) == {"application/json", "application/yaml"}
    assert put["security"] == [{"adminToken": []}]
    assert json.dumps(spec)  # serialisable
