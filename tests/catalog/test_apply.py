"""Applying catalogs on the real Postgres: idempotent, declarative, versioned, secrets encrypted at rest."""

from __future__ import annotations

import os
import select
from pathlib import Path

import psycopg
import pytest
import yaml

from app.access.cache import get_catalog
from app.auth import authenticate
from app.catalog.apply import apply_catalog
from app.catalog.export import export_catalog
from app.catalog.validate import InvalidCatalog, parse_document
from app.credentials import keys
from tests.catalog.helpers import EXAMPLE_CATALOG, HOST_KEY_SECRETS, SPEC_CATALOG, base_catalog

pytestmark = pytest.mark.integration
DEMO_CATALOG = Path(__file__).resolve().parents[2] / "app" / "demo" / "catalog.yaml"


def created(result, kind):  # type: ignore[no-untyped-def]
    return result.changes[kind]["created"]


def test_applying_the_same_catalog_twice_reports_no_changes(runtime) -> None:
    apply_catalog(runtime, base_catalog())
    again = apply_catalog(runtime, base_catalog())
    assert not again.changed
    assert all(not names for kind in again.changes.values() for names in kind.values())


def test_the_shipped_example_catalog_is_the_spec_one() -> None:
    if not SPEC_CATALOG.exists():
        pytest.skip("the spec folder is not beside this checkout")
    assert EXAMPLE_CATALOG.read_bytes() == SPEC_CATALOG.read_bytes()


def test_applying_the_example_catalog_works(runtime) -> None:
    raw = parse_document(EXAMPLE_CATALOG.read_bytes(), "yaml")
    env = {"OPENAI_API_KEY": "sk-example-env-openai", "ANTHROPIC_API_KEY": "sk-example-env-anthropic"}
    first = apply_catalog(runtime, raw, env=env)
    assert set(created(first, "models")) == {"gpt-5-responses", "llama-local"}  # the others are in the base
    assert set(created(first, "policies")) == {"research"}
    assert not apply_catalog(runtime, parse_document(EXAMPLE_CATALOG.read_bytes(), "yaml"), env=env).changed
    snapshot = get_catalog(runtime).snapshot()
    assert snapshot.version == first.version
    llama = snapshot.model("llama-local")
    assert llama is not None and llama.bindings[0].pricing is None
    openai_1 = next(k for k in snapshot.host_keys.values() if k.name == "openai-1")
    assert openai_1.secret() == "sk-example-env-openai"
    exported = export_catalog(runtime)
    openai = next(h for h in exported["hosts"] if h["name"] == "openai")
    assert {"name": "openai-1", "value_env": "OPENAI_API_KEY", "enabled": True} in openai["keys"]
    apply_catalog(runtime, base_catalog())


def test_the_demo_catalog_applies(runtime) -> None:
    apply_catalog(runtime, base_catalog())
    raw = parse_document(DEMO_CATALOG.read_bytes(), "yaml")
    result = apply_catalog(runtime, raw, env={}, dry_run=True)
    assert set(created(result, "models")) == {"gpt-5-responses", "gpt-4o-unpriced"}
    assert result.dry_run and not apply_catalog(runtime, base_catalog()).changed


def test_things_left_out_are_removed_and_policies_only_soft_deleted(runtime) -> None:
    doc = base_catalog()
    doc["policies"].append({"name": "temporary", "models": ["x"]})
    doc["models"].append({"name": "temp-model", "bindings": [{"host": "openai", "adapter": "openai",
                                                              "upstream_model": "x"}]})
    apply_catalog(runtime, doc)
    temp_id = next(p.id for p in get_catalog(runtime).snapshot().policies.values() if p.name == "temporary")
    result = apply_catalog(runtime, base_catalog())
    assert result.changes["policies"]["deleted"] == ["temporary"]
    assert result.changes["models"]["deleted"] == ["temp-model"]
    with runtime.pool.connection() as conn:
        row = conn.execute("SELECT deleted_at FROM policies WHERE id = %s", (temp_id,)).fetchone()
    assert row["deleted_at"] is not None
    policy = get_catalog(runtime).snapshot().policy(temp_id)
    assert policy is not None and policy.deleted
    assert get_catalog(runtime).snapshot().model("temp-model") is None


def test_updates_are_reported_and_keep_row_ids(runtime) -> None:
    apply_catalog(runtime, base_catalog())
    before = get_catalog(runtime).snapshot()
    default = next(p for p in before.policies.values() if p.name == "default" and not p.deleted)
    doc = base_catalog()
    doc["models"][0]["bindings"][0]["pricing"]["input_per_mtok"] = 0.2
    doc["policies"][0]["rate_limits"][0]["requests"] = 5
    doc["policies"][0]["rate_limits"].append({"tokens": 1000, "per": "1h"})
    result = apply_catalog(runtime, doc)
    assert result.changes["models"] == {"created": [], "updated": ["gpt-4o-mini"], "deleted": []}
    assert result.changes["policies"] == {"created": [], "updated": ["default"], "deleted": []}
    after = get_catalog(runtime).snapshot().policy(default.id)
    assert after is not None and after.rate_limits[0].id == default.rate_limits[0].id
    assert [(r.requests, r.tokens, r.window_s) for r in after.rate_limits] == [(5, None, 60), (None, 1000, 3600)]
    apply_catalog(runtime, base_catalog())


