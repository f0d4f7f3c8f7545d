"""A NUL character in any query argument (Postgres keeps no NUL in text) is a 400 on every route, in the route's
own error shape, before anything reads the argument: never a 500."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.integration

QUERIES = ["/admin/batches?search=a%00b", "/admin/usage/events?model=%00", "/v1/batches?after=%00",
           "/v1/batches/00000000-0000-4000-8000-000000000000/items?state=%00", "/openai/v1/batches?after=batch_%00",
           "/v1/files?purpose=a%00b", "/v1/messages/batches?after_id=%00", "/v1/models?x=%00"]


@pytest.mark.parametrize("path", QUERIES)
def test_a_nul_in_a_query_argument_is_a_400_with_a_code(client: Any, settings: Any, path: str) -> None:
    res = client.get(path, headers={"Authorization": f"Bearer {settings.admin_token}"})
    assert res.status_code == 400, (res.status_code, res.get_data(as_text=True)[:300])
    error = res.json["error"]
    assert error.get("code", error.get("type")) and "NUL" in error["message"], res.json

