"""Who may read metrics: the bearer of RELAY_METRICS_TOKEN or of the admin token, on the API's /metrics and on the
workers' metrics port alike (the metrics name every tenant's policies, host keys, breakers and item counts)."""

from __future__ import annotations

import hmac
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from app.auth import credential_from_headers
from app.credentials.errors import InvalidCredential, MissingCredential

if TYPE_CHECKING:
    from app.settings import Settings

log = logging.getLogger("relay.metrics")
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="relay-metrics"'}
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def check_metrics_reader(settings: Settings, headers: Any) -> None:
    """MissingCredential or InvalidCredential (401, with the Bearer challenge) unless HEADERS carry the metrics
    token or the admin token; every token is compared, in constant time."""
    secret = credential_from_headers(headers)
    if not secret:
        raise MissingCredential(message="send `Authorization: Bearer <RELAY_METRICS_TOKEN>`", headers=CHALLENGE)
    given = secret.encode("utf-8", "replace")
    allowed = [t.encode() for t in (settings.metrics_token, settings.admin_token) if t]
    if not any([hmac.compare_digest(given, token) for token in allowed]):  # a list: every token is compared
        raise InvalidCredential(message="invalid metrics token", headers=CHALLENGE)


def token_guarded(app: WsgiApp, settings: Settings) -> WsgiApp:
    """APP (prometheus_client's exposition app) answered only for a metrics reader; anyone else gets Relay's 401."""
    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        headers = {"authorization": environ.get("HTTP_AUTHORIZATION", ""),
                   "x-api-key": environ.get("HTTP_X_API_KEY", "")}
        try:
            check_metrics_reader(settings, headers)
        except (MissingCredential, InvalidCredential) as refused:
            body = json.dumps(refused.to_dict()).encode()
            start_response(f"{refused.status} Unauthorized", [("Content-Type", "application/json"),
                                                              ("Content-Length", str(len(body))),
                                                              *refused.headers.items()])
            return [body]
        return app(environ, start_response)
    return guarded


def serve_in_thread(app: WsgiApp, host: str, port: int) -> int:
    """Serve APP on HOST:PORT from a daemon thread, a thread per request; the port it got (PORT 0: one the system
    picks). OSError when the port is taken."""
    from prometheus_client.exposition import ThreadingWSGIServer

    class _Server(ThreadingWSGIServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    server = make_server(host, port, app, _Server, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="worker-metrics", daemon=True).start()
    return server.server_port


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape on stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        pass
