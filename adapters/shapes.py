"""The shape-to-binding rule: which adapter and upstream path serve a request of one shape on a given binding."""

from __future__ import annotations

from dataclasses import dataclass

from adapters import openai, openai_responses
from adapters.base import CANONICAL, EMBEDDINGS, ShapeAdapter
from adapters.embeddings import ADAPTER as EMBEDDINGS_ADAPTER
from adapters.errors import CrossShapeDispatch, CrossShapeUnsupported, UnknownShape
from adapters.registry import ADAPTERS, batch_shapes, get_adapter

OPENAI_HOST = "openai"  # the host whose name triggers the Responses-on-openai edge case


@dataclass(frozen=True)
class Dispatch:
    """How to call the upstream for one request."""

    adapter: str  # shape name of the adapter that speaks to the upstream (auth, body, usage): get_adapter(adapter)
    path: str  # appended to the host's base URL
    translate: bool = False  # canonical request: build the body with canonical.to_shape(body, adapter)


def plan_dispatch(request_shape: str, binding_adapter: str, host_name: str, *, batch: bool) -> Dispatch:
    """Same shape → that adapter. Otherwise see `_plan_batch` / `_plan_live`; everything else is an error.

    Raises UnknownShape, CrossShapeDispatch (batch) or CrossShapeUnsupported (live).
    """
    if request_shape not in ADAPTERS and request_shape != CANONICAL:
        raise UnknownShape(f"unknown request shape: {request_shape!r}")
    if binding_adapter not in batch_shapes():
        raise UnknownShape(f"unknown binding adapter: {binding_adapter!r}")
    binding = get_adapter(binding_adapter)
    if request_shape == binding_adapter:
        return Dispatch(binding.shape, binding.upstream_path)
    if batch:
        return _plan_batch(request_shape, binding_adapter, host_name)
    return _plan_live(request_shape, binding, host_name)


def _plan_batch(request_shape: str, binding_adapter: str, host_name: str) -> Dispatch:
    """Batch items are never translated. The one documented exception: an openai_responses item on an
    `adapter: openai` binding of the host named `openai` is POSTed as it is to that host's Chat Completions
    endpoint (and fails there with the upstream's status)."""
    if request_shape in (CANONICAL, EMBEDDINGS):
        raise CrossShapeDispatch(f"cross-shape dispatch: {request_shape} requests cannot be batched")
    if request_shape == openai_responses.ADAPTER.shape and binding_adapter == "openai" and host_name == OPENAI_HOST:
        return Dispatch(openai.ADAPTER.shape, openai.ADAPTER.upstream_path)
    raise CrossShapeDispatch(
        f"cross-shape dispatch: {request_shape} item cannot run on an {binding_adapter} binding")


def _plan_live(request_shape: str, binding: ShapeAdapter, host_name: str) -> Dispatch:
    """Live: canonical is translated to the binding's shape; embeddings go to OpenAI-family bindings; an
    openai_responses request on an `adapter: openai` binding of the host named `openai` passes through natively
    to /v1/responses (that host speaks both)."""
    if request_shape == CANONICAL:
        return Dispatch(binding.shape, binding.upstream_path, translate=True)
    if request_shape == EMBEDDINGS:
        if binding.provider == EMBEDDINGS_ADAPTER.provider:  # a provider's hosts serve its embeddings endpoint
            return Dispatch(EMBEDDINGS_ADAPTER.shape, EMBEDDINGS_ADAPTER.upstream_path)
        raise CrossShapeUnsupported(f"cross-shape request: embeddings need a binding of an"
                                    f" {EMBEDDINGS_ADAPTER.provider} shape, not {binding.shape}")
    if request_shape == openai_responses.ADAPTER.shape and binding.shape == "openai" and host_name == OPENAI_HOST:
        return Dispatch(openai_responses.ADAPTER.shape, openai_responses.ADAPTER.upstream_path)
    raise CrossShapeUnsupported(
        f"cross-shape request: an {request_shape} request cannot run on an {binding.shape} binding"
        f" (Relay translates only /v1/generate requests)")
