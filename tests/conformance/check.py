"""Answers checked against the providers' published contracts (vendored in contracts/, see its README): OpenAI's
OpenAPI document and the schemas of the `anthropic` SDK's types, with jsonschema."""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

CONTRACTS = Path(__file__).parent / "contracts"
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
FORMATS = FormatChecker()
FORMATS.checks("date-time")(lambda value: not isinstance(value, str) or bool(_RFC3339.match(value)))


@cache
def _document(name: str) -> dict[str, Any]:
    return json.loads((CONTRACTS / name).read_text())  # type: ignore[no-any-return]


def optional_members_nullable(schema: Any) -> Any:
    """SCHEMA with every optional (not required) member of every object also allowing null: OpenAI's own answers
    carry null for an unset optional member (`output_file_id`, `errors`, `expires_at` of a file, ...) and its SDK
    types them Optional, though the document types them without null. A required member is never relaxed."""
    if isinstance(schema, list):
        return [optional_members_nullable(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: optional_members_nullable(v) for k, v in schema.items()}
    if isinstance(out.get("properties"), dict):
        required = set(out.get("required", []))
        out["properties"] = {name: prop if name in required else {"anyOf": [prop, {"type": "null"}]}
                             for name, prop in out["properties"].items()}
    return out


@cache
def _openai_validator(name: str) -> Draft202012Validator:
    document = copy.deepcopy(_document("openai-openapi.json"))
    document["components"] = optional_members_nullable(document["components"])
    document["components"]["schemas"].update(_document("openai-api-reference.json"))
    return Draft202012Validator({**document, "$ref": f"#/components/schemas/{name}"}, format_checker=FORMATS)


@cache
def _anthropic_validator(name: str) -> Draft202012Validator:
    types = _document("anthropic-sdk-types.json")
    schema = types[name] if name in types else _document("anthropic-api-reference.json")[name]
    return Draft202012Validator({**schema, "$defs": {**types["MessageBatch"].get("$defs", {}),
                                                     **schema.get("$defs", {}), "MessageBatch": types["MessageBatch"]}},
                                format_checker=FORMATS)


def problems(validator: Draft202012Validator, body: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
            for e in sorted(validator.iter_errors(body), key=lambda e: list(map(str, e.absolute_path)))]


def openai(name: str, body: Any) -> Any:
    """Assert BODY is a valid OpenAI NAME (a schema of the OpenAPI document); BODY."""
    found = problems(_openai_validator(name), body)
    assert not found, f"not OpenAI's {name}: {found[:5]}\n{json.dumps(body)[:600]}"
    return body


def anthropic(name: str, body: Any) -> Any:
    """Assert BODY is a valid Anthropic NAME (a type of the SDK, or of the API reference); BODY."""
    found = problems(_anthropic_validator(name), body)
    assert not found, f"not Anthropic's {name}: {found[:5]}\n{json.dumps(body)[:600]}"
    return body
