"""The control API (`/_control/...`): set behaviours and options, read counters and recorded calls.

- `GET  /_control/health`                        -> {"ok": true, "tcp_nodelay": true}
- `GET  /_control/stats`                         -> counters: total, in_flight, by_key/path/model/status/outcome
- `GET  /_control/requests?key=&path=&model=&since=&limit=` -> recorded calls, oldest first
- `POST /_control/reset`                         -> counters, log and behaviours back to start-up state
- `GET  /_control/keys`                          -> options, default, per-key behaviours, remaining `times`
- `PUT  /_control/keys/{key}`  body: Behaviour   -> the key's behaviour (replaces any previous one)
- `DELETE /_control/keys/{key}`                  -> the key falls back to the default
- `GET|PUT /_control/default`  body: Behaviour   -> behaviour of keys without their own
- `GET|PUT|PATCH /_control/settings` body: partial ServerOptions -> server-wide options
"""

from __future__ import annotations

import json
import socket
from typing import Any

from aiohttp import web

from devtools.fake_upstream.behaviour import Behaviour, InvalidControl
from devtools.fake_upstream.state import UpstreamState

STATE = web.AppKey("fake_upstream_state", UpstreamState)
PREFIX = "/_control"


def _json(data: Any, status: int = 200) -> web.Response:
    """A JSON answer of the control API."""
    return web.Response(status=status, text=json.dumps(data), content_type="application/json")


async def _read_json(request: web.Request) -> Any:
    """The request body as JSON (empty body: an empty object)."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise InvalidControl(f"body is not valid JSON: {exc}") from exc


@web.middleware
async def control_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Turn invalid control bodies into 400 `{"error": message}`."""
    try:
        response: web.StreamResponse = await handler(request)
    except InvalidControl as exc:
        return _json({"error": str(exc)}, status=400)
    return response


def _nodelay(request: web.Request) -> bool:
    """Whether this connection's socket has TCP_NODELAY (every connection gets the same setting)."""
    sock = request.transport.get_extra_info("socket") if request.transport is not None else None
    return sock is not None and bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


async def get_health(request: web.Request) -> web.Response:
    """Liveness of the fake upstream, and whether its sockets have TCP_NODELAY."""
    return _json({"ok": True, "tcp_nodelay": _nodelay(request)})


async def get_stats(request: web.Request) -> web.Response:
    """Call counters."""
    return _json(request.app[STATE].stats())


async def get_requests(request: web.Request) -> web.Response:
    """Recorded calls, filtered by the query string."""
    try:
        return _json(request.app[STATE].requests(request.query))
    except ValueError as exc:
        raise InvalidControl("since and limit must be integers") from exc


async def post_reset(request: web.Request) -> web.Response:
    """Back to the start-up configuration, with empty counters and log."""
    request.app[STATE].reset()
    return _json({"reset": True})


async def get_keys(request: web.Request) -> web.Response:
    """Every behaviour and option currently set."""
    return _json(request.app[STATE].behaviours())


async def put_key(request: web.Request) -> web.Response:
    """Set one key's behaviour."""
    behaviour = Behaviour.from_json(await _read_json(request))
    request.app[STATE].set_key(request.match_info["key"], behaviour)
    return _json(behaviour.to_json())


async def delete_key(request: web.Request) -> web.Response:
    """Drop one key's behaviour."""
    found = request.app[STATE].forget_key(request.match_info["key"])
    return _json({"deleted": found}, status=200 if found else 404)


async def get_default(request: web.Request) -> web.Response:
    """The behaviour of keys without their own."""
    return _json(request.app[STATE].default.to_json())


async def put_default(request: web.Request) -> web.Response:
    """Set the behaviour of keys without their own."""
    behaviour = Behaviour.from_json(await _read_json(request))
    request.app[STATE].set_default(behaviour)
    return _json(behaviour.to_json())


async def get_settings(request: web.Request) -> web.Response:
    """The server-wide options."""
    return _json(request.app[STATE].options.to_json())


async def update_settings(request: web.Request) -> web.Response:
    """Change some server-wide options."""
    state = request.app[STATE]
    state.set_options(state.options.updated(await _read_json(request)))
    return _json(state.options.to_json())


def control_app(state: UpstreamState) -> web.Application:
    """The control API as a sub-application mounted at `/_control`."""
    app = web.Application(middlewares=[control_errors])
    app[STATE] = state
    app.router.add_get("/health", get_health)
    app.router.add_get("/stats", get_stats)
    app.router.add_get("/requests", get_requests)
    app.router.add_post("/reset", post_reset)
    app.router.add_get("/keys", get_keys)
    app.router.add_put("/keys/{key:.+}", put_key)
    app.router.add_delete("/keys/{key:.+}", delete_key)
    app.router.add_get("/default", get_default)
    app.router.add_put("/default", put_default)
    app.router.add_get("/settings", get_settings)
    app.router.add_put("/settings", update_settings)
    app.router.add_patch("/settings", update_settings)
    return app
