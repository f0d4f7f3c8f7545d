"""`python -m bench --soak BATCHESxITEMS`: the soak's size is read from the flag, and a size it cannot run (fewer
than two batches: the first half is purged before the second) is refused before anything starts."""

from __future__ import annotations

import argparse

import pytest

from bench.__main__ import soak_size


def test_the_soak_flag_reads_batches_times_items() -> None:
    assert soak_size("10x100000") == (10, 100_000)
    assert soak_size("2X20000") == (2, 20_000)


@pytest.mark.parametrize("text", ["1x1000", "2x0", "20000", "2x", "axb", "2x3x4"])
def test_a_soak_size_it_cannot_run_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        soak_size(text)
