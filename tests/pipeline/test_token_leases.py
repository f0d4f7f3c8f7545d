"""A token lease on the real Postgres: a window with room never refuses a call because the answers of calls admitted
earlier spent the process's balance while its next slice was being taken."""

from __future__ import annotations

from typing import Any

import pytest

from app.access.cache import get_catalog
from app.pipeline import ratelimit
from app.pipeline.ratelimit import RateLimiter

pytestmark = pytest.mark.integration


def test_answers_that_spend_a_whole_slice_while_it_is_taken_make_the_lease_ask_again_not_refuse(
        runtime: Any, catalog: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = get_catalog(runtime).snapshot()
    [limit] = next(p for p in snapshot.policies.values() if p.name == "token-roomy").rate_limits
    limiter = RateLimiter(runtime.pool)
    try:
        first = limiter.admit([limit])  # a first slice; no tokens per call known yet, so none reserved
        second = limiter.admit([limit])
        limiter.settle(first, 100)  # its answer used 100 tokens: the balance is spent, the next call waits
        real_take, statements = ratelimit.take, []

        def take_while_an_answer_lands(conn: Any, asks: Any) -> Any:
            results = real_take(conn, asks)
            if not statements:  # the second call's answer, far over its estimate, lands during the statement
                limiter.settle(second, 1_000_000)
            statements.append(results)
            return results

        monkeypatch.setattr(ratelimit, "take", take_while_an_answer_lands)
        third = limiter.admit([limit])  # the window (10^9 tokens an hour) has room: admitted, after a second ask
        assert third is not None and len(statements) >= 2
    finally:
        limiter.close()
