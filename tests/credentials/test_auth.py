"""authenticate / recheck_caller for every credential state, against the real Postgres and the cache."""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime, timedelta

import pytest

from app.access.cache import get_catalog
from app.auth import authenticate, credential_from_headers, get_policy, recheck_caller
from app.catalog.apply import apply_catalog
from app.catalog.service import delete_policy
from app.credentials import keys, tokens
from app.credentials.tokens import TokenClaims, encode_token, signing_key
from app.errors import RelayError, ValidationFailed
from tests.catalog.helpers import base_catalog

pytestmark = pytest.mark.integration


@pytest.fixture()
def catalog(runtime):  # type: ignore[no-untyped-def]
    apply_catalog(runtime, base_catalog())
    return runtime


def code_of(runtime, secret) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(RelayError) as caught:
        authenticate(runtime, secret)
    assert caught.value.status == 401
    return caught.value.code


def new_key(runtime, **kwargs) -> keys.IssuedKey:  # type: ignore[no-untyped-def]
    return keys.create_key(runtime, **{"principal_kind": "user", "principal": "t-alice", "policy": "default",
                                       **kwargs})


def test_an_active_key_resolves_to_its_caller(catalog) -> None:
    issued = new_key(catalog, name="laptop")
    assert issued.secret.startswith("rk_") and len(issued.secret) >= 46
    caller = authenticate(catalog, issued.secret)
    snapshot = get_catalog(catalog).snapshot()
    alice = next(p for p in snapshot.principals.values() if p.name == "t-alice")
    assert caller.credential_kind == "relay_key" and caller.credential_id == issued.view.key.id
    assert caller.relay_key_hash == hashlib.sha256(issued.secret.encode()).digest()
    assert (caller.principal_kind, caller.principal_id) == ("user", alice.id)
    assert (caller.policy_id, caller.project_id, caller.team_id) == (alice.policy_id, alice.project_id, alice.team_id)
    assert caller.owner == "key:" + caller.relay_key_hash.hex()
    assert issued.view.key.prefix == issued.secret[:10]


def test_a_key_carries_the_policy_project_and_team_it_was_created_with(catalog) -> None:
    issued = keys.create_key(catalog, principal_kind="service_account", principal="t-robot", policy="narrow",
                             project="t-project", team="t-team")
    caller = authenticate(catalog, issued.secret)
    snapshot = get_catalog(catalog).snapshot()
    narrow = next(p for p in snapshot.policies.values() if p.name == "narrow" and not p.deleted)
    assert caller.principal_kind == "service_account" and caller.policy_id == narrow.id
    assert snapshot.projects[caller.project_id] == "t-project" and snapshot.teams[caller.team_id] == "t-team"


def test_a_disabled_key_is_refused_until_enabled(catalog) -> None:
    issued = new_key(catalog)
    keys.change_key_state(catalog, issued.view.key.id, "disable")
    assert code_of(catalog, issued.secret) == "key_disabled"
    keys.change_key_state(catalog, issued.view.key.id, "enable")
    assert authenticate(catalog, issued.secret).credential_id == issued.view.key.id


def test_a_revoked_key_is_refused_for_good(catalog) -> None:
    issued = new_key(catalog)
    keys.change_key_state(catalog, issued.view.key.id, "revoke")
    assert code_of(catalog, issued.secret) == "key_revoked"
    with pytest.raises(RelayError) as caught:
        keys.change_key_state(catalog, issued.view.key.id, "enable")
    assert (caught.value.status, caught.value.code) == (409, "relay_key_revoked")
    with pytest.raises(RelayError):
        keys.rotate_key(catalog, issued.view.key.id)


def sleep_past(moment: datetime) -> None:
    time.sleep(max(0.0, moment.timestamp() - time.time()) + 0.05)


def test_an_expired_key_is_refused(catalog) -> None:
    issued = new_key(catalog, expires_at=datetime.now(UTC) + timedelta(seconds=3))
    assert authenticate(catalog, issued.secret)
    assert issued.view.key.expires_at is not None
    sleep_past(issued.view.key.expires_at)
    assert code_of(catalog, issued.secret) == "key_expired"
    assert keys.key_fields(keys.get_key(catalog, issued.view.key.id))["state"] == "expired"


