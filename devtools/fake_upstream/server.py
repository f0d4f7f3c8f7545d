"""The fake upstream's aiohttp app: every API call is recorded, delayed, checked and answered here.

Order for one call: record it -> global + key latency -> `hang` / `reset` -> auth (401) ->
`anthropic-version` (400) -> `rate_limited` (429) / `fail` -> body validation (400) -> answer.
Latency is added before the first byte, streamed or not; `chunk_delay_ms` spaces the SSE events.
Serve the app with `handler_cancellation=True` (as `start_site` does) so hung calls end with their client.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from devtools.fake_upstream.access import check_access, per_second_limit, request_key
from devtools.fake_upstream.behaviour import Behaviour
from devtools.fake_upstream.control import PREFIX, STATE, control_app
from devtools.fake_upstream.endpoints import ENDPOINTS, Endpoint
from devtools.fake_upstream.errors import ANTHROPIC, InvalidRequest, UpstreamError, error_response, request_id
from devtools.fake_upstream.state import CallRecord, UpstreamState

MAX_LOGGED_BODY = 1_000_000  # characters of a non-JSON body kept in the request log
SHUTDOWN_TIMEOUT_S = 1.0
BACKLOG = 4096


def parse_body(raw: bytes) -> tuple[Any, UpstreamError | None]:
    """The JSON body of a call, or the 400 the real APIs give for invalid JSON / a non-object body."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")[:MAX_LOGGED_BODY], InvalidRequest(
            "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP "
            "library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)")
    if not isinstance(body, dict):
        return body, InvalidRequest("The request body must be a JSON object.")
    return body, None


def describe_call(request: web.Request, key: str | None, body: Any) -> dict[str, Any]:
    """The fields of the call's record: path, key, model, stream flag, all headers, the body and the caller's
    `traceparent`."""
    headers: dict[str, str] = {}
    for name, value in request.headers.items():
        name = name.lower()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    fields = body if isinstance(body, dict) else {}
    model = fields.get("model")
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    return {"method": request.method, "path": request.path, "query": request.query_string,
            "peer": f"{peer[0]}:{peer[1]}" if peer else "", "key": key,
            "model": model if isinstance(model, str) else None, "stream": fields.get("stream") is True,
            "headers": headers, "body": body, "traceparent": headers.get("traceparent")}


async def wait_forever() -> None:
    """Never return: the call ends when its client gives up (handler cancellation) or the server stops."""
    await asyncio.Event().wait()


def reset_connection(request: web.Request) -> None:
    """Drop the connection with a TCP RST, without answering."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def answer_headers(family: str) -> dict[str, str]:
    """The provider's request-id header(s) of a successful answer."""
    req_id = request_id()
    return {"x-request-id": req_id, "request-id": req_id} if family == ANTHROPIC else {"x-request-id": req_id}


async def send_frames(request: web.Request, family: str, frames: list[bytes], behaviour: Behaviour,
                      cut: Callable[[], None] | None) -> web.StreamResponse:
    """Stream SSE frames, `chunk_delay_ms` apart; `cut` (stream_cut mode) drops the connection halfway."""
    response = web.StreamResponse(headers={"content-type": "text/event-stream; charset=utf-8",
                                           "cache-control": "no-cache", **answer_headers(family)})
    await response.prepare(request)
    for index, frame in enumerate(frames):
        if cut is not None and index == len(frames) // 2:
            cut()
            await wait_forever()
        await response.write(frame)
        if behaviour.chunk_delay_ms and index < len(frames) - 1:
            await asyncio.sleep(behaviour.chunk_delay_ms / 1000)
    await response.write_eof()
    return response


