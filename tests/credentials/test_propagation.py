"""Two app instances sharing one database: a change made on one is seen by the other (how soon is a duration, for
bench/; here the wait is a bound only a hang crosses)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from app.access.cache import get_catalog
from app.api.factory import create_app
from app.auth import authenticate, get_policy
from app.catalog.apply import apply_catalog
from app.errors import RelayError
from app.runtime import Runtime
from devtools.waiting import until
from tests.catalog.helpers import base_catalog

pytestmark = pytest.mark.integration


@pytest.fixture()
def replicas(settings) -> Iterator[tuple[Runtime, Runtime]]:  # type: ignore[no-untyped-def]
    """Two runtimes, each with its own pool and catalog cache (as two API replicas would have)."""
    one, two = Runtime.build(settings), Runtime.build(settings)
    apply_catalog(one, base_catalog())
    get_catalog(one), get_catalog(two)
    yield one, two
    one.close()
    two.close()



def refused_with(runtime: Runtime, secret: str, code: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            authenticate(runtime, secret)
        except RelayError as exc:
            return exc.code == code
        return False
    return check


def admin(app):  # type: ignore[no-untyped-def]
    client = app.test_client()
    token = app.extensions["relay"].settings.admin_token
    return lambda method, path, **kw: getattr(client, method)(path, headers={"Authorization": f"Bearer {token}"}, **kw)


def test_a_disable_on_one_app_is_enforced_by_the_other(replicas, monkeypatch) -> None:
    one, two = replicas
    call_one = admin(create_app(runtime=one))
    created = call_one("post", "/admin/relay-keys", json={"principal_kind": "user", "principal": "t-alice",
                                                          "policy": "default"}).json
    assert authenticate(two, created["key"]).credential_id is not None  # a miss, caught up by one version check
    time.sleep(0.3)
    real_connection = two.pool.connection

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("replica two queried the database on the hot path")

    monkeypatch.setattr(two.pool, "connection", counted)
    for _ in range(50):
        authenticate(two, created["key"])  # nothing changed: served from the snapshot, no query
    assert call_one("post", f"/admin/relay-keys/{created['id']}/disable").json["state"] == "disabled"
    until(refused_with(two, created["key"], "key_disabled"), what="the change on the other app")
    monkeypatch.setattr(two.pool, "connection", real_connection)


@pytest.mark.parametrize("action", ["revoke", "rotate"])
def test_revocation_and_rotation_propagate(replicas, action) -> None:
    one, two = replicas
    call_one = admin(create_app(runtime=one))
    created = call_one("post", "/admin/relay-keys", json={"principal_kind": "user", "principal": "t-alice",
                                                          "policy": "default"}).json
    authenticate(two, created["key"])
    assert call_one("post", f"/admin/relay-keys/{created['id']}/{action}").status_code == 200
    code = "key_revoked" if action == "revoke" else "key_rotated_out"
    until(refused_with(two, created["key"], code), what="the change on the other app")


def test_a_policy_change_propagates(replicas) -> None:
    one, two = replicas
    call_one = admin(create_app(runtime=one))
    policy = next(p for p in get_catalog(two).snapshot().policies.values() if p.name == "narrow" and not p.deleted)
    assert call_one("post", "/admin/policies/narrow/disable").status_code == 200
    until(lambda: not get_policy(two, policy.id).enabled, what="the change on the other app")  # type: ignore[union-attr]
    assert call_one("post", "/admin/policies/narrow/enable").status_code == 200
    until(lambda: get_policy(two, policy.id).enabled, what="the change on the other app")  # type: ignore[union-attr]


def test_a_token_revocation_propagates(replicas) -> None:
    one, two = replicas
    call_one = admin(create_app(runtime=one))
    minted = call_one("post", "/admin/tokens", json={"user": "t-alice", "ttl_seconds": 600}).json
    authenticate(two, minted["token"])
    assert call_one("post", f"/admin/tokens/{minted['id']}/revoke").status_code == 200
    until(refused_with(two, minted["token"], "token_revoked"), what="the change on the other app")


def test_the_version_poll_catches_a_change_whose_notification_was_lost(replicas) -> None:
    one, two = replicas
    from app.credentials import keys

    issued = keys.create_key(one, principal_kind="user", principal="t-alice", policy="default")
    authenticate(two, issued.secret)
    with one.pool.connection() as conn:  # a change that bumps the version but sends no NOTIFY
        conn.execute("UPDATE relay_keys SET state = 'disabled' WHERE id = %s", (issued.view.key.id,))
        conn.execute("UPDATE catalog_version SET version = version + 1")
    until(refused_with(two, issued.secret, "key_disabled"), what="the change on the other app")


def test_the_listener_reconnects_after_losing_its_connection(replicas) -> None:
    one, two = replicas
    from app.access.cache import LISTENER_NAME
    from app.credentials import keys

    issued = keys.create_key(one, principal_kind="user", principal="t-alice", policy="default")
    authenticate(two, issued.secret)
    with one.pool.connection() as conn:
        killed = conn.execute("SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity"
                              " WHERE application_name = %s AND datname = current_database()",
                              (LISTENER_NAME,)).fetchone()
    assert killed["n"] >= 2
    keys.change_key_state(one, issued.view.key.id, "disable")
    until(refused_with(two, issued.secret, "key_disabled"), what="the change on the other app")
