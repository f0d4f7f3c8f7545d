"""The OpenAPI document covers the usage and metrics routes with their error answers; the docs page is served."""

from __future__ import annotations

import re

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


def test_the_interactive_docs_page_loads_every_asset_from_relay_itself(client) -> None:
    res = client.get("/docs")
    assert res.status_code == 200 and b"swagger" in res.data.lower()
    page = res.get_data(as_text=True)
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert len(assets) == 3 and all(a.startswith("/docs/assets/") for a in assets), assets  # nothing off-host
    for asset in assets:
        got = client.get(asset)
        assert got.status_code == 200 and len(got.get_data()) > 10_000, asset
        assert got.mimetype == ("text/css" if asset.endswith(".css") else "text/javascript"), got.mimetype
    assert client.get("/docs/assets/index.html").status_code == 404
    assert client.get("/docs/assets/..%2F..%2Fswagger_ui_bundle%2F__init__.py").status_code == 404


def _operations(spec: dict) -> list[tuple[str, str, dict]]:  # type: ignore[type-arg]
    return [(method.upper(), path, op) for path, ops in spec["paths"].items() for method, op in ops.items()
            if method in ("get", "put", "post", "delete", "patch")]


def test_the_document_says_what_the_server_answers(client) -> None:
    spec = client.get("/openapi.json").json
    assert spec["components"]["schemas"]["BatchSubmit"]["additionalProperties"] is False
    error = {"$ref": "#/components/schemas/RelayError"}
    assert spec["components"]["responses"]["DEFAULT_ERROR"]["content"]["application/json"]["schema"] == error
    for method, path, op in _operations(spec):
        statuses = set(op["responses"])
        assert "422" not in statuses, (method, path)  # argument errors are answered 400
        if op.get("parameters") or "requestBody" in op:
            assert "400" in statuses, (method, path)
        if op.get("security"):
            assert "401" in statuses, (method, path)
        if "{" in path:
            assert "404" in statuses, (method, path)
        if "requestBody" in op:
            assert "413" in statuses, (method, path)
    batches = spec["paths"]["/v1/batches"]["post"]["responses"]
    assert {"202", "400", "401", "413", "415", "507"} <= set(batches)
    assert "409" in spec["paths"]["/v1/batches/{batch_id}/cancel"]["post"]["responses"]
    chat = spec["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert {"200", "400", "401", "403", "404", "413", "415", "429", "502", "503"} <= set(chat)
    assert chat["415"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ShapedError"}



def test_live_routes_keep_every_documented_answer_without_a_wrapper_per_answer(app, client) -> None:
    spec = client.get("/openapi.json").json
    for path in ("/v1/chat/completions", "/openai/v1/messages", "/anthropic/v1/embeddings", "/v1/generate"):
        answers = set(spec["paths"][path]["post"]["responses"])
        assert {"200", "default", "400", "401", "403", "404", "413", "415", "429", "502", "503"} <= answers, path
    assert {"200", "401"} <= set(spec["paths"]["/v1/models"]["get"]["responses"])
    live = [name for name in app.view_functions if name.startswith("inference.")]
    assert len(live) == 18  # five shapes and the models list under three prefixes
    # the view itself, not flask-smorest's documentation wrappers (each a call through ensure_sync per request)
    assert [name for name in live if hasattr(app.view_functions[name], "__wrapped__")] == []
