"""Relay's configuration: one typed object read once from RELAY_* environment variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

from app.host_rules import HostRules
from app.queues import QUEUE_TYPES

PAYLOAD_BACKENDS = ("folder", "s3")


class SettingsError(Exception):
    """A required setting is missing or invalid; the message names it."""


class SettingMissing(SettingsError):
    """A required RELAY_* variable is not set at all (the environment itself may be missing)."""


@dataclass(frozen=True)
class Settings:
    database_url: str
    broker_url: str
    admin_token: str
    secret_key: str
    batch_payload_dir: str = "relay-batch-payloads"
    batch_payload_mode: str = "0600"  # octal mode of payload files; folders get the matching search bits
    payload_backend: str = "folder"  # where payloads are kept: folder (RELAY_BATCH_PAYLOAD_DIR) or s3 (a bucket)
    s3_endpoint_url: str = ""  # an S3-compatible server's URL; empty: AWS S3 of RELAY_S3_REGION
    s3_bucket: str = ""
    s3_prefix: str = ""  # the keys' prefix in the bucket (e.g. relay/)
    s3_region: str = "us-east-1"
    batch_item_time_limit_s: float = 300.0
    batch_max_items: int = 100_000
    batch_max_bytes: int = 256 * 1024 * 1024
    max_request_bytes: int = 32 * 1024 * 1024
    files_max_bytes: int = 200 * 1024 * 1024  # an OpenAI Files API upload (OpenAI's batch input limit)
    openai_batch_max_requests: int = 50_000  # lines of an OpenAI batch input file (OpenAI's limit)
    provider_batch_expiry_s: float = 86400.0  # OpenAI/Anthropic API batches: queued requests expire (24 h); 0 = never
    upstream_connect_timeout_s: float = 10.0
    upstream_read_timeout_s: float = 300.0
    payload_log_max_bytes: int = 64 * 1024
    db_pool_min: int = 2
    db_pool_max: int = 20
    cache_poll_interval_s: float = 0.5
    dispatch_window: int = 10000  # a cap: the window is sized from the live workers' threads
    worker_heartbeat_s: float = 2.0
    worker_lost_after_s: float = 15.0
    queue_name: str = "relay.batch_items"
    queue_type: str = "classic"
    broker_failover_urls: str = ""  # more RabbitMQ nodes, comma-separated: tried in order after broker_url
    broker_ui_url: str = ""

    metrics_token: str = ""  # bearer token that may read GET /metrics (the admin token always may)
    worker_id: str = ""
    api_header_timeout_s: int = 15
    api_io_timeout_s: float = 30.0
    webhook_allowed_hosts: str = ""  # hosts a batch's callback_url may name: names, *.suffix, IPs or CIDRs (comma list)
    webhook_allowed_networks: str = ""  # non-public networks deliveries may connect to (CIDRs, comma list)
    webhook_timeout_s: float = 5.0  # one delivery attempt: connect, send, the answer's status and headers
    webhook_connect_timeout_s: float = 2.0  # of which the connection at most
    webhook_threads: int = 4  # delivery attempts a worker process makes at once, on threads of their own
    webhook_per_destination: int = 2  # of which to one destination (scheme, host, port) at most
    webhook_retry_min_s: float = 5.0  # the first retry's wait; each next one doubles ...
    webhook_retry_max_s: float = 21_600.0  # ... up to this
    webhook_give_up_after_s: float = 259_200.0  # 72 h: then a delivery is marked failed
    webhook_queue_name: str = ""  # the webhook actor's queue; empty: RELAY_QUEUE_NAME + ".webhooks"
    api_connections_per_address: int = -1  # a server process's connections one address may hold: -1 half, 0 any
    # The process commands' defaults (`relay api --bind/--workers/--connections`, `relay worker -p/-t/--gevent`)
    api_bind: str = "127.0.0.1:8080"
    api_workers: int = 2
    api_connections: int = 1000  # open connections per API worker process, at most
    worker_processes: int = 2
    worker_threads: int = 16
    worker_gevent: bool = False
    worker_metrics_port: int = 9464  # the workers' /metrics server; 0 turns it off
    worker_metrics_host: str = "127.0.0.1"  # 0.0.0.0 in a pod, where Prometheus scrapes the pod's address

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Build settings from RELAY_* variables; raise SettingsError naming the first bad one."""
        settings = cls(**_read_env(cls, env))
        settings.validate()
        return settings

    def validate(self) -> None:
        """Reject values that parse but cannot work."""
        if not self.database_url.startswith(("postgresql://", "postgres://")):
            raise SettingsError("RELAY_DATABASE_URL must be a postgresql:// URL")
        if not self.broker_url.startswith(("amqp://", "amqps://")):
            raise SettingsError("RELAY_BROKER_URL must be an amqp:// URL")
        if not all(url.startswith(("amqp://", "amqps://")) for url in self.broker_urls):
            raise SettingsError("RELAY_BROKER_FAILOVER_URLS must be amqp:// URLs separated by commas")
        if len(self.secret_key) < 16:
            raise SettingsError("RELAY_SECRET_KEY must be at least 16 characters")
        if len(self.admin_token) < 16:
            raise SettingsError("RELAY_ADMIN_TOKEN must be at least 16 characters")
        if self.queue_type not in QUEUE_TYPES:
            raise SettingsError(f"RELAY_QUEUE_TYPE must be {' or '.join(QUEUE_TYPES)}, got {self.queue_type!r}")
        if self.metrics_token and len(self.metrics_token) < 16:
            raise SettingsError("RELAY_METRICS_TOKEN must be at least 16 characters")
        for name in ("batch_item_time_limit_s", "batch_max_items", "batch_max_bytes", "files_max_bytes",
                     "openai_batch_max_requests", "api_header_timeout_s", "api_io_timeout_s", "webhook_timeout_s",
                     "webhook_connect_timeout_s", "webhook_threads", "webhook_per_destination", "webhook_retry_min_s",
                     "webhook_retry_max_s", "webhook_give_up_after_s"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"RELAY_{name.upper()} must be positive")
        if self.api_connections_per_address < -1:
            raise SettingsError("RELAY_API_CONNECTIONS_PER_ADDRESS must be -1 (half of --connections), 0 (no cap)"
                                " or a number of connections")
        _file_mode(self.batch_payload_mode)
        self._validate_payload_backend()
        if self.webhook_retry_max_s < self.webhook_retry_min_s:
            raise SettingsError("RELAY_WEBHOOK_RETRY_MAX_S must be at least RELAY_WEBHOOK_RETRY_MIN_S")
        for name, networks_only in (("webhook_allowed_hosts", False), ("webhook_allowed_networks", True)):
            try:
                HostRules.parse(getattr(self, name), networks_only=networks_only)
            except ValueError as exc:
                raise SettingsError(f"RELAY_{name.upper()}: {exc}") from None

    def _validate_payload_backend(self) -> None:
        if self.payload_backend not in PAYLOAD_BACKENDS:
            raise SettingsError(f"RELAY_PAYLOAD_BACKEND must be {' or '.join(PAYLOAD_BACKENDS)},"
                                f" got {self.payload_backend!r}")
        if self.payload_backend == "s3" and not self.s3_bucket:
            raise SettingsError("RELAY_S3_BUCKET is required when RELAY_PAYLOAD_BACKEND is s3")
        if self.s3_endpoint_url and not self.s3_endpoint_url.startswith(("http://", "https://")):
            raise SettingsError("RELAY_S3_ENDPOINT_URL must be an http:// or https:// URL")

    @property
    def broker_urls(self) -> tuple[str, ...]:
        """The RabbitMQ nodes a connection tries, in order: RELAY_BROKER_URL, then RELAY_BROKER_FAILOVER_URLS."""
        failover = (url.strip() for url in self.broker_failover_urls.split(","))
        return (self.broker_url, *(url for url in failover if url))

    @property
    def webhook_queue(self) -> str:
        """The webhook actor's queue: RELAY_WEBHOOK_QUEUE_NAME, or the item queue's name + `.webhooks` (a new item
        queue name, e.g. to switch RELAY_QUEUE_TYPE, gives the webhooks a new queue too)."""
        return self.webhook_queue_name or f"{self.queue_name}.webhooks"

    @property
    def payload_file_mode(self) -> int:
        """RELAY_BATCH_PAYLOAD_MODE as a number."""
        return _file_mode(self.batch_payload_mode)


