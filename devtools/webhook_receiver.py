"""A webhook receiver for the tests and the bench: a real HTTP server in a process of its own on a loopback port. It
keeps every POST (path, headers, the exact body bytes, when it arrived) and answers as it is told per path prefix
(a status, a delay, a Location), so a test can check signatures with the official SDKs and make the receiver fail,
hang, redirect, or go away and come back on the same port.

    python -m devtools.webhook_receiver --port 8123
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

from devtools.processes import ROOT, listening_port

_lock = threading.Lock()
_received: list[dict[str, Any]] = []
_behaviours: dict[str, dict[str, Any]] = {}  # path prefix -> {status, delay_s, location, times}


class _Handler(BaseHTTPRequestHandler):
    disable_nagle_algorithm = True  # each answer leaves at once (no delayed-ACK stall)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def do_GET(self) -> None:
        if self.path.startswith("/_control/requests"):
            with _lock:
                self._answer(200, json.dumps(_received).encode())
        else:
            self._answer(404, b"{}")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/_control/behave":
            rule = json.loads(body)
            with _lock:
                _behaviours[rule.pop("path")] = rule
            self._answer(200, b"{}")
            return
        if self.path == "/_control/reset":
            with _lock:
                _received.clear()
                _behaviours.clear()
            self._answer(200, b"{}")
            return
        with _lock:
            _received.append({"path": self.path, "headers": dict(self.headers.items()), "received_at": time.time(),
                              "body": base64.b64encode(body).decode()})
            rule = self._rule()
        time.sleep(float(rule.get("delay_s", 0)))
        self._answer(int(rule.get("status", 200)), b'{"ok":true}', rule.get("location"))

    def _rule(self) -> dict[str, Any]:
        """The behaviour of the longest matching prefix, used up after `times` answers when it says so."""
        prefix = max((p for p in _behaviours if self.path.startswith(p)), key=len, default=None)
        if prefix is None:
            return {}
        rule = _behaviours[prefix]
        if "times" in rule:
            rule["times"] -= 1
            if rule["times"] <= 0:
                del _behaviours[prefix]
        return rule

    def _answer(self, status: int, body: bytes, location: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if location:
            self.send_header("Location", location)
        self.end_headers()
        self.wfile.write(body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    ThreadingHTTPServer.allow_reuse_address = True
    server = ThreadingHTTPServer(("127.0.0.1", args.port), _Handler)
    server.daemon_threads = True
    server.serve_forever()
    return 0


@dataclass
class Received:
    """One POST the receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes
    received_at: float

    def header(self, name: str) -> str:
        return next(v for k, v in self.headers.items() if k.lower() == name.lower())


@dataclass
class Receiver:
    """The receiver process, on PORT: 0 until the first start, whose port the OS picks (read back); kept across a
    stop and a start."""

    port: int = 0
    log_path: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Receiver:
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen([sys.executable, "-m", "devtools.webhook_receiver", "--port", str(self.port)],
                                     cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the webhook receiver exited with {self.proc.returncode}")
            self.port = self.port or listening_port(self.proc.pid) or 0
            try:
                if self.port:
                    requests.get(self.url + "/_control/requests", timeout=1)
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError("the webhook receiver did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def behave(self, path: str, **rule: Any) -> None:
        """Answer POSTs under PATH with RULE: status, delay_s, location, times (then back to 200)."""
        requests.post(self.url + "/_control/behave", json={"path": path, **rule}, timeout=5).raise_for_status()

    def reset(self) -> None:
        requests.post(self.url + "/_control/reset", timeout=5).raise_for_status()

    def received(self, path: str = "/") -> list[Received]:
        """What arrived under PATH, oldest first."""
        rows = requests.get(self.url + "/_control/requests", timeout=10).json()
        return [Received(r["path"], r["headers"], base64.b64decode(r["body"]), r["received_at"])
                for r in rows if r["path"].startswith(path)]

    def wait(self, path: str, count: int = 1, timeout: float = 30) -> list[Received]:
        """At least COUNT POSTs under PATH, within TIMEOUT seconds."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.received(path)
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(found)} webhook(s) under {path} after {timeout}s, wanted {count}")
            time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
