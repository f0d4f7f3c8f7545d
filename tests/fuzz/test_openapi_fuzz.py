"""Schema-driven fuzzing (schemathesis) of every operation in the served OpenAPI document, with valid
credentials, in both generation modes (data that fits the schema, and data that does not): no input gets a
server error, every rejection is a 4xx JSON error with a stable code (in the caller's shape on inference
routes), and every answer is one the document describes (its status, content type and body schema)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from devtools.stack import Stack
from tests.fuzz.conftest import error_code, restore_catalog

pytestmark = pytest.mark.integration

MAX_EXAMPLES = 20
# The answer must be one the document describes: documented status, content type, headers and body.
CONFORMANCE = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
               response_schema_conformance]
GROUPS = ("admin", "inference", "batches", "usage", "other")


def _group(path: str) -> str:
    if path.startswith("/admin"):
        return "admin"
    if path.startswith("/v1/batches"):
        return "batches"
    if path.startswith("/v1/usage"):
        return "usage"
    if path.startswith(("/v1/", "/openai/", "/anthropic/")):
        return "inference"
    return "other"


@pytest.fixture(scope="module")
def api_schema(fuzz_stack: Stack) -> Any:
    return schemathesis.openapi.from_wsgi("/openapi.json", fuzz_stack.app)


def test_the_fuzzed_document_covers_every_route_of_the_app(api_schema: Any, fuzz_stack: Stack) -> None:
    documented = {(op.ok().method.upper(), op.ok().path) for op in api_schema.get_all_operations()}
    routed = set()
    for rule in fuzz_stack.app.url_map.iter_rules():
        if rule.endpoint in ("static",) or rule.rule.startswith(("/docs", "/openapi", "/console")):  # pages, not API
            continue
        path = rule.rule.replace("<uuid:", "{").replace("<string:", "{").replace("<", "{").replace(">", "}")
        routed |= {(m, path) for m in rule.methods or () if m not in ("HEAD", "OPTIONS")}
    assert routed <= documented, sorted(routed - documented)
    assert {_group(path) for _, path in documented} == set(GROUPS)


def _problem(case: Any, response: Any) -> str | None:
    where = f"{case.method} {case.formatted_path}"
    if response.status_code >= 500:
        return f"{where}: {response.status_code} {response.text[:300]}"
    if response.status_code >= 400:
        try:
            body = json.loads(response.text)
        except ValueError:
            return f"{where}: {response.status_code} answered with a body that is not JSON: {response.text[:200]!r}"
        if not (isinstance(code := error_code(case.path, body), str) and code):
            return f"{where}: {response.status_code} without an error code: {body}"
    return None


def _undocumented(case: Any, response: Any) -> list[str]:
    """What in RESPONSE the document does not describe (schemathesis' response conformance checks)."""
    try:
        case.validate_response(response, checks=CONFORMANCE)
    except FailureGroup as group:
        return [f"{case.method} {case.formatted_path}: {response.status_code}: {failure.title}: "
                f"{(failure.message or '')[:300]}" for failure in group.exceptions]
    return []


# Negative cases need something to negate: the probes take no parameters (the inference routes' bodies are
# documented as any JSON object; their shapes are fuzzed in test_bad_input.py and test_hostile_values.py).
RUNS = [(group, GenerationMode.POSITIVE) for group in GROUPS] + [
    (group, GenerationMode.NEGATIVE) for group in ("admin", "inference", "batches", "usage")]


@pytest.mark.parametrize(("group", "mode"), RUNS, ids=[f"{g}-{m}" for g, m in RUNS])
def test_no_generated_request_gets_a_server_error_and_every_rejection_has_a_code(
        group: str, mode: GenerationMode, api_schema: Any, fuzz_stack: Stack, fuzz_key: str) -> None:
    problems: list[str] = []
    tried = 0
    for result in api_schema.get_all_operations():
        operation = result.ok()
        if _group(operation.path) != group:
            continue
        token = fuzz_stack.settings.admin_token if group == "admin" else fuzz_key

        @settings(max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, database=None,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(generation_mode=mode))
        def run(case: Any) -> None:
            nonlocal tried
            tried += 1
            response = case.call(headers={"Authorization": f"Bearer {token}"})
            try:
                problem = _problem(case, response)
                if problem is not None:
                    problems.append(problem)
                problems.extend(_undocumented(case, response))
            finally:
                if case.path == "/admin/catalog" and case.method == "PUT" and response.status_code == 200:
                    restore_catalog(fuzz_stack)

        try:
            run()
        except Unsatisfiable:  # an operation without anything to negate (e.g. no parameters)
            assert mode is GenerationMode.NEGATIVE
    assert tried > 0
    assert not problems, "\n".join(sorted(set(problems))[:30])
