"""A paced batch across a breaker's cool-down, on real worker processes: the items that find every key of the
policy cooling down wait for one to come back, as they wait for rate budget, instead of ending `no_key_available`;
every item is sent to the upstream once at most, and only those the upstream itself failed are discarded."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.batches.conftest import module_workers
from tests.batches.helpers import submit, usage_events, wait_finished

pytestmark = pytest.mark.integration
ITEMS = 24
KEY = "sk-batch-brk"  # the `paced-breaker` policy's one key: 2 failures open its breaker for 3 s


# The folder's workers with an item time limit of 30 s instead of 4: an item in flight when the breaker opens waits its
# 3 s cool-down inside its run, and the folder's 4 s left its call 1 s, which a loaded machine crossed (the item then
# ended `time_limit_exceeded`, once in a full run).
workers = module_workers(batch_item_time_limit_s=30)


def test_a_paced_batch_across_a_breakers_cooldown_completes_every_item_it_did_not_send_into_a_failure(
        client: Any, make_key: Any, upstream: Any, runtime: Any, fresh_upstream: None) -> None:
    key = str(make_key("paced-breaker")["key"])
    upstream.control(KEY, mode="fail", fail_status=500, times=2)  # the first two calls fail: the breaker opens
    requests = [{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"brk-item-{i}"}]}
                for i in range(ITEMS)]
    batch_id = submit(client, key, requests).json["id"]
    batch = wait_finished(client, key, batch_id, timeout=120)
    codes = Counter(e["error_code"] for e in usage_events(runtime, batch_id) if e["error_code"])
    assert "no_key_available" not in codes, codes
    assert sum(codes.values()) == 2 and batch["counts"]["completed"] == ITEMS - 2, (batch["counts"], codes)
    sent = Counter(r["body"]["messages"][0]["content"] for r in upstream.requests(key=KEY, limit=1000)
                   if isinstance(r.get("body"), dict))
    assert max(sent.values()) == 1 and len(sent) == ITEMS, sent  # each item reached the upstream exactly once
