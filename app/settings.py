"""Relay's configuration: one typed object read once from RELAY_* environment variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields


class SettingsError(Exception):
    """A required setting is missing or invalid; the message names it."""


@dataclass(frozen=True)
class Settings:
    database_url: str
    broker_url: str
    admin_token: str
    secret_key: str
    batch_payload_dir: str = "relay-batch-payloads"
    batch_item_time_limit_s: float = 300.0
    batch_max_items: int = 100_000
    batch_max_bytes: int = 256 * 1024 * 1024
    max_request_bytes: int = 32 * 1024 * 1024
    upstream_connect_timeout_s: float = 10.0
    upstream_read_timeout_s: float = 300.0
    payload_log_max_bytes: int = 64 * 1024
    db_pool_min: int = 2
    db_pool_max: int = 20
    cache_poll_interval_s: float = 0.5
    dispatch_window: int = 2000
    worker_heartbeat_s: float = 2.0
    worker_lost_after_s: float = 15.0
    queue_name: str = "relay.batch_items"
    worker_id: str = ""
    api_header_timeout_s: int = 15
    api_io_timeout_s: float = 30.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Build settings from RELAY_* variables; raise SettingsError naming the first bad one."""
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for f in fields(cls):
            name = "RELAY_" + f.name.upper()
            raw = env.get(name)
            if raw is None or raw == "":
                if f.default is MISSING:
                    raise SettingsError(f"{name} is required but not set")
                continue
            values[f.name] = _parse(name, raw, f.type)
        settings = cls(**values)  # type: ignore[arg-type]
        settings.validate()
        return settings

    def validate(self) -> None:
        """Reject values that parse but cannot work."""
        if not self.database_url.startswith(("postgresql://", "postgres://")):
            raise SettingsError("RELAY_DATABASE_URL must be a postgresql:// URL")
        if not self.broker_url.startswith(("amqp://", "amqps://")):
            raise SettingsError("RELAY_BROKER_URL must be an amqp:// URL")
        if len(self.secret_key) < 16:
            raise SettingsError("RELAY_SECRET_KEY must be at least 16 characters")
        if len(self.admin_token) < 16:
            raise SettingsError("RELAY_ADMIN_TOKEN must be at least 16 characters")
        for name in ("batch_item_time_limit_s", "batch_max_items", "batch_max_bytes", "api_header_timeout_s",
                     "api_io_timeout_s"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"RELAY_{name.upper()} must be positive")


def _parse(name: str, raw: str, kind: object) -> object:
    try:
        if kind in ("int", int):
            return int(raw)
        if kind in ("float", float):
            return float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, got {raw!r}") from None
    return raw
