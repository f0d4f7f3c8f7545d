"""The floor, for `python -m bench --peer floor`: what a call costs on Relay's HTTP server and upstream client alone.

It is Relay's own server setup (`app.api.server.run_gunicorn`: gunicorn's gevent workers as `relay api` runs them,
with their deadlines and one-write answers, as many workers as the bench's API) serving a WSGI app that only
forwards each POST's body to the fake upstream on Relay's upstream client (`app.pipeline.upstream.post`). There is
no authentication, routing, policy, rate limit, key pool, usage event or Flask. Whatever the floor adds to a call,
any gateway built on this server and client adds at least; Relay's rows against it show what Relay's own work
costs. It is not a gateway: it answers every POST with the upstream's answer, whatever the caller's key.
With --flask (`--peer floor-flask`), the same forwarding is a bare Flask route (no hooks, no extensions): the rows
between the two are what Flask itself costs on this server.

    python -m bench.floor --upstream http://127.0.0.1:PORT --key sk-... [--flask] [--bind 127.0.0.1:0] [--workers 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from devtools.processes import ROOT, RelayProcess, listening_port
from devtools.waiting import until

WSGI = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
TIMEOUT = (5.0, 60.0)  # (connect, read) seconds to the upstream
# `relay api` patches the process for gevent before anything else is imported; the floor does the same.
LAUNCH = "from gevent import monkey; monkey.patch_all(); import sys; from bench.floor import main; main(sys.argv[1:])"


def forwarder(upstream: str, key: str) -> WSGI:
    """The WSGI app: each POST's path and body to UPSTREAM with KEY; the upstream's status, type and body back."""
    from app.pipeline.upstream import UpstreamIOError, post

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        try:
            answer = post(upstream + environ["PATH_INFO"], body=body, stream=False, timeout=TIMEOUT,
                          headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
            data = answer.content
        except UpstreamIOError as exc:
            start_response("502 Bad Gateway", [("Content-Type", "text/plain")])
            return [str(exc).encode()]
        start_response(f"{answer.status_code} -", [
            ("Content-Type", answer.headers.get("Content-Type", "application/json")),
            ("Content-Length", str(len(data)))])
        return [data]

    return app


def in_flask(forward: WSGI) -> Any:
    """A Flask app whose one route, POST /<path>, answers what FORWARD answers (no hooks, no extensions)."""
    from flask import Flask, Response, request

    app = Flask("relay-bench-floor")

    @app.post("/<path:path>")
    def forwarded(path: str) -> Response:
        answered: list[Any] = []
        body = b"".join(forward(request.environ, lambda status, headers: answered.extend((status, headers))))
        return Response(body, status=int(answered[0].split()[0]), headers=answered[1])

    return app


def start_floor(upstream: str, key: str, log_path: Path, workers: int = 2, timeout: float = 60,
                flask: bool = False) -> RelayProcess:
    """Start the floor (in a Flask route with FLASK) on a loopback port the OS picks (read back from the process's
    listening socket)."""
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, "--upstream", upstream, "--key", key, "--workers",
                             str(workers), *(["--flask"] if flask else [])], cwd=ROOT, stdout=log_path.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    floor = RelayProcess(proc=proc, log_path=log_path)

    def bound() -> int | None:
        if proc.poll() is not None:
            raise RuntimeError(f"the floor exited early:\n{floor.log()[-3000:]}")
        return listening_port(proc.pid)

    try:
        port = until(bound, lambda found: found is not None, what="the floor's listening port", timeout=timeout)
    except AssertionError:
        floor.stop()
        raise
    floor.url = f"http://127.0.0.1:{port}"
    return floor


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="the upstream's base URL (the fake upstream)")
    parser.add_argument("--key", required=True, help="the upstream key every call is sent with")
    parser.add_argument("--bind", default="127.0.0.1:0", help="address to listen on (default: a free port)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--flask", action="store_true", help="forward from a bare Flask route")
    args = parser.parse_args(argv)
    from app.api.server import run_gunicorn

    app = forwarder(args.upstream.rstrip("/"), args.key)
    if args.flask:
        app = in_flask(app)
    run_gunicorn(lambda: app, bind=args.bind, workers=args.workers, connections=1000,  # `relay api`'s defaults
                 header_timeout_s=15, io_timeout_s=30.0)


if __name__ == "__main__":
    main()
