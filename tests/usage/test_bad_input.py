"""Invalid query arguments answer 400 invalid_request naming the argument, never 500."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration

BAD = [
    ("/v1/usage/events", {"from": "yesterday"}, "from"),
    ("/v1/usage/events", {"from": "2020-03-01T00:00:00"}, "from"),  # no timezone
    ("/v1/usage/events", {"to": "2020-13-01T00:00:00Z"}, "to"),
    ("/v1/usage/events", {"from": "2020-03-02T00:00:00Z", "to": "2020-03-01T00:00:00Z"}, "to"),
    ("/v1/usage/events", {"credential": "not-a-uuid"}, "credential"),
    ("/v1/usage/events", {"batch_id": "123"}, "batch_id"),
    ("/v1/usage/events", {"source": "proxy"}, "source"),
    ("/v1/usage/events", {"status": "6xx"}, "status"),
    ("/v1/usage/events", {"limit": "0"}, "limit"),
    ("/v1/usage/events", {"limit": "1001"}, "limit"),
    ("/v1/usage/events", {"limit": "ten"}, "limit"),
    ("/v1/usage/events", {"cursor": "bm90IGEgY3Vyc29y"}, "cursor"),
    ("/v1/usage/events", {"cursor": "%%%"}, "cursor"),
    ("/v1/usage/events", {"modle": "m-gpt"}, "modle"),
    ("/v1/usage/summary", {"group_by": "model,colour"}, "group_by"),
    ("/v1/usage/summary", {"bucket": "week"}, "bucket"),
    ("/v1/usage/summary", {"from": "2020-02-30T00:00:00Z"}, "from"),
    ("/v1/usage/events/export", {"format": "xml"}, "format"),
    ("/v1/usage/events/export", {"to": "soon"}, "to"),
]


@pytest.mark.parametrize(("route", "params", "field"), BAD)
def test_bad_arguments_are_400_invalid_request_naming_the_field(client, settings, route, params, field) -> None:
    res = client.get(route, headers={"Authorization": f"Bearer {settings.admin_token}"}, query_string=params)
    assert res.status_code == 400, res.get_data(as_text=True)
    error = res.json["error"]
    assert error["code"] == "invalid_request"
    assert field in str(error["details"]), error