async def delay_or_drop(request: web.Request, state: UpstreamState, call: CallRecord, behaviour: Behaviour,
                        streamed: bool) -> None:
    """Wait the global + key latency; then `hang` never returns and `reset` drops the connection."""
    delay_ms = state.options.latency_ms + behaviour.latency_ms
    if delay_ms:
        await asyncio.sleep(delay_ms / 1000)
    if behaviour.mode == "hang":
        await wait_forever()
    if behaviour.mode == "reset" or (behaviour.mode == "stream_cut" and not streamed):
        state.finish_call(call, None, "reset")
        reset_connection(request)
        await wait_forever()


def stream_cutter(request: web.Request, state: UpstreamState, call: CallRecord) -> Callable[[], None]:
    """What `stream_cut` does halfway through a stream: note it, then drop the connection."""
    def cut() -> None:
        state.finish_call(call, 200, "reset")
        reset_connection(request)
    return cut


async def answer_call(request: web.Request, endpoint: Endpoint, call: CallRecord, body: Any,
                      body_error: UpstreamError | None) -> web.StreamResponse:
    """Apply the key's behaviour, check the call like the real API, then answer it."""
    state = request.app[STATE]
    family = endpoint.family_for(request.headers)
    behaviour = state.take_behaviour(call.key)
    streamed = endpoint.stream is not None and call.stream and body_error is None
    await delay_or_drop(request, state, call, behaviour, streamed)
    limits: dict[str, str] = {}
    try:
        check_access(family, request.headers, call.key, behaviour, state.options)
        if behaviour.max_rps:
            limits = per_second_limit(family, behaviour, *state.count_in_second(call.key, time.time()))
        if body_error is not None:
            raise body_error
        if endpoint.validate is not None:
            endpoint.validate(body)
    except UpstreamError as error:
        return error_response(family, error)
    if not streamed or endpoint.stream is None:
        return web.json_response(endpoint.build(body, behaviour, family), headers=answer_headers(family) | limits)
    cut = stream_cutter(request, state, call) if behaviour.mode == "stream_cut" else None
    return await send_frames(request, family, endpoint.stream(body, behaviour), behaviour, cut)


async def handle_call(endpoint: Endpoint, request: web.Request) -> web.StreamResponse:
    """Record one API call, answer it, and note how it ended."""
    state = request.app[STATE]
    raw = await request.read() if endpoint.method == "POST" else b"{}"
    body, body_error = parse_body(raw)
    key = request_key(request.headers, endpoint.family_for(request.headers))
    call = state.record_call(describe_call(request, key, body if endpoint.method == "POST" else None))
    try:
        response = await answer_call(request, endpoint, call, body, body_error)
    except (asyncio.CancelledError, ConnectionError):
        state.finish_call(call, None, "abandoned")
        raise
    state.finish_call(call, response.status, "answered")
    return response


async def handle_unknown(request: web.Request) -> web.Response:
    """404 for any other path, in the caller's API shape (like OpenAI's `Invalid URL (METHOD /path)`)."""
    family = ANTHROPIC if "anthropic-version" in request.headers else "openai"
    message = f"Invalid URL ({request.method} {request.path})"
    return error_response(family, UpstreamError(404, "Not found" if family == ANTHROPIC else message))


def _endpoint_handler(endpoint: Endpoint) -> Callable[[web.Request], Any]:
    """An aiohttp handler bound to one endpoint."""
    async def handler(request: web.Request) -> web.StreamResponse:
        return await handle_call(endpoint, request)
    return handler


def create_app(state: UpstreamState | None = None) -> web.Application:
    """The fake upstream app: the APIs in ENDPOINTS, the control API under /_control, 404 for the rest."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[STATE] = state or UpstreamState()
    app.add_subapp(PREFIX, control_app(app[STATE]))
    for endpoint in ENDPOINTS:
        app.router.add_route(endpoint.method, endpoint.path, _endpoint_handler(endpoint))
    app.router.add_route("*", "/{tail:.*}", handle_unknown)
    return app


async def start_site(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve `app` on host:port (0 picks a free port); returns the runner and the bound port."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=BACKLOG, reuse_address=True)
    await site.start()
    return runner, int(runner.addresses[0][1])
