"""The even start of a paced policy's items: the dispatcher's StartBudget lets them start at the share's steady rate
in steps of PACE_STEP_S, carrying at most CATCH_UP_S of it and spending that at CATCH_UP_PACE times the rate, so a
batch submitted mid-window does not start the window's elapsed share in one burst, nor a second's share in one pass;
the expected finish counts the same way."""

from __future__ import annotations

import math
from uuid import uuid4

import pytest

from app.batches.pacing import CATCH_UP_PACE, CATCH_UP_S, PACE_STEP_S, StartBudget, seconds_under, steady_rate
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
    step = math.ceil(rate * PACE_STEP_S * CATCH_UP_PACE)
    assert budget.allowance(policy_id, rate, 100.0) == step  # a fresh policy: one step, not its whole carry
    budget.spend(policy_id, 0)
    assert budget.allowance(policy_id, rate, 160.0) == step  # nor after a long pause


def test_passes_every_step_start_the_rate_plus_the_carry_never_more_than_a_step_at_once() -> None:
    budget, policy_id, rate = StartBudget(), uuid4(), 80.0
    started = []
    for n in range(101):  # ten seconds of passes, each publishing all it may
        took = budget.allowance(policy_id, rate, 100.0 + n * PACE_STEP_S)
        budget.spend(policy_id, took)
        started.append(took)
    assert max(started) == math.ceil(rate * PACE_STEP_S * CATCH_UP_PACE)
    assert sum(started) == pytest.approx(rate * 10 + rate * CATCH_UP_S, abs=2)  # ten seconds' share and the carry
    assert sum(started[-10:]) == pytest.approx(rate, abs=1)  # the carry spent: the steady rate, a step a pass
    assert max(started[-10:]) <= rate * PACE_STEP_S + 1


def test_passes_however_frequent_never_start_more_than_a_step_at_once_nor_more_than_the_catch_up_pace() -> None:
    budget, policy_id, rate = StartBudget(), uuid4(), 80.0
    started = []
    for n in range(101):  # a pass every 10 ms for a second (woken by submits and finishing items)
        took = budget.allowance(policy_id, rate, 100.0 + n * 0.01)
        budget.spend(policy_id, took)
        started.append(took)
    step = rate * PACE_STEP_S * CATCH_UP_PACE
    assert max(started) <= step
    assert sum(started) <= step + rate * CATCH_UP_PACE * 1.0 + 1
    assert sum(started[-10:]) <= rate * CATCH_UP_PACE * PACE_STEP_S + 1  # the last 0.1 s: at the catch-up pace


def test_a_batch_submitted_mid_window_is_expected_to_run_at_the_steady_rate_not_to_burst_first() -> None:
    start = 60.0 * 1_000_000
    took = seconds_under(PER_MINUTE, 20_000, 0.8, used=0, now=start + 30)
    rate = 4_800 / 60
    assert took == pytest.approx((20_000 - rate * CATCH_UP_S) / rate)  # 248 s, not the 219 s of a first burst
    at_catch_up_pace = seconds_under(PER_MINUTE, 100, 0.8, used=0, now=start + 30)
    assert at_catch_up_pace == pytest.approx(100 / (rate * CATCH_UP_PACE))  # within the carry: at twice the rate
