"""Fixtures for security tests: a Relay of their own whose host keys are random secrets, two users and two
service accounts, and a policy that logs live payloads (the riskiest place for a secret to end up)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devtools.fake_upstream.harness import FakeUpstream, start_fake_upstream
from devtools.services import ServiceUrls
from devtools.stack import MODEL, Stack
from devtools.webhook_receiver import Receiver
from tests.webhooks.helpers import new_secret

HOST_KEYS = {name: f"sk-{name}-{secrets.token_urlsafe(24)}" for name in ("main", "spare", "refused")}
# Webhook secrets: a project's endpoint (and the previous one of a rotation), and a batch's callback.
WEBHOOK_SECRETS = {name: new_secret() for name in ("project", "previous", "callback")}
WEBHOOK_SETTINGS = {"webhook_allowed_hosts": "127.0.0.1", "webhook_allowed_networks": "127.0.0.0/8"}


def security_catalog(upstream_url: str, receiver_url: str = "http://127.0.0.1:9") -> dict[str, Any]:
    breaker = {"failures": 10000, "cooldown": "1s"}
    return {
        "hosts": [{"name": "openai", "base_url": upstream_url,
                   "keys": [{"name": f"k-{name}", "value": value} for name, value in HOST_KEYS.items()]}],
        "models": [{"name": MODEL, "bindings": [{"host": "openai", "adapter": "openai", "upstream_model": MODEL,
                                                 "pricing": {"input_per_mtok": 1, "output_per_mtok": 2}}]}],
        "policies": [{"name": "main", "models": ["*"], "key_pool": ["k-main", "k-spare"], "payload_logging": True,
                      "circuit_breaker": breaker},
                     {"name": "refused", "models": ["*"], "key_pool": ["k-refused"], "payload_logging": True,
                      "circuit_breaker": breaker}],
        "teams": [{"name": "t-sec"}],
        "projects": [{"name": "p-sec", "team": "t-sec", "webhooks": [
            {"url": f"{receiver_url}/project", "secret": WEBHOOK_SECRETS["project"],
             "previous_secret": WEBHOOK_SECRETS["previous"]}]}],
        "users": [{"name": name, "policy": "main", "project": "p-sec", "team": "t-sec"} for name in ("alice", "bob")],
        "service_accounts": [{"name": name, "policy": "main", "project": "p-sec", "team": "t-sec"}
                             for name in ("svc-a", "svc-b")],
    }


@pytest.fixture(scope="session")
def security_upstream() -> Iterator[FakeUpstream]:
    upstream = start_fake_upstream()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="session")
def security_receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Receiver]:
    """A webhook receiver process: the security stack's project webhook and callbacks point at it."""
    receiver = Receiver(log_path=tmp_path_factory.mktemp("security-receiver") / "receiver.log").start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="session")
def security_stack(services: ServiceUrls, security_upstream: FakeUpstream, security_receiver: Receiver,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    built = Stack.on_own_services("security", upstream=security_upstream,
                                  workdir=tmp_path_factory.mktemp("security-stack"),
                                  catalog=security_catalog(security_upstream.url, security_receiver.url),
                                  **WEBHOOK_SETTINGS)
    yield built
    built.close()


@pytest.fixture(scope="session")
def issue(security_stack: Stack) -> Callable[..., dict[str, Any]]:
    """Create a relay key (`issue("key", "svc-a")`) or mint a token (`issue("token", "alice")`): the admin API's
    answer, with the secret under `secret`."""

    def make(kind: str, principal: str, policy: str = "main") -> dict[str, Any]:
        if kind == "token":
            res = security_stack.admin("POST", "/admin/tokens", json={"user": principal, "ttl_seconds": 3600})
            assert res.status_code == 201, res.get_data(as_text=True)
            return {**res.json, "secret": res.json["token"]}
        principal_kind = "user" if principal in ("alice", "bob") else "service_account"
        res = security_stack.admin("POST", "/admin/relay-keys", json={"principal_kind": principal_kind,
                                                                      "principal": principal, "policy": policy})
        assert res.status_code == 201, res.get_data(as_text=True)
        return {**res.json, "secret": res.json["key"]}

    return make
