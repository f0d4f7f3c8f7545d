"""A process freezes what it built at boot, so a full collection later does not scan it."""

from __future__ import annotations

import gc

from app.runtime import freeze_boot_heap


def test_freezing_moves_the_live_objects_out_of_the_collectors_reach() -> None:
    gc.unfreeze()
    kept = [[n] for n in range(1000)]  # objects the collector tracks
    try:
        frozen = freeze_boot_heap()
        assert frozen >= len(kept)  # (another thread may free frozen objects meanwhile: the count then falls)
        assert not any(gc.is_tracked(o) and o is kept[0] for o in gc.get_objects())  # no generation holds them
    finally:
        gc.unfreeze()