@dataclass(frozen=True)
class ClientSettings:
    """What the `relay batches` and `relay admin-batches` clients read from the environment (they need no
    database): the API's URL (RELAY_URL), a relay key or token (RELAY_KEY), the admin token (RELAY_ADMIN_TOKEN), and
    the cost bound in dollars above which `relay batches submit` asks first (RELAY_CONFIRM_ABOVE)."""

    url: str = "http://127.0.0.1:8080"
    key: str | None = None
    admin_token: str | None = None
    confirm_above: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClientSettings:
        return cls(**_read_env(cls, env))


def _read_env(cls: type, env: Mapping[str, str] | None) -> dict[str, Any]:
    """The RELAY_<FIELD> values of dataclass CLS's fields that are set in ENV (os.environ), parsed to their types."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for f in fields(cls):
        name = "RELAY_" + f.name.upper()
        raw = env.get(name)
        if raw is None or raw == "":
            if f.default is MISSING:
                raise SettingMissing(f"{name} is required but not set")
            continue
        values[f.name] = _parse(name, raw, f.type)
    return values


def _file_mode(text: str) -> int:
    """An octal file mode, at most 0777, with read and write for the owner; SettingsError otherwise."""
    try:
        mode = int(text, 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o777 or mode & 0o600 != 0o600:
        raise SettingsError("RELAY_BATCH_PAYLOAD_MODE must be an octal file mode with read and write for the owner,"
                            f" like 0600 or 0640; got {text!r}")
    return mode


_NOT_A_NUMBER = {"RELAY_WORKER_METRICS_PORT": "must be a port number (0 turns the workers' metrics off), not {raw!r}"}


def _parse(name: str, raw: str, kind: object) -> object:
    try:
        if kind in ("int", int):
            return int(raw)
        if kind in ("float", float):
            return float(raw)
    except ValueError:
        problem = _NOT_A_NUMBER.get(name, "must be a number, got {raw!r}").format(raw=raw)
        raise SettingsError(f"{name} {problem}") from None
    if kind in ("bool", bool):
        if raw.lower() not in ("1", "0", "true", "false"):
            raise SettingsError(f"{name} must be 1 or 0, got {raw!r}")
        return raw.lower() in ("1", "true")
    return raw
