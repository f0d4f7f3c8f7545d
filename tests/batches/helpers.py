"""Helpers for batch tests: the catalog, submitting and waiting (worker processes: devtools/processes.py)."""

from __future__ import annotations

from typing import Any

from app.runtime import Runtime
from devtools.waiting import until

PRICED = {"input_per_mtok": 0.15, "output_per_mtok": 0.60}
CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say hello to the batch"}]}
# Host keys by purpose: each scenario's policy draws from its own key, so upstream behaviours never collide.
KEYS = ("ok", "slow", "fail", "hang", "fair", "rps", "brk")
PACED_LIMIT, PACED_WINDOW_S = 8, 2  # the `paced` policy: 8 requests per 2 s, half of them for batch items


def batch_catalog(upstream_url: str) -> dict[str, Any]:
    """An `openai` host (every key), an `anthropic` host, and one policy per scenario."""
    keys = [{"name": f"oa-{k}", "value": f"sk-batch-{k}"} for k in KEYS]
    return {
        "hosts": [
            {"name": "openai", "base_url": upstream_url, "keys": keys},
            {"name": "anthropic", "base_url": upstream_url, "keys": [{"name": "an-ok", "value": "sk-batch-an"}]},
        ],
        "models": [
            {"name": "gpt-4o-mini", "bindings": [{"host": "openai", "adapter": "openai",
                                                  "upstream_model": "gpt-4o-mini-2024", "pricing": PRICED}]},
            {"name": "gpt-5-responses", "bindings": [{"host": "openai", "adapter": "openai_responses",
                                                      "upstream_model": "gpt-5", "pricing": PRICED}]},
            {"name": "claude-sonnet", "bindings": [{"host": "anthropic", "adapter": "anthropic",
                                                    "upstream_model": "claude-sonnet-4-5", "pricing": PRICED}]},
            {"name": "retired", "bindings": [{"host": "openai", "adapter": "openai", "upstream_model": "old",
                                              "enabled": False}]},
        ],
        "policies": [
            _policy("main", ["oa-ok", "an-ok"]),
            _policy("slow", ["oa-slow"]),
            _policy("failing", ["oa-fail"]),
            _policy("hanging", ["oa-hang"]),
            _policy("limited", ["oa-ok"], rate_limits=[{"requests": 1, "per": "1h"}]),
            # the same limit for the contract tests' 429: a window of its own, so the test above's stays unspent
            _policy("limited-contract", ["oa-ok"], rate_limits=[{"requests": 1, "per": "1h"}]),
            _policy("narrow", ["oa-ok"], models=["gpt-*"]),
            _policy("to-disable", ["oa-ok"]),
            _policy("to-delete", ["oa-ok"]),
            _policy("fair", ["oa-fair"]),
            _policy("fair-heavy", ["oa-fair"], batch_weight=3),
            _policy("paced", ["oa-ok"], rate_limits=[{"requests": PACED_LIMIT, "per": f"{PACED_WINDOW_S}s"}],
                    batch={"pace": True, "share": 0.5}),
            _policy("rps", ["oa-rps"]),
            {**_policy("paced-breaker", ["oa-brk"], rate_limits=[{"requests": 40, "per": "2s"}],
                       batch={"pace": True, "share": 0.5}), "circuit_breaker": {"failures": 2, "cooldown": "3s"}},
            _policy("shared", ["oa-ok"], rate_limits=[{"requests": 10, "per": "1h"}], batch={"share": 0.5}),
        ],
        "teams": [{"name": "t-batch"}],
        "projects": [{"name": "p-batch", "team": "t-batch"}],
        "users": [{"name": "batch-user", "policy": "main", "project": "p-batch", "team": "t-batch"},
                  {"name": "other-user", "policy": "main", "project": "p-batch", "team": "t-batch"}],
        "service_accounts": [{"name": "batch-svc", "policy": "main", "project": "p-batch", "team": "t-batch"}],
    }


def _policy(name: str, pool: list[str], *, models: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "models": models or ["*"], "key_pool": pool,
            "circuit_breaker": {"failures": 1000, "cooldown": "1s"}, **extra}


def submit(client: Any, key: str, requests: list[Any], shape: str = "openai", **extra: Any) -> Any:
    return client.post("/v1/batches", json={"shape": shape, "requests": requests, **extra},
                       headers={"Authorization": f"Bearer {key}"})


def get(client: Any, key: str, path: str, **params: Any) -> Any:
    return client.get(path, query_string=params, headers={"Authorization": f"Bearer {key}"})


def wait_finished(client: Any, key: str, batch_id: str, timeout: float = 60) -> dict[str, Any]:
    """Poll the batch until it says finished; fail with its last state after TIMEOUT (a bound only a hang crosses)."""

    def read() -> dict[str, Any]:
        res = get(client, key, f"/v1/batches/{batch_id}", limit=1000)
        assert res.status_code == 200, res.get_data(as_text=True)
        return res.json  # type: ignore[no-any-return]

    body = until(read, lambda b: b["finished"], what=f"batch {batch_id} finished", timeout=timeout)
    return body


def results(client: Any, key: str, batch_id: str) -> list[dict[str, Any]]:
    res = get(client, key, f"/v1/batches/{batch_id}/results")
    assert res.status_code == 200, res.get_data(as_text=True)
    return res.json["results"]  # type: ignore[no-any-return]


def usage_events(runtime: Runtime, batch_id: str) -> list[dict[str, Any]]:
    with runtime.pool.connection() as conn:
        rows = conn.execute("SELECT * FROM usage_events_full WHERE batch_id = %s ORDER BY batch_idx",
                            (batch_id,)).fetchall()
    return [dict(r) for r in rows]  # type: ignore[call-overload]


def run_in_process(runtime: Runtime, batch_id: str, count: int, payloads: Any = None) -> list[str]:
    """Run items 0..COUNT-1 here, as a worker process would (responses go to this process's segment); the state
    each ended in."""
    from uuid import UUID, uuid4

    from app.batches.runner import WorkerContext, run_item

    ctx = WorkerContext.create(runtime, f"in-process-{uuid4()}", payloads=payloads)
    try:
        return [run_item(ctx, UUID(batch_id), idx) for idx in range(count)]
    finally:
        ctx.writer.close()
