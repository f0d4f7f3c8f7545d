"""Request files read from the bucket in blocks: a worker's threads run a batch's items in runs of neighbouring
idx, whose bodies lie side by side in the request file, so one ranged GET of a block serves every item in it
(instead of a GET per item). Blocks are kept per process (least recently used dropped), and a block being fetched
is waited for by the other threads that need it rather than fetched again."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from uuid import UUID

BLOCK = 256 << 10  # bytes of a request file one GET reads
BLOCKS_KEPT = 64  # blocks kept per process (16 MiB)
_DIRECT = 4 * BLOCK  # a body longer than this is read alone, not through blocks

# A block's key: (batch id, block number); a fetch: (block start, block length) → its bytes.
BlockKey = tuple[UUID, int]


class RequestBlocks:
    """The blocks of request files this process read lately; safe to use from many threads."""

    def __init__(self, kept: int = BLOCKS_KEPT) -> None:
        self.kept = kept
        self._lock = threading.Lock()
        self._blocks: OrderedDict[BlockKey, Future[bytes]] = OrderedDict()

    def read(self, batch_id: UUID, start: int, end: int, data_end: int, fetch: Callable[[int, int], bytes]) -> bytes:
        """Bytes START:END of a batch's request file whose bodies end at DATA_END, through its blocks (FETCH
        reads a range: offset, length)."""
        if end - start > _DIRECT:
            return fetch(start, end - start)
        parts = [self._block(batch_id, number, data_end, fetch) for number in range(start // BLOCK,
                                                                                      (end - 1) // BLOCK + 1)]
        joined = parts[0] if len(parts) == 1 else b"".join(parts)
        base = (start // BLOCK) * BLOCK
        return joined[start - base:end - base]

    def _block(self, batch_id: UUID, number: int, data_end: int, fetch: Callable[[int, int], bytes]) -> bytes:
        key, mine = (batch_id, number), False
        with self._lock:
            found = self._blocks.get(key)
            if found is not None:
                self._blocks.move_to_end(key)
            else:
                found, mine = self._blocks.setdefault(key, Future()), True
                while len(self._blocks) > self.kept:
                    self._blocks.popitem(last=False)
        if not mine:
            return found.result()  # fetched, or being fetched by another thread
        try:
            start = number * BLOCK
            found.set_result(fetch(start, min(BLOCK, data_end - start)))
        except BaseException as exc:
            with self._lock:
                if self._blocks.get(key) is found:
                    del self._blocks[key]  # not kept: the next reader fetches it again
            found.set_exception(exc)
        return found.result()

    def forget(self, batch_id: UUID) -> None:
        with self._lock:
            for key in [key for key in self._blocks if key[0] == batch_id]:
                del self._blocks[key]
