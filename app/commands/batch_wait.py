"""`--wait` of `relay batches submit` and `rerun`: follow a batch until every item is final. On a terminal the
progress line is redrawn in place, never wider than the terminal (a wider one wraps, and every redraw would be a
new line); anywhere else (a pipe, a log) nothing is drawn until the end, then one line. Ctrl-C stops the following,
not the batch, and says how to cancel it."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from typing import IO, Any

from app.commands.api_client import with_retries
from app.commands.batch_views import final_count, fitted_progress_line, progress_line

WAIT_GIVES_UP_AFTER_S = 900.0  # `submit --wait` keeps asking an API that does not answer for this long


def terminal_columns() -> int:
    return shutil.get_terminal_size().columns


def wait_for(fetch: Callable[[], dict[str, Any]], batch_id: str, out: IO[str], interval: float = 0.5,
             columns: Callable[[], int] = terminal_columns) -> dict[str, Any]:
    """Ask FETCH for the batch until it is finished, showing its progress (with rate and ETA) on OUT; an API that
    does not answer (a restart, say) is asked again with growing pauses, saying so, for up to
    WAIT_GIVES_UP_AFTER_S."""
    started, drawn, terminal = time.monotonic(), 0, out.isatty()
    doing = f"batch {batch_id} keeps running meanwhile"
    while True:
        batch = with_retries(fetch, doing=doing, give_up_after_s=WAIT_GIVES_UP_AFTER_S, out=out)
        elapsed = time.monotonic() - started
        rate = final_count(batch) / elapsed if elapsed > 0 else None
        if terminal:
            line = fitted_progress_line(batch, rate, columns() - 1)  # the last column would wrap on some terminals
            out.write("\r" + line.ljust(drawn))  # a shorter line than the last must not leave its characters behind
            out.flush()
            drawn = len(line)
        if batch["finished"]:
            out.write("\n" if terminal else progress_line(batch, rate=rate) + "\n")
            return batch
        time.sleep(interval)


def interrupted(batch_id: str) -> str:
    """What Ctrl-C during `--wait` tells: the batch goes on, and how to follow or cancel it."""
    return (f"stopped waiting; batch {batch_id} keeps running. Follow it: relay batches status {batch_id}"
            f"  Cancel it: relay batches cancel {batch_id}")
