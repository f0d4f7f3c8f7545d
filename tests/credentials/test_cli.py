"""`relay keys ...` and `relay tokens ...`: straight on the database, the secret printed once."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from app.access.cache import get_catalog
from app.auth import authenticate
from app.errors import RelayError
from devtools.processes import ROOT

pytestmark = pytest.mark.integration


def run_json(relay, *args: str):  # type: ignore[no-untyped-def]
    code, out, err = relay(*args)
    assert code == 0, err
    return json.loads(out)


def test_keys_create_prints_the_secret_once_and_list_never_does(relay, runtime) -> None:
    created = run_json(relay, "keys", "create", "--user", "t-alice", "--policy", "default", "--name", "cli",
                       "--expires-at", "2099-01-01T00:00:00Z")
    assert created["key"].startswith("rk_") and created["state"] == "active"
    assert authenticate(runtime, created["key"]).credential_id is not None
    _, out, _ = relay("keys", "list")
    assert created["key"] not in out and created["id"] in out


def test_keys_for_service_accounts_take_project_and_team(relay) -> None:
    created = run_json(relay, "keys", "create", "--service-account", "t-robot", "--policy", "narrow",
                       "--project", "t-project", "--team", "t-team")
    assert (created["principal_kind"], created["principal"], created["policy"]) == ("service_account", "t-robot",
                                                                                   "narrow")


def test_keys_rotate_disable_enable_revoke(relay, runtime) -> None:
    created = run_json(relay, "keys", "create", "--user", "t-bob", "--policy", "narrow")
    rotated = run_json(relay, "keys", "rotate", created["id"], "--grace", "1m")
    assert rotated["key"] != created["key"]
    assert authenticate(runtime, created["key"]) and authenticate(runtime, rotated["key"])
    assert run_json(relay, "keys", "disable", created["id"])["state"] == "disabled"
    assert run_json(relay, "keys", "enable", created["id"])["state"] == "active"
    assert run_json(relay, "keys", "revoke", created["id"])["state"] == "revoked"
    get_catalog(runtime).ensure_fresh()  # the CLI wrote from another process's point of view
    with pytest.raises(RelayError):
        authenticate(runtime, rotated["key"])
    code, _, err = relay("keys", "enable", created["id"])
    assert code == 1 and "relay_key_revoked" in err


def test_cli_errors_are_one_clear_line(relay) -> None:
    code, _, err = relay("keys", "create", "--user", "nobody", "--policy", "default")
    assert code == 1 and err.startswith("relay: invalid_request")
    assert "  principal: no user named 'nobody'" in err.splitlines()  # the API's field message, not just the code
    code, _, err = relay("keys", "create", "--user", "t-alice", "--policy", "no-such-policy")
    assert code == 1 and "  policy: no policy named 'no-such-policy'" in err.splitlines()
    code, _, err = relay("keys", "revoke", "00000000-0000-4000-8000-000000000000")
    assert code == 1 and "relay_key_not_found" in err
    with pytest.raises(SystemExit):
        relay("keys", "revoke", "not-a-uuid")
    with pytest.raises(SystemExit):
        relay("tokens", "mint", "--user", "t-alice", "--ttl", "soon")


def test_tokens_mint_list_revoke(relay, runtime) -> None:
    minted = run_json(relay, "tokens", "mint", "--user", "t-alice", "--ttl", "1h")
    assert minted["token"].startswith("rt_") and set(minted) == {"id", "token", "user", "expires_at"}
    assert authenticate(runtime, minted["token"]).principal_kind == "user"
    _, out, _ = relay("tokens", "list", "--user", "t-alice")
    assert minted["id"] in out and minted["token"] not in out
    assert run_json(relay, "tokens", "revoke", minted["id"])["state"] == "revoked"
    get_catalog(runtime).ensure_fresh()
    with pytest.raises(RelayError) as caught:
        authenticate(runtime, minted["token"])
    assert caught.value.code == "token_revoked"


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(relay, settings_env) -> None:
    relay("keys", "create", "--user", "t-alice", "--policy", "default")  # something to list
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "keys", "list"], cwd=ROOT, env=settings_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # like `relay keys list | head` once head has what it wants: every write fails
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