def test_host_key_secrets_are_encrypted_at_rest(runtime) -> None:
    apply_catalog(runtime, base_catalog())
    with runtime.pool.connection() as conn:
        rows = conn.execute("SELECT name, secret_enc FROM host_keys").fetchall()
    for row in rows:
        for secret in HOST_KEY_SECRETS:
            assert secret.encode() not in bytes(row["secret_enc"])
    key = next(k for k in get_catalog(runtime).snapshot().host_keys.values() if k.name == "t-openai-1")
    assert key.secret() == HOST_KEY_SECRETS[0]
    assert HOST_KEY_SECRETS[0] not in repr(key)


def test_changing_a_key_value_is_an_update_and_leaving_it_out_keeps_it(runtime) -> None:
    apply_catalog(runtime, base_catalog())
    doc = base_catalog()
    doc["hosts"][0]["keys"][0]["value"] = "sk-test-rotated-upstream"
    assert apply_catalog(runtime, doc).changes["host_keys"]["updated"] == ["t-openai-1"]
    del doc["hosts"][0]["keys"][0]["value"]
    assert not apply_catalog(runtime, doc).changed
    key = next(k for k in get_catalog(runtime).snapshot().host_keys.values() if k.name == "t-openai-1")
    assert key.secret() == "sk-test-rotated-upstream"
    assert apply_catalog(runtime, base_catalog()).changes["host_keys"]["updated"] == ["t-openai-1"]


def test_a_new_key_without_a_value_is_a_problem(runtime) -> None:
    doc = base_catalog()
    doc["hosts"][0]["keys"].append({"name": "t-fresh"})
    with pytest.raises(InvalidCatalog) as caught:
        apply_catalog(runtime, doc)
    assert caught.value.problems == ["hosts[0].keys[1]: give value or value_env (a new key has no stored secret)"]


def test_the_export_applies_back_without_changes(runtime) -> None:
    apply_catalog(runtime, base_catalog())
    exported = yaml.safe_load(yaml.safe_dump(export_catalog(runtime)))
    for host in exported["hosts"]:
        for key in host["keys"]:
            assert set(key) <= {"name", "value_env", "enabled"}
    assert not apply_catalog(runtime, exported).changed


def test_a_dry_run_reports_changes_but_makes_none(runtime) -> None:
    apply_catalog(runtime, base_catalog())
    doc = base_catalog()
    doc["teams"].append({"name": "t-dry"})
    version = get_catalog(runtime).snapshot().version
    result = apply_catalog(runtime, doc, dry_run=True)
    assert result.dry_run and created(result, "teams") == ["t-dry"] and result.version == version
    assert created(apply_catalog(runtime, doc), "teams") == ["t-dry"]
    apply_catalog(runtime, base_catalog())


def test_every_change_bumps_the_version_and_notifies_in_the_same_transaction(runtime, settings) -> None:
    apply_catalog(runtime, base_catalog())
    with psycopg.connect(settings.database_url, autocommit=True) as listener:
        listener.execute("LISTEN relay_catalog")
        doc = base_catalog()
        doc["teams"].append({"name": "t-notify"})
        result = apply_catalog(runtime, doc)
        select.select([listener.fileno()], [], [], 2)
        payloads = [n.payload for n in listener.notifies(timeout=0.5, stop_after=1)]
    assert payloads == [str(result.version)]
    assert get_catalog(runtime).snapshot().version == result.version
    apply_catalog(runtime, base_catalog())


def test_removing_a_project_detaches_the_relay_keys_that_use_it(runtime) -> None:
    doc = base_catalog()
    doc["projects"].append({"name": "t-short-lived", "team": "t-team"})
    apply_catalog(runtime, doc)
    issued = keys.create_key(runtime, principal_kind="user", principal="t-bob", policy="narrow",
                             project="t-short-lived")
    result = apply_catalog(runtime, base_catalog())
    assert result.changes["projects"]["deleted"] == ["t-short-lived"]
    assert result.changes["relay_keys"]["updated"] == [str(issued.view.key.id)]
    caller = authenticate(runtime, issued.secret)
    assert caller.project_id is None
    assert keys.key_fields(keys.get_key(runtime, issued.view.key.id))["project"] is None


def test_env_values_are_read_at_apply_time(runtime, monkeypatch) -> None:
    monkeypatch.setenv("RELAY_TEST_HOST_KEY", "sk-test-from-process-env")
    doc = base_catalog()
    doc["hosts"][1]["keys"].append({"name": "t-env-key", "value_env": "RELAY_TEST_HOST_KEY"})
    apply_catalog(runtime, doc)
    monkeypatch.setenv("RELAY_TEST_HOST_KEY", "changed-later")
    key = next(k for k in get_catalog(runtime).snapshot().host_keys.values() if k.name == "t-env-key")
    assert key.secret() == "sk-test-from-process-env"
    assert os.environ["RELAY_TEST_HOST_KEY"] == "changed-later"
    apply_catalog(runtime, base_catalog())


ODD_VALUES = [None, -1, 0, 10**30, "", "\x00", "x" * 300, [], {}, True, 1.5, "1e999", "${NOPE}"]


def leaf_paths(node, path=()):  # type: ignore[no-untyped-def]
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else None
    if items is None:
        yield path
        return
    for key, child in items:
        yield from leaf_paths(child, (*path, key))


def test_odd_values_anywhere_in_a_catalog_are_problems_or_applied_never_crashes(runtime) -> None:
    apply_catalog(runtime, base_catalog())
    for path in leaf_paths(base_catalog()):
        for odd in ODD_VALUES:
            doc = base_catalog()
            parent = doc
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = odd
            try:
                apply_catalog(runtime, doc, dry_run=True)
            except InvalidCatalog as exc:
                assert exc.problems, (path, odd)
