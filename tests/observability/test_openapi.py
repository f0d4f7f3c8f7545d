"""The OpenAPI document covers the usage and metrics routes with their error answers; the docs page is served."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream


def test_usage_routes_are_documented_with_their_errors(client) -> None:
    spec = client.get("/openapi.json").json
    for path in ("/v1/usage/events", "/v1/usage/summary", "/v1/usage/events/export"):
        op = spec["paths"][path]["get"]
        assert {"200", "400", "401"} <= set(op["responses"]) and "422" not in op["responses"], path
        assert op["security"] == [{"adminToken": []}, {"relayCredential": []}]
        names = {p["name"] for p in op["parameters"]}
        assert {"source", "from", "to", "model", "host", "policy", "project", "team", "principal", "credential",
                "batch_id", "status", "error_code"} <= names, path
    assert {"limit", "cursor"} <= {p["name"] for p in spec["paths"]["/v1/usage/events"]["get"]["parameters"]}
    summary_params = {p["name"] for p in spec["paths"]["/v1/usage/summary"]["get"]["parameters"]}
    assert {"group_by", "bucket"} <= summary_params
    export = spec["paths"]["/v1/usage/events/export"]["get"]["responses"]["200"]["content"]
    assert set(export) == {"text/csv", "application/x-ndjson"}
    assert "/metrics" in spec["paths"]
    assert "relayCredential" in spec["components"]["securitySchemes"]


def test_the_interactive_docs_page_is_served(client) -> None:
    res = client.get("/docs")
    assert res.status_code == 200 and b"swagger" in res.data.lower()
