"""Slow clients: SLOW_CONNECTIONS connections that send half a request line, half a body, or a streamed request
whose answer they never read, held open while a keep-alive client probes `/healthz` and a live call; then how long
the gateway takes to drop the partial requests (its documented deadlines). Everything stays on loopback, and every
loop is bounded."""

from __future__ import annotations

import selectors
import socket
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests

from bench.env import MODEL, BenchEnv
from bench.live import chat_body, p99
from bench.report import Results
from bench.sizes import Sizes


@dataclass(frozen=True)
class SlowTarget:
    """A gateway: its base URL, a key for normal calls, a liveness path, and (key, model) for the two streams."""

    url: str
    key: str
    health_path: str
    trickle: tuple[str, str]
    big: tuple[str, str]


@dataclass
class Opened:
    sock: socket.socket
    at: float
    kind: str  # line | body | trickle | big
    request_id: str = ""


def _slow_peers(env: BenchEnv) -> list[tuple[str, tuple[str, str]]]:
    """(name, (base URL, key)) of the peers this scenario can drive (LiteLLM's health path and slow models)."""
    return [(name, (peer.url, peer.key)) for name, peer in env.peers.items() if peer.slow_clients]


def slow_clients(env: BenchEnv, sizes: Sizes, repeat: int, results: Results) -> None:
    env.stop_workers()
    if sizes.api_deadlines is not None:  # small sizes: short deadlines, so the scenario takes seconds
        env.start_api(api_header_timeout_s=sizes.api_deadlines[0], api_io_timeout_s=sizes.api_deadlines[1])
    targets = {"slow clients": SlowTarget(env.api_url, env.keys["fast"], "/healthz", (env.keys["trickle"], MODEL),
                                          (env.keys["big"], MODEL))}
    targets.update({f"slow clients ({name})": SlowTarget(url, key, "/health/liveliness", (key, f"{MODEL}-trickle"),
                                                         (key, f"{MODEL}-big"))
                    for name, (url, key) in _slow_peers(env)})
    try:
        for _ in range(repeat):
            for scenario, target in targets.items():
                measure(results, scenario, target, sizes)
    finally:
        if sizes.api_deadlines is not None:
            env.start_api()


def measure(results: Results, scenario: str, target: SlowTarget, sizes: Sizes) -> None:
    label = f"{sizes.slow_clients} slow connections"
    probe(target, 3)  # warm the gateway (a restarted API loads its caches on its first calls)
    with ExitStack() as stack:
        opened = open_slow(stack, target, sizes.slow_clients)
        health, live, errors = probe(target, sizes.slow_probes)
        results.add(scenario, f"{label}: GET {target.health_path} p99", p99(health) * 1000, "ms", target=("<=", 100.0))
        results.add(scenario, f"{label}: live call p99", p99(live) * 1000, "ms", target=("<=", 100.0))
        results.add(scenario, f"{label}: probes answered 5xx or failed", errors, "", target=("<=", 0))
        dropped = wait_dropped([o for o in opened if o.kind in ("line", "body")], sizes.slow_wait_s)
        for kind, name in (("line", "half a request line"), ("body", "half a body")):
            times = [dropped[id(o)] - o.at for o in opened if o.kind == kind and id(o) in dropped]
            if times:
                results.add(scenario, f"{label}: {name} dropped after (median)", sorted(times)[len(times) // 2], "s")
        never = sum(1 for o in opened if o.kind in ("line", "body") and id(o) not in dropped)
        results.add(scenario, f"{label}: partial requests still open after {sizes.slow_wait_s:.0f} s", never, "",
                    target=("<=", 0))


def open_slow(stack: ExitStack, target: SlowTarget, count: int) -> list[Opened]:
    """COUNT connections: 40% half a request line, 40% half a body, the rest streams never read (a few big)."""
    host, port = _address(target.url)
    big = max(1, count // 50)
    kinds = ["line", "body"] * (count * 2 // 5) + ["big"] * big
    kinds += ["trickle"] * max(0, count - len(kinds))
    opened = []
    for kind in kinds[:count]:
        sock = stack.enter_context(socket.socket())
        if kind == "big":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(10)
        sock.connect((host, port))
        item = Opened(sock, time.monotonic(), kind, uuid.uuid4().hex)
        sock.sendall(_request_bytes(target, item))
        opened.append(item)
    return opened


def _request_bytes(target: SlowTarget, item: Opened) -> bytes:
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: {urlsplit(target.url).netloc}\r\n"
    if item.kind == "line":
        return b"POST /v1/chat/completions HT"
    if item.kind == "body":
        return (head + f"Authorization: Bearer {target.key}\r\nContent-Type: application/json\r\n"
                       "Content-Length: 200\r\n\r\n").encode() + b'{"model": "'
    key, model = target.trickle if item.kind == "trickle" else target.big
    body = chat_body("stream please", stream=True).replace(MODEL.encode(), model.encode(), 1)
    return (head + f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\nx-request-id: "
                   f"{item.request_id}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def probe(target: SlowTarget, count: int) -> tuple[list[float], list[float], int]:
    """COUNT GETs of the liveness path and COUNT live calls, alternating on one keep-alive session."""
    health: list[float] = []
    live: list[float] = []
    errors = 0
    body = chat_body("hello")
    headers = {"Authorization": f"Bearer {target.key}", "content-type": "application/json"}
    with requests.Session() as session:
        for _ in range(count):
            for times, call in ((health, lambda: session.get(target.url + target.health_path, timeout=30)),
                                (live, lambda: session.post(target.url + "/v1/chat/completions", data=body,
                                                            headers=headers, timeout=30))):
                started = time.perf_counter()
                try:
                    status = call().status_code
                except requests.RequestException:
                    status = 599
                times.append(time.perf_counter() - started)
                errors += status >= 500
    return health, live, errors


def wait_dropped(opened: list[Opened], limit_s: float) -> dict[int, float]:
    """Read every connection until the gateway closes it, for at most LIMIT_S; id(item) → when it was closed."""
    dropped: dict[int, float] = {}
    with selectors.DefaultSelector() as selector:
        for item in opened:
            item.sock.setblocking(False)
            selector.register(item.sock, selectors.EVENT_READ, item)
        deadline = time.monotonic() + limit_s
        while len(dropped) < len(opened) and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.5):
                item = key.data
                try:
                    data = item.sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    dropped[id(item)] = time.monotonic()
                    selector.unregister(item.sock)
    return dropped


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80
