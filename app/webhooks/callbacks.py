"""A batch's own webhook destination, given when it is created: checked against the hosts the operator allows and
stored on the batch row with its secret encrypted (never returned, never logged)."""

from __future__ import annotations

from typing import Any

from app.catalog.secrets import SecretBox
from app.settings import Settings
from app.webhooks.destinations import HostRules, check_callback_url


def callback_columns(settings: Settings, callback_url: str | None = None,
                     callback_secret: str | None = None) -> dict[str, Any]:
    """The batch columns of a callback (its URL, its secret encrypted); {} without one. CallbackUrlNotAllowed (400)
    for a host RELAY_WEBHOOK_ALLOWED_HOSTS does not list. The pair is already checked by the create's schema."""
    if callback_url is None or callback_secret is None:
        return {}
    check_callback_url(callback_url, HostRules.parse(settings.webhook_allowed_hosts))
    box = SecretBox(settings.secret_key)
    return {"callback_url": callback_url, "callback_secret_enc": box.encrypt(callback_secret)}
