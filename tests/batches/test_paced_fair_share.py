"""Fair share under pacing, on real worker processes: two owners waiting on one paced policy split its batch budget
(equal weights: about half each), so an owner that comes second is not starved by the first one's backlog; its
estimate and its batch object count that half, and say when it misses a completion_window."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.batches.helpers import CHAT, get, submit, wait_finished

pytestmark = pytest.mark.integration
FIRST, SECOND = 30, 8  # items; the `paced` policy starts about 2 batch items a second


def _started(client: Any, key: str, batch_id: str) -> int:
    counts = get(client, key, f"/v1/batches/{batch_id}", limit=0).json["counts"]
    return int(counts["completed"] + counts["discarded"] + counts["running"])


def _estimate(client: Any, key: str, window: str) -> dict[str, Any]:
    res = client.post("/v1/batches/estimate", headers={"Authorization": f"Bearer {key}"},
                      json={"shape": "openai", "requests": [CHAT] * SECOND, "completion_window": window})
    assert res.status_code == 200, res.get_data(as_text=True)
    return res.json["timing"]  # type: ignore[no-any-return]


def test_two_owners_on_one_paced_policy_both_progress_at_about_their_equal_shares(
        client: Any, make_key: Any, fresh_upstream: None) -> None:
    x_key, y_key = str(make_key("paced")["key"]), str(make_key("paced")["key"])
    x = submit(client, x_key, [CHAT] * FIRST).json["id"]
    deadline = time.monotonic() + 30
    while _started(client, x_key, x) < 3:  # X alone has been running for a while
        assert time.monotonic() < deadline, "the first batch never started"
        time.sleep(0.1)
    estimate = _estimate(client, y_key, "5s")  # X's backlog shares the budget: 8 items at half of 2 a second
    assert (estimate["fair_part"], estimate["items_ahead"], estimate["past_deadline"]) == (0.5, 0, True), estimate
    assert _estimate(client, y_key, "1h")["past_deadline"] is False
    y = submit(client, y_key, [CHAT] * SECOND).json["id"]
    x_before = _started(client, x_key, x)
    pacing = get(client, y_key, f"/v1/batches/{y}", limit=0).json["pacing"]
    assert pacing["fair_part"] == 0.5 and pacing["items_ahead"] == 0, pacing
    done = wait_finished(client, y_key, y, timeout=90)
    x_during = _started(client, x_key, x) - x_before
    assert done["counts"]["completed"] == SECOND
    # Y's progress over its fair share (half of what both started meanwhile) is at least 0.5: oldest first, Y
    # would have started nothing until X's whole backlog had (X: about 27 items more).
    assert SECOND / ((SECOND + x_during) / 2) >= 0.5, f"X started {x_during} items while Y ran its {SECOND}"
    assert x_during >= SECOND / 2, f"X started only {x_during} items while Y ran"  # nor is X starved in turn
    wait_finished(client, x_key, x, timeout=90)
