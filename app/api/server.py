"""Run the Flask app under gunicorn (gthread workers: keep-alive, streaming, TCP_NODELAY)."""

from __future__ import annotations

from typing import Any

from gunicorn.app.base import BaseApplication


class _RelayGunicorn(BaseApplication):  # type: ignore[misc]
    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        # Runs in each worker after fork, so the pool and broker connections are per process.
        from app import create_app

        return create_app()


def run_gunicorn(*, bind: str, workers: int, threads: int) -> None:
    options = {
        "bind": bind,
        "workers": workers,
        "threads": threads,
        "worker_class": "gthread",
        "keepalive": 75,
        "timeout": 0,  # LLM calls and streams can be long; gthread heartbeats keep workers alive
        "graceful_timeout": 30,
        "accesslog": None,
        "errorlog": "-",
        "loglevel": "warning",
        "limit_request_line": 8190,
    }
    _RelayGunicorn(options).run()
