"""Routing: from the model name a caller sent to the binding (host + adapter) its policy lets it use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.catalog.model import Binding, Model, Policy
from app.errors import Forbidden, NotFound, ServiceUnavailable


class ModelNotFound(NotFound):
    code = "model_not_found"


class ModelNotAllowed(Forbidden):
    code = "model_not_allowed"


class NoBinding(ServiceUnavailable):
    code = "no_binding"


class PolicyUnavailable(Forbidden):
    """The policy a call runs under (a live request's, a batch item's) stopped working."""

    code = "policy_disabled"


class PolicyDeleted(PolicyUnavailable):
    code = "policy_deleted"


class PolicyDisabled(PolicyUnavailable):
    code = "policy_disabled"


@dataclass(frozen=True)
class Route:
    model: Model
    binding: Binding
    policy: Policy


def check_policy(policy: Policy | None) -> Policy:
    """The policy must exist, not be deleted and be enabled: the one check of live requests and batch items."""
    if policy is None or policy.deleted:
        raise PolicyDeleted(message="the policy this request runs under was deleted")
    if not policy.enabled:
        raise PolicyDisabled(message=f"policy {policy.name!r} is disabled")
    return policy


def resolve(models: Mapping[str, Model], policy: Policy, model_name: Any) -> Route:
    """Pick the first enabled binding of an enabled, granted model, preferring hosts the policy has keys for."""
    if not isinstance(model_name, str) or not model_name:
        raise ModelNotFound(message="the request names no model")
    model = models.get(model_name)
    if model is None or not model.enabled:
        raise ModelNotFound(message=f"model {model_name!r} does not exist")
    if not policy.grants(model_name):
        raise ModelNotAllowed(message=f"model {model_name!r} is not granted by policy {policy.name!r}")
    usable = [b for b in model.bindings if b.enabled and b.host.enabled]
    if not usable:
        raise NoBinding(message=f"model {model_name!r} has no enabled binding")
    pool_hosts = {k.host_id for k in policy.key_pool if k.enabled}
    with_keys = [b for b in usable if b.host.id in pool_hosts]
    return Route(model=model, binding=(with_keys or usable)[0], policy=policy)
