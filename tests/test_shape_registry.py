"""A shape is one module: its adapter, registered in adapters/registry.py, is all the validation, the estimate and
the database need of it; an incomplete adapter is refused at registration; docs/architecture.md lists the files a
new shape touches, and they exist."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from uuid import uuid4

import msgspec
import psycopg
import pytest

from adapters import get_adapter
from adapters.base import FieldError, StreamUsageReader, Usage
from adapters.errors import UnknownShape
from adapters.fields import MAX_CHOICES, MAX_TOKEN_LIMIT
from adapters.registry import (
    ADAPTERS,
    SHAPES,
    ShapeRegistrationError,
    batch_shapes,
    openai_batch_endpoints,
    register,
)
from app.batches.errors import InvalidBatch
from app.batches.estimate import output_bound
from app.batches.intake import parse_batch
from app.batches.validation import item_errors, validate_envelope
from app.catalog.model import Binding, Host
from app.migrate import accepted_values, check_shapes
from app.pipeline.plan import CrossShape, make_plan
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


class _CompletionsItem(msgspec.Struct):
    model: str
    prompt: str


class _CompletionsAdapter:
    """A made-up shape (a legacy completions API) that exists only in these tests."""

    shape = "test_completions"
    title = "Test Completions"
    provider = "test"
    upstream_path = "/v1/test/completions"
    batch_item_type = _CompletionsItem
    output_limit_fields: tuple[str, ...] = ("max_new_tokens",)
    choices_field: str | None = "samples"
    canonical_markers: tuple[str, ...] = ("max_tokens",)
    bare_input = False

    def validate_request(self, body: Any) -> list[FieldError]:
        prompt = body.get("prompt", body.get("input"))  # `input` too: a canonical body can be valid here
        return [] if isinstance(prompt, str) else [FieldError("prompt", "must be a string")]

    def auth_headers(self, secret: str) -> dict[str, str]:
        return {"authorization": f"Bearer {secret}"}

    def extract_usage(self, body: Any) -> Usage:
        return Usage()

    def stream_usage_reader(self) -> StreamUsageReader:
        raise NotImplementedError

    def error_body(self, status: int, code: str, message: str) -> dict[str, Any]:
        return {"error": {"code": code, "message": message}}

    def prepare_body(self, body: dict[str, Any], upstream_model: str) -> dict[str, Any]:
        return {**body, "model": upstream_model}

    def is_stream(self, body: Any) -> bool:
        return False


@pytest.fixture()
def test_shape() -> Iterator[str]:
    adapter = register(_CompletionsAdapter())
    try:
        yield adapter.shape
    finally:
        ADAPTERS.pop(adapter.shape)


def test_a_registered_shape_is_accepted_by_the_envelope_and_its_items_are_checked_by_its_adapter(
        test_shape: str) -> None:
    assert validate_envelope({"shape": test_shape}, has_requests=True) == []
    assert item_errors(test_shape, 0, {"model": "m", "prompt": "hi"}) == []
    assert [e.field for e in item_errors(test_shape, 1, {"model": "m", "prompt": 3})] == ["prompt"]
    parsed = parse_batch(b'{"shape": "test_completions", "requests": [{"model": "m", "prompt": "hi"}]}',
                         max_items=10)
    assert (parsed.shape, parsed.count) == (test_shape, 1)


def test_a_registered_shapes_limit_and_choices_fields_are_capped_and_its_canonical_markers_refused(
        test_shape: str) -> None:
    too_long = item_errors(test_shape, 0, {"model": "m", "prompt": "hi", "max_new_tokens": MAX_TOKEN_LIMIT + 1})
    assert [(e.field, e.message) for e in too_long] == [("max_new_tokens", f"must be at most {MAX_TOKEN_LIMIT}")]
    too_many = item_errors(test_shape, 0, {"model": "m", "prompt": "hi", "samples": MAX_CHOICES + 1})
    assert [(e.field, e.message) for e in too_many] == [("samples", f"must be at most {MAX_CHOICES}")]
    canonical = {"model": "m", "input": "hi", "max_tokens": 5}
    assert "canonical /v1/generate" in item_errors(test_shape, 0, canonical)[0].message


def test_the_estimates_output_bound_of_a_registered_shape_is_its_limit_field_times_its_choices(
        test_shape: str) -> None:
    assert output_bound(test_shape, b'{"model": "m", "max_new_tokens": 100, "samples": 3}', None) == 300
    assert output_bound(test_shape, b'{"model": "m", "max_new_tokens": 100}', 7) == 100
    assert output_bound(test_shape, b'{"model": "m", "max_tokens": 100, "n": 3}', 7) == 7  # other shapes' members
    assert output_bound(test_shape, b'{"model": "m"}', None) is None


def test_the_pipeline_plans_a_registered_shapes_call_from_its_adapter_and_refuses_a_generate_it_cannot_translate(
        test_shape: str) -> None:
    host = Host(uuid4(), "test-host", "http://127.0.0.1:9", True)
    route: Any = SimpleNamespace(binding=Binding(uuid4(), "m", 0, host, test_shape, "upstream-m", None, True))
    call: Any = SimpleNamespace(shape=test_shape, body={"model": "m", "prompt": "hi"}, source="batch")
    plan = make_plan(call, route)
    assert (plan.adapter.shape, plan.path, json.loads(plan.body)["model"]) == (
        test_shape, "/v1/test/completions", "upstream-m")
    generate: Any = SimpleNamespace(shape="canonical", body={"model": "m", "input": "hi"}, source="live")
    with pytest.raises(CrossShape) as refused:  # no /v1/generate translators for it in adapters/canonical.py
        make_plan(generate, route)
    assert (refused.value.status, refused.value.code) == (400, "unknown_shape")


def test_a_shape_unregistered_is_refused_by_the_envelope_and_never_reaches_the_estimate() -> None:
    assert [e.field for e in validate_envelope({"shape": "test_completions"}, has_requests=True)] == ["shape"]
    with pytest.raises(InvalidBatch):
        parse_batch(b'{"shape": "test_completions", "requests": [{"model": "m", "prompt": "hi"}]}', max_items=10)
    with pytest.raises(UnknownShape):
        output_bound("test_completions", b'{"model": "m"}', None)


@pytest.mark.parametrize("member", ["shape", "output_limit_fields", "choices_field", "canonical_markers",
                                    "bare_input", "title", "provider", "upstream_path", "batch_item_type"])
def test_an_adapter_missing_a_member_the_engine_reads_is_refused_at_registration(member: str) -> None:
    with pytest.raises(ShapeRegistrationError, match=member):
        register(_without(_CompletionsAdapter(), member))
    assert "test_completions" not in ADAPTERS


@pytest.mark.parametrize(("member", "value"), [
    ("shape", "Test Completions"), ("output_limit_fields", ["max_new_tokens"]), ("output_limit_fields", ("",)),
    ("choices_field", 3), ("canonical_markers", "max_tokens"), ("bare_input", "no"), ("title", ""),
    ("provider", None), ("upstream_path", b"/v1/test")])
def test_an_adapter_with_a_member_of_the_wrong_type_is_refused_at_registration(member: str, value: Any) -> None:
    adapter = _CompletionsAdapter()
    setattr(adapter, member, value)
    with pytest.raises(ShapeRegistrationError, match=member):
        register(adapter)
    assert "test_completions" not in ADAPTERS


def _without(adapter: _CompletionsAdapter, member: str) -> Any:
    """ADAPTER's members but MEMBER, as a plain object."""
    names = [name for name in dir(_CompletionsAdapter) if not name.startswith("_") and name != member]
    return type("Incomplete", (), {name: getattr(adapter, name) for name in names})()