def test_a_key_cannot_be_created_already_expired(catalog) -> None:
    with pytest.raises(ValidationFailed):
        new_key(catalog, expires_at=datetime.now(UTC) - timedelta(seconds=1))


def test_rotation_without_grace_stops_the_old_value_at_once(catalog) -> None:
    issued = new_key(catalog)
    rotated = keys.rotate_key(catalog, issued.view.key.id)
    assert rotated.secret != issued.secret and rotated.view.key.prefix == rotated.secret[:10]
    assert code_of(catalog, issued.secret) == "key_rotated_out"
    assert authenticate(catalog, rotated.secret).credential_id == issued.view.key.id


def test_rotation_with_grace_keeps_the_old_value_working_until_it_ends(catalog) -> None:
    issued = new_key(catalog)
    old_caller = authenticate(catalog, issued.secret)
    rotated = keys.rotate_key(catalog, issued.view.key.id, grace_seconds=3)  # room for a slow machine
    assert authenticate(catalog, issued.secret).relay_key_hash == old_caller.relay_key_hash
    recheck_caller(catalog, old_caller)
    new_caller = authenticate(catalog, rotated.secret)
    assert new_caller.owner != old_caller.owner  # access follows the key value
    time.sleep(3.2)
    assert code_of(catalog, issued.secret) == "key_rotated_out"
    with pytest.raises(RelayError) as caught:
        recheck_caller(catalog, old_caller)
    assert caught.value.code == "key_rotated_out"
    recheck_caller(catalog, new_caller)


def test_unknown_and_malformed_credentials_are_invalid_or_missing(catalog) -> None:
    assert code_of(catalog, "rk_" + "A" * 43) == "invalid_credential"
    assert code_of(catalog, "not even a key") == "invalid_credential"
    assert code_of(catalog, "x" * 5000) == "invalid_credential"
    assert code_of(catalog, "") == "missing_credential"
    assert code_of(catalog, None) == "missing_credential"


def test_a_token_resolves_to_its_user(catalog) -> None:
    issued = tokens.mint_token(catalog, "t-alice", 60)
    assert issued.token.startswith("rt_")
    caller = authenticate(catalog, issued.token)
    alice = next(p for p in get_catalog(catalog).snapshot().principals.values() if p.name == "t-alice")
    assert caller.credential_kind == "inference_token" and caller.credential_id == issued.view.token.id
    assert caller.relay_key_hash is None and caller.owner == f"user:{alice.id}"
    assert (caller.policy_id, caller.project_id, caller.team_id) == (alice.policy_id, alice.project_id, alice.team_id)
    other = authenticate(catalog, tokens.mint_token(catalog, "t-alice", 60).token)
    assert other.owner == caller.owner  # any token of the same user is the same owner


def test_a_token_lives_at_least_its_ttl(catalog) -> None:
    asked = time.time()
    issued = tokens.mint_token(catalog, "t-alice", 1)
    assert issued.view.token.expires_at.timestamp() >= asked + 1  # whole seconds, rounded up
    assert issued.view.token.expires_at.timestamp() <= time.time() + 2


def test_an_expired_token_is_refused(catalog) -> None:
    issued = tokens.mint_token(catalog, "t-alice", 1)
    caller = authenticate(catalog, issued.token)  # valid for at least the 1 s asked, however the clock falls
    sleep_past(issued.view.token.expires_at)
    assert code_of(catalog, issued.token) == "token_expired"
    with pytest.raises(RelayError) as caught:
        recheck_caller(catalog, caller)
    assert caught.value.code == "token_expired"


def test_a_revoked_token_is_refused(catalog) -> None:
    issued = tokens.mint_token(catalog, "t-alice", 600)
    caller = authenticate(catalog, issued.token)
    tokens.revoke_token(catalog, issued.view.token.id)
    assert code_of(catalog, issued.token) == "token_revoked"
    with pytest.raises(RelayError) as caught:
        recheck_caller(catalog, caller)
    assert caught.value.code == "token_revoked"


