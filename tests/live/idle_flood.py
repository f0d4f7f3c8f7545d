"""A client holding idle connections, for tests/live/test_idle_flood.py: `python -m tests.live.idle_flood HOST PORT
COUNT --sources A,B,...` holds COUNT connections to HOST:PORT, spread over the source addresses, half of them after
one answered request (kept alive), half without ever sending one; it reopens every one the server closes, and
prints how many it opened and how many the server closed, once a second, until it is killed."""

from __future__ import annotations

import argparse
import selectors
import socket
import time

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n"


def open_connection(host: str, port: int, source: str, ask: bool) -> socket.socket | None:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(5)
    try:
        sock.connect((host, port))
        if ask:
            sock.sendall(REQUEST)
    except OSError:
        sock.close()
        return None
    sock.setblocking(False)
    return sock


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("count", type=int)
    parser.add_argument("--sources", default="127.0.0.1")
    args = parser.parse_args()
    sources = args.sources.split(",")
    selector = selectors.DefaultSelector()
    opened = closed = 0
    missing = list(range(args.count))
    reported = time.monotonic()
    while True:
        while missing:
            n = missing.pop()
            sock = open_connection(args.host, args.port, sources[n % len(sources)], ask=n % 2 == 1)
            if sock is None:
                missing.append(n)
                time.sleep(0.01)
                break
            selector.register(sock, selectors.EVENT_READ, n)
            opened += 1
        for key, _ in selector.select(timeout=0.1):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if not data:  # closed by the server: open another
                selector.unregister(sock)
                sock.close()
                closed += 1
                missing.append(key.data)
        if time.monotonic() - reported >= 1:
            print(f"opened {opened} closed {closed} open {opened - closed}", flush=True)
            reported = time.monotonic()


if __name__ == "__main__":
    main()