def test_a_shape_name_is_registered_once_and_canonical_is_never_a_registered_shape() -> None:
    with pytest.raises(ShapeRegistrationError, match="already registered"):
        register(get_adapter("openai"))
    canonical = _CompletionsAdapter()
    canonical.shape = "canonical"
    with pytest.raises(ShapeRegistrationError, match="canonical"):
        register(canonical)


def test_every_shape_the_database_accepts_has_an_adapter_and_every_batch_shape_is_accepted(
        settings: Settings) -> None:
    with psycopg.connect(settings.database_url) as conn:
        assert accepted_values(conn, "batches", "shape") == set(batch_shapes()) == set(SHAPES)
        assert accepted_values(conn, "bindings", "adapter") == set(batch_shapes())
        check_shapes(conn)


def test_a_shape_registered_without_its_migration_stops_the_process_at_start(settings: Settings,
                                                                              test_shape: str) -> None:
    with psycopg.connect(settings.database_url) as conn, pytest.raises(ShapeRegistrationError, match=test_shape):
        check_shapes(conn)


def test_the_openai_batch_endpoints_are_the_openai_shapes_paths() -> None:
    assert openai_batch_endpoints() == {"/v1/chat/completions": "openai", "/v1/responses": "openai_responses"}


def test_the_files_a_new_shape_touches_as_the_architecture_page_lists_them_exist() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## What a change touches", 1)[1].split("\n## ", 1)[0]
    bullet = section.split("- **A new shape**", 1)[1].split("\n- **", 1)[0]
    paths = re.findall(r"`([\w/.]+\.(?:py|sql|js))`", bullet)
    assert {"adapters/registry.py", "adapters/base.py", "adapters/canonical.py"} <= set(paths), paths
    assert [path for path in paths if not (ROOT / path).exists()] == []
    for shape in batch_shapes():
        assert (ROOT / "adapters" / f"{shape}.py").exists(), f"the {shape} shape is not one module"
