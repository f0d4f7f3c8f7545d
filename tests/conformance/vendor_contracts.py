"""Rebuild the vendored contracts of tests/conformance/contracts (not a test; run by hand, see its README).

    python -m tests.conformance.vendor_contracts OPENAPI_JSON

OPENAPI_JSON: `openapi.json` of github.com/openai/openai-openapi; the Anthropic schemas come from the installed
`anthropic` SDK's types (requirements-dev.txt pins its version)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent / "contracts"
OPENAI_ROOTS = ("Batch", "ListBatchesResponse", "OpenAIFile", "ListFilesResponse", "DeleteFileResponse",
                "ErrorResponse", "CreateChatCompletionResponse", "CreateEmbeddingResponse", "Response",
                "ListModelsResponse")


def _refs(value: Any) -> set[str]:
    if isinstance(value, dict):
        found = {value["$ref"].rsplit("/", 1)[1]} if isinstance(value.get("$ref"), str) else set()
        return found.union(*(_refs(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_refs(v) for v in value))
    return set()


def openai_schemas(document: dict[str, Any]) -> dict[str, Any]:
    """OPENAI_ROOTS and every schema they refer to, as the document has them."""
    schemas = document["components"]["schemas"]
    kept: dict[str, Any] = {}
    todo = list(OPENAI_ROOTS)
    while todo:
        name = todo.pop()
        if name not in kept:
            kept[name] = schemas[name]
            todo += sorted(_refs(schemas[name]) - set(kept))
    return dict(sorted(kept.items()))


def anthropic_schemas() -> dict[str, Any]:
    """JSON Schemas of the anthropic SDK's types an answer is parsed into (pydantic's, refs under $defs)."""
    from anthropic.types import Message, ModelInfo
    from anthropic.types.messages import DeletedMessageBatch, MessageBatch, MessageBatchIndividualResponse
    from anthropic.types.shared import ErrorResponse
    from pydantic import TypeAdapter

    types = {"MessageBatch": MessageBatch, "DeletedMessageBatch": DeletedMessageBatch,
             "MessageBatchIndividualResponse": MessageBatchIndividualResponse, "ErrorResponse": ErrorResponse,
             "Message": Message, "ModelInfo": ModelInfo}
    return {name: TypeAdapter(kind).json_schema(mode="serialization") for name, kind in types.items()}


def main(openapi_json: str) -> None:
    document = json.loads(Path(openapi_json).read_text())
    trimmed = {"openapi": document["openapi"], "info": document["info"],
               "components": {"schemas": openai_schemas(document)}}
    (HERE / "openai-openapi.json").write_text(json.dumps(trimmed, indent=1, sort_keys=True) + "\n")
    (HERE / "anthropic-sdk-types.json").write_text(json.dumps(anthropic_schemas(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
