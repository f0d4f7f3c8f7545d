"""Blocking disk work run off the gevent hub when the process is patched (`relay api`), so that the other requests
of a greenlet server keep running meanwhile; a plain call anywhere else. And the OS's own `select.poll` for checks
that never block."""

from __future__ import annotations

import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")
_plain_pool: ThreadPoolExecutor | None = None


@cache
def os_poll() -> Callable[[], Any] | None:
    """`select.poll` as the OS gives it, also in a process gevent patched (None where the OS has none). For a
    poll(0), which never blocks: gevent's poll(0) starts a watcher per descriptor and switches to its hub for a
    loop iteration before it answers."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None:
        return monkey.get_original("select", "poll")  # type: ignore[no-any-return]
    import select

    return getattr(select, "poll", None)


def off_the_hub(fn: Callable[..., T], *args: Any) -> T:
    """FN(*ARGS) on a native thread of gevent's pool when threading is patched, else right here. FN must not use
    gevent-patched objects shared with greenlets (plain file system calls are fine)."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is None or not monkey.is_module_patched("threading"):
        return fn(*args)
    import gevent

    return gevent.get_hub().threadpool.apply(fn, args)  # type: ignore[no-any-return]


def start_off_the_hub(fn: Callable[..., T], *args: Any) -> Callable[[], T]:
    """Start FN(*ARGS) on a native thread (gevent's pool when threading is patched, else a small pool of plain
    threads) and go on; the function returned waits for its result (raising what it raised)."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched("threading"):
        import gevent

        return gevent.get_hub().threadpool.spawn(fn, *args).get  # type: ignore[no-any-return]
    global _plain_pool
    if _plain_pool is None:
        _plain_pool = ThreadPoolExecutor(4, thread_name_prefix="relay-disk")
    return _plain_pool.submit(fn, *args).result