def test_a_token_with_a_wrong_signature_is_invalid(catalog) -> None:
    issued = tokens.mint_token(catalog, "t-alice", 600)
    payload, _, signature = issued.token.partition(".")
    flipped = signature[:-2] + ("A" if signature[-2] != "A" else "B") + signature[-1]
    assert code_of(catalog, f"{payload}.{flipped}") == "invalid_credential"
    claims = TokenClaims(token_id=issued.view.token.id, user_id=issued.view.token.user_id,
                         expires_at=int(time.time()) + 600)
    forged = encode_token(signing_key("some-other-secret-key-entirely"), claims)
    assert code_of(catalog, forged) == "invalid_credential"
    assert code_of(catalog, "rt_garbage") == "invalid_credential"


def test_a_token_for_an_unknown_id_is_invalid(catalog) -> None:
    issued = tokens.mint_token(catalog, "t-alice", 600)
    import uuid

    claims = TokenClaims(token_id=uuid.uuid4(), user_id=issued.view.token.user_id, expires_at=int(time.time()) + 60)
    assert code_of(catalog, encode_token(signing_key(catalog.settings.secret_key), claims)) == "invalid_credential"


def test_keys_of_a_principal_removed_from_the_catalog_stop_working(catalog) -> None:
    doc = base_catalog()
    doc["users"].append({"name": "t-leaver", "policy": "default"})
    apply_catalog(catalog, doc)
    issued = keys.create_key(catalog, principal_kind="user", principal="t-leaver", policy="default")
    token = tokens.mint_token(catalog, "t-leaver", 600).token
    assert authenticate(catalog, issued.secret) and authenticate(catalog, token)
    apply_catalog(catalog, base_catalog())
    assert code_of(catalog, issued.secret) == "invalid_credential"
    assert code_of(catalog, token) == "invalid_credential"
    assert keys.key_fields(keys.get_key(catalog, issued.view.key.id))["principal"] is None


def test_get_policy_returns_none_once_the_policy_is_deleted(catalog) -> None:
    doc = base_catalog()
    doc["policies"].append({"name": "t-doomed", "models": ["*"]})
    apply_catalog(catalog, doc)
    issued = keys.create_key(catalog, principal_kind="user", principal="t-bob", policy="t-doomed")
    caller = authenticate(catalog, issued.secret)
    policy = get_policy(catalog, caller.policy_id)
    assert policy is not None and policy.name == "t-doomed"
    delete_policy(catalog, "t-doomed")
    assert get_policy(catalog, caller.policy_id) is None
    assert get_catalog(catalog).snapshot().policy(caller.policy_id).deleted  # type: ignore[union-attr]
    apply_catalog(catalog, base_catalog())


def test_credentials_are_read_from_bearer_or_x_api_key() -> None:
    assert credential_from_headers({"Authorization": "Bearer rk_abc"}) == "rk_abc"
    assert credential_from_headers({"authorization": "bearer  rk_abc "}) == "rk_abc"
    assert credential_from_headers({"x-api-key": "rk_def"}) == "rk_def"
    assert credential_from_headers({"Authorization": "Basic Zm9v", "X-Api-Key": "rk_ghi"}) == "rk_ghi"
    assert credential_from_headers({"Authorization": "Bearer "}) is None
    assert credential_from_headers({}) is None


def test_a_key_lookup_with_nothing_changed_makes_no_database_round_trip(catalog, monkeypatch) -> None:
    issued = new_key(catalog)
    token = tokens.mint_token(catalog, "t-alice", 600).token
    authenticate(catalog, issued.secret)

    def no_database(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the hot path touched the database")

    monkeypatch.setattr(catalog.pool, "connection", no_database)
    for _ in range(100):
        authenticate(catalog, issued.secret)
        authenticate(catalog, token)
        recheck_caller(catalog, authenticate(catalog, issued.secret))
