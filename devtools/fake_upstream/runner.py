"""Running the fake upstream: in the foreground (the CLI) or on a background thread (tests)."""

from __future__ import annotations

import asyncio
import ipaddress
import signal
import threading
from collections.abc import Callable

from aiohttp import web

from devtools.fake_upstream.server import create_app, start_site
from devtools.fake_upstream.state import UpstreamState


class NotLoopback(ValueError):
    """The fake upstream only listens on loopback addresses."""


def check_loopback(host: str) -> None:
    """Refuse any host that is not a loopback address."""
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise NotLoopback(f"the fake upstream listens on loopback addresses only, not {host!r}")


def base_url(host: str, port: int) -> str:
    """http://host:port, with brackets for IPv6."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def run_server(host: str, port: int, state: UpstreamState | None = None,
               on_ready: Callable[[str], None] | None = None, any_address: bool = False) -> None:
    """Serve until SIGINT or SIGTERM; `on_ready(url)` is called once the port is bound. Loopback addresses only
    unless ANY_ADDRESS (a container's network, where loopback is the container's own)."""
    if not any_address:
        check_loopback(host)

    async def serve() -> None:
        runner, bound = await start_site(create_app(state), host, port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        if on_ready is not None:
            on_ready(base_url(host, bound))
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    asyncio.run(serve())


class ServerThread:
    """The fake upstream on its own event loop in a daemon thread; `start()` returns its base URL."""

    def __init__(self, state: UpstreamState | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        check_loopback(host)
        self.state = state or UpstreamState()
        self.host, self.port = host, port
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="fake-upstream", daemon=True)

    def start(self, timeout: float = 10.0) -> str:
        """Start serving and wait until the port is bound."""
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("the fake upstream did not start in time")
        if self._error is not None:
            raise RuntimeError(f"the fake upstream failed to start: {self._error}") from self._error
        return self.url

    def _run(self) -> None:
        """Thread body: bind, serve until stopped, then clean up."""
        asyncio.set_event_loop(self._loop)
        try:
            self._runner, self.port = self._loop.run_until_complete(
                start_site(create_app(self.state), self.host, self.port))
            self.url = base_url(self.host, self.port)
        except BaseException as exc:
            self._error = exc
            self._loop.close()
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving (in-flight calls are cut after a short grace period) and join the thread."""
        if self._thread.is_alive():
            try:
                self._loop.call_soon_threadsafe(self._loop.stop)
            except RuntimeError:  # the loop closed meanwhile: nothing left to stop
                pass
            self._thread.join(timeout)
