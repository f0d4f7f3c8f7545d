"""Blocking disk work run off the gevent hub when the process is patched (`relay api`), so that the other requests
of a greenlet server keep running meanwhile; a plain call anywhere else."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def off_the_hub(fn: Callable[..., T], *args: Any) -> T:
    """FN(*ARGS) on a native thread of gevent's pool when threading is patched, else right here. FN must not use
    gevent-patched objects shared with greenlets (plain file system calls are fine)."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is None or not monkey.is_module_patched("threading"):
        return fn(*args)
    import gevent

    return gevent.get_hub().threadpool.apply(fn, args)  # type: ignore[no-any-return]
