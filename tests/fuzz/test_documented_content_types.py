"""The OpenAPI document of a real `relay api` lists the content type of every answer the results routes give:
JSON, and JSON Lines for `?format=jsonl` or `Accept: application/x-ndjson` (the document said only JSON)."""

from __future__ import annotations

import pytest
import requests

from devtools.stack import Stack

pytestmark = pytest.mark.integration


def test_every_results_answer_has_a_content_type_the_document_lists(fuzz_stack: Stack, fuzz_key: str) -> None:
    api = fuzz_stack.start_api()
    try:
        spec = requests.get(f"{api.url}/openapi.json", timeout=10).json()
        batch_id = fuzz_stack.submit(fuzz_key, "types", 3)
        routes = {"/v1/batches/{batch_id}/results": fuzz_key,
                  "/admin/batches/{batch_id}/results": fuzz_stack.settings.admin_token}
        for path, credential in routes.items():
            documented = set(spec["paths"][path]["get"]["responses"]["200"]["content"])
            for params, accept in (({}, None), ({"format": "json"}, None), ({"format": "jsonl"}, None),
                                   ({}, "application/x-ndjson")):
                headers = {"Authorization": f"Bearer {credential}", **({"Accept": accept} if accept else {})}
                res = requests.get(api.url + path.format(batch_id=batch_id), params=params, headers=headers,
                                   timeout=10)
                assert res.status_code == 200, res.text
                assert res.headers["Content-Type"].split(";")[0] in documented, (path, params, accept)
            assert documented == {"application/json", "application/x-ndjson"}
    finally:
        api.stop()
