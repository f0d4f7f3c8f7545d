"""No API answer, log line or error shows a host key value or a relay key secret after it was created."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from app.auth import authenticate
from app.errors import RelayError
from tests.api.test_admin import Admin
from tests.catalog.helpers import HOST_KEY_SECRETS, base_catalog

pytestmark = pytest.mark.integration


class Recorder(Admin):
    """An admin client that keeps every answer body."""

    def __init__(self, client: Any, token: str) -> None:
        super().__init__(client, token)
        self.bodies: list[str] = []

    def __getattr__(self, method: str) -> Any:
        call = super().__getattr__(method)

        def recorded(path: str, **kwargs: Any) -> Any:
            res = call(path, **kwargs)
            self.bodies.append(res.get_data(as_text=True))
            return res
        return recorded


def test_secrets_never_appear_in_answers_logs_or_errors(client, settings, runtime, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    admin = Recorder(client, settings.admin_token)
    doc = base_catalog()
    assert admin.put("/admin/catalog", json=doc).status_code == 200
    created = admin.post("/admin/relay-keys", json={"principal_kind": "user", "principal": "t-alice",
                                                    "policy": "default"}).json
    rotated = admin.post(f"/admin/relay-keys/{created['id']}/rotate", json={"grace_seconds": 30}).json
    minted = admin.post("/admin/tokens", json={"user": "t-alice", "ttl_seconds": 60}).json
    secrets = [*HOST_KEY_SECRETS, created["key"], rotated["key"], minted["token"]]
    admin.bodies.clear()

    for path in ("/admin/catalog", "/admin/hosts", "/admin/relay-keys", f"/admin/relay-keys/{created['id']}",
                 "/admin/tokens", "/admin/policies", "/admin/models", "/openapi.json"):
        assert admin.get(path).status_code == 200
    bad = base_catalog()
    bad["hosts"][0]["keys"][0]["enabled"] = HOST_KEY_SECRETS[0]
    bad["hosts"][0]["keys"].append({"name": HOST_KEY_SECRETS[1] + "!", "value": HOST_KEY_SECRETS[1]})
    assert admin.put("/admin/catalog", json=bad).status_code == 400
    assert admin.put("/admin/catalog", data=f"hosts: [{{value: {HOST_KEY_SECRETS[0]}", content_type="application/yaml"
                     ).status_code == 400
    assert admin.put("/admin/catalog", json=doc).json["changed"] is False
    assert admin.post(f"/admin/relay-keys/{created['id']}/disable").status_code == 200
    assert admin.post(f"/admin/relay-keys/{created['id']}/revoke").status_code == 200
    assert admin.post(f"/admin/tokens/{minted['id']}/revoke").status_code == 200
    errors = []
    for secret in (created["key"], rotated["key"], minted["token"], created["key"] + "x"):
        with pytest.raises(RelayError) as caught:
            authenticate(runtime, secret)
        errors.append(str(caught.value.to_dict()))

    logs = [record.getMessage() + (record.exc_text or "") for record in caplog.records]
    for text in [*admin.bodies, *errors, *logs]:
        for secret in secrets:
            assert secret not in text


def test_relay_key_secrets_are_stored_only_as_hashes(client, settings, runtime) -> None:
    admin = Admin(client, settings.admin_token)
    admin.put("/admin/catalog", json=base_catalog())
    created = admin.post("/admin/relay-keys", json={"principal_kind": "user", "principal": "t-alice",
                                                    "policy": "default"}).json
    with runtime.pool.connection() as conn:
        dump = [str(r) for table in ("relay_keys", "relay_key_values", "host_keys", "inference_tokens")
                for r in conn.execute(f"SELECT * FROM {table}").fetchall()]
    assert not any(created["key"] in row or created["key"][10:] in row for row in dump)
    assert not any(secret in row for row in dump for secret in HOST_KEY_SECRETS)
