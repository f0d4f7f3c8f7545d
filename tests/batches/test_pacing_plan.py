"""The even start of a paced policy's items: the dispatcher's StartBudget lets them start at the share's steady rate
with at most CATCH_UP_S of it at once, so a batch submitted mid-window does not start the window's elapsed share in
one burst; the expected finish counts the same way."""

from __future__ import annotations

from uuid import uuid4

import pytest

from app.batches.pacing import CATCH_UP_S, StartBudget, seconds_under, steady_rate
from app.catalog.model import Policy, RateLimit

PER_MINUTE = RateLimit(id=uuid4(), requests=6_000, tokens=None, window_s=60)
DAILY = RateLimit(id=uuid4(), requests=1_000_000, tokens=None, window_s=86_400)


def _policy(*limits: RateLimit, share: float = 0.8) -> Policy:
    return Policy(id=uuid4(), name="paced", enabled=True, deleted=False, models=("*",), rate_limits=limits,
                  key_pool=(), key_selection="prioritized", breaker_failures=3, breaker_cooldown_s=30.0,
                  payload_logging=False, batch_pace=True, batch_share=share)


def test_the_steady_rate_is_the_slowest_linear_window_at_the_share_and_ignores_longer_windows() -> None:
    assert steady_rate(_policy(PER_MINUTE, DAILY), lambda _: 0.0) == pytest.approx(4_800 / 60)
    assert steady_rate(_policy(DAILY), lambda _: 0.0) is None  # a day's share is there at its start


def test_the_start_budget_fills_at_the_rate_and_holds_at_most_catch_up_s_of_it() -> None:
    budget, policy_id, rate = StartBudget(), uuid4(), 80.0
    assert budget.allowance(policy_id, rate, 100.0) == rate * CATCH_UP_S  # a fresh policy: one catch-up's worth
    budget.spend(policy_id, 160)
    assert budget.allowance(policy_id, rate, 100.5) == 40  # half a second later: half a second's worth
    budget.spend(policy_id, 40)
    assert budget.allowance(policy_id, rate, 160.0) == rate * CATCH_UP_S  # a long pause does not add up


def test_a_batch_submitted_mid_window_is_expected_to_run_at_the_steady_rate_not_to_burst_first() -> None:
    start = 60.0 * 1_000_000
    took = seconds_under(PER_MINUTE, 20_000, 0.8, used=0, now=start + 30)
    rate = 4_800 / 60
    assert took == pytest.approx((20_000 - rate * CATCH_UP_S) / rate)  # 248 s, not the 219 s of a first burst
    assert seconds_under(PER_MINUTE, 100, 0.8, used=0, now=start + 30) == 0.0  # within one catch-up: at once
