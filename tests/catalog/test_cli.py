"""`relay apply FILE` and `relay catalog export`, run in-process on the test database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.catalog.helpers import HOST_KEY_SECRETS, base_catalog

pytestmark = pytest.mark.integration
DEMO_CATALOG = Path(__file__).resolve().parents[2] / "app" / "demo" / "catalog.yaml"


def test_relay_apply_applies_a_yaml_file_once(relay, tmp_path) -> None:
    path = tmp_path / "catalog.yaml"
    doc = base_catalog()
    doc["teams"].append({"name": "t-cli"})
    path.write_text(yaml.safe_dump(doc))
    code, out, _ = relay("apply", str(path))
    assert code == 0 and "created teams: t-cli" in out
    code, out, _ = relay("apply", str(path))
    assert code == 0 and out.startswith("no changes")
    path.write_text(yaml.safe_dump(base_catalog()))
    code, out, _ = relay("apply", "--dry-run", str(path))
    assert "deleted teams: t-cli" in out and "dry run" in out
    assert relay("apply", str(path))[1].startswith("deleted teams: t-cli")


def test_relay_apply_accepts_json_files(relay, tmp_path) -> None:
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(base_catalog()))
    code, _, _ = relay("apply", str(path))
    assert code == 0


def test_relay_apply_lists_every_problem_with_its_path(relay, tmp_path) -> None:
    doc = base_catalog()
    doc["models"][1]["bindings"][0]["adapter"] = "gemini"
    doc["policies"][1]["key_pool"] = ["nope"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, err = relay("apply", str(path))
    assert code == 1 and out == ""
    assert "the catalog has 2 problems" in err
    assert "  models[1].bindings[0].adapter: must be one of openai, anthropic, openai_responses" in err
    assert "  policies[1].key_pool[0]: no host key named 'nope' in this catalog" in err
    assert not any(secret in err for secret in HOST_KEY_SECRETS)


def test_relay_catalog_export_prints_the_catalog_without_secrets(relay, tmp_path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(base_catalog()))
    relay("apply", str(path))
    code, out, _ = relay("catalog", "export")
    assert code == 0 and not any(secret in out for secret in HOST_KEY_SECRETS)
    exported = yaml.safe_load(out)
    assert [m["name"] for m in exported["models"]] == ["claude-sonnet", "gpt-4o-mini"]
    assert json.loads(relay("catalog", "export", "--format", "json")[1]) == exported


def test_relay_apply_if_empty_applies_only_over_an_empty_catalog(relay, runtime, tmp_path) -> None:
    mine = tmp_path / "mine.yaml"
    doc = base_catalog()
    doc["projects"][0]["webhooks"] = [{"url": "https://hooks.example.com/relay", "secret": "whsec_" + "a" * 32}]
    mine.write_text(yaml.safe_dump(doc))
    demo = tmp_path / "demo.yaml"
    demo.write_text(DEMO_CATALOG.read_text())
    assert relay("apply", str(mine))[0] == 0
    code, out, _ = relay("apply", "--if-empty", str(demo))
    assert code == 0 and out.startswith("the catalog is not empty: left as it is")
    assert relay("apply", "--dry-run", str(mine))[1].startswith("no changes")  # the webhook is still there

    empty = tmp_path / "empty.yaml"
    empty.write_text("{}\n")
    relay("apply", str(empty))
    code, out, _ = relay("apply", "--if-empty", str(demo))
    assert code == 0 and "created policies: default" in out
    assert relay("apply", "--if-empty", str(mine))[1].startswith("the catalog is not empty")
    relay("apply", str(mine))


@pytest.mark.parametrize("local_install", [False, True])
def test_relay_apply_without_the_environment_says_where_the_settings_are(tmp_path, local_install: bool) -> None:
    if local_install:
        (tmp_path / ".run").mkdir()
        (tmp_path / ".run" / "env").write_text("export RELAY_DATABASE_URL=postgresql://nowhere/relay\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    done = subprocess.run([sys.executable, "-m", "app.cli", "apply", str(DEMO_CATALOG)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    err = done.stderr.splitlines()
    assert done.returncode == 2 and err[0] == "relay: configuration error: RELAY_DATABASE_URL is required but not set"
    assert "RELAY_* environment variables (docs/configuration.md)" in err[1]
    assert ("run `source .run/env` first" in err[1]) == local_install and "Traceback" not in done.stderr
