"""The shape-to-binding rule (plan_dispatch) and the adapter registry."""

from __future__ import annotations

import pytest

from adapters import anthropic, embeddings, get_adapter, openai, openai_responses
from adapters.errors import AdapterError, CrossShapeDispatch, CrossShapeUnsupported, UnknownShape
from adapters.shapes import plan_dispatch

SHAPES = ("openai", "anthropic", "openai_responses")
PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages", "openai_responses": "/v1/responses"}


@pytest.mark.parametrize("batch", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_request_on_a_binding_of_its_own_shape_goes_to_that_shapes_path(shape: str, batch: bool) -> None:
    for host in ("openai", "anthropic", "local-vllm"):
        dispatch = plan_dispatch(shape, shape, host, batch=batch)
        assert dispatch.adapter == shape
        assert dispatch.path == PATHS[shape]
        assert not dispatch.translate


def test_an_anthropic_item_on_an_openai_binding_is_a_cross_shape_dispatch() -> None:
    with pytest.raises(CrossShapeDispatch) as caught:
        plan_dispatch("anthropic", "openai", "openai", batch=True)
    assert str(caught.value) == "cross-shape dispatch: anthropic item cannot run on an openai binding"
    assert (caught.value.status, caught.value.code) == (400, "cross_shape_dispatch")
    assert caught.value.message == str(caught.value)


@pytest.mark.parametrize(("shape", "binding"), [
    (s, b) for s in SHAPES for b in SHAPES if s != b and (s, b) != ("openai_responses", "openai")])
def test_every_other_batch_pairing_is_a_cross_shape_dispatch_naming_both_shapes(shape: str, binding: str) -> None:
    for host in ("openai", "anthropic", "elsewhere"):
        with pytest.raises(CrossShapeDispatch, match=f"{shape} item cannot run on an {binding} binding"):
            plan_dispatch(shape, binding, host, batch=True)


def test_a_responses_item_on_an_openai_binding_of_the_openai_host_is_posted_as_is_to_chat_completions() -> None:
    dispatch = plan_dispatch("openai_responses", "openai", "openai", batch=True)
    assert dispatch.adapter == "openai"
    assert dispatch.path == "/v1/chat/completions"
    assert not dispatch.translate


def test_a_responses_item_on_an_openai_binding_of_another_host_is_a_cross_shape_dispatch() -> None:
    with pytest.raises(CrossShapeDispatch, match="openai_responses item cannot run on an openai binding"):
        plan_dispatch("openai_responses", "openai", "azure-openai", batch=True)


def test_a_live_responses_request_on_an_openai_binding_of_the_openai_host_passes_through_natively() -> None:
    dispatch = plan_dispatch("openai_responses", "openai", "openai", batch=False)
    assert dispatch.adapter == "openai_responses"
    assert dispatch.path == "/v1/responses"
    assert get_adapter(dispatch.adapter).auth_headers("k") == {"Authorization": "Bearer k"}


def test_a_live_responses_request_on_an_openai_binding_of_another_host_is_unsupported() -> None:
    with pytest.raises(CrossShapeUnsupported) as caught:
        plan_dispatch("openai_responses", "openai", "local-vllm", batch=False)
    assert (caught.value.status, caught.value.code) == (400, "cross_shape_unsupported")
    assert "openai_responses" in caught.value.message and "an openai binding" in caught.value.message


@pytest.mark.parametrize(("shape", "binding"), [
    (s, b) for s in SHAPES for b in SHAPES if s != b and (s, b) != ("openai_responses", "openai")])
def test_every_other_live_cross_shape_pairing_is_unsupported_naming_both_shapes(shape: str, binding: str) -> None:
    with pytest.raises(CrossShapeUnsupported) as caught:
        plan_dispatch(shape, binding, "openai", batch=False)
    assert shape in caught.value.message and binding in caught.value.message


@pytest.mark.parametrize("binding", SHAPES)
def test_a_live_canonical_request_is_translated_to_the_binding_shape(binding: str) -> None:
    dispatch = plan_dispatch("canonical", binding, "anything", batch=False)
    assert dispatch.adapter == binding
    assert dispatch.path == PATHS[binding]
    assert dispatch.translate


@pytest.mark.parametrize("binding", ["openai", "openai_responses"])
def test_live_embeddings_go_to_v1_embeddings_on_openai_family_bindings(binding: str) -> None:
    dispatch = plan_dispatch("embeddings", binding, "local-vllm", batch=False)
    assert dispatch.adapter == "embeddings"
    assert dispatch.path == "/v1/embeddings"


def test_live_embeddings_on_an_anthropic_binding_are_unsupported() -> None:
    with pytest.raises(CrossShapeUnsupported, match="embeddings"):
        plan_dispatch("embeddings", "anthropic", "anthropic", batch=False)


@pytest.mark.parametrize("shape", ["canonical", "embeddings"])
def test_canonical_and_embeddings_items_cannot_be_batched(shape: str) -> None:
    with pytest.raises(CrossShapeDispatch, match="cannot be batched"):
        plan_dispatch(shape, "openai", "openai", batch=True)


@pytest.mark.parametrize(("shape", "binding"), [("gemini", "openai"), ("openai", "gemini"), ("openai", "embeddings"),
                                                ("openai", "canonical")])
def test_unknown_shapes_and_adapters_are_rejected(shape: str, binding: str) -> None:
    with pytest.raises(UnknownShape):
        plan_dispatch(shape, binding, "openai", batch=False)


def test_the_registry_knows_every_adapter_and_rejects_others() -> None:
    assert get_adapter("openai") is openai.ADAPTER
    assert get_adapter("anthropic") is anthropic.ADAPTER
    assert get_adapter("openai_responses") is openai_responses.ADAPTER
    assert get_adapter("embeddings") is embeddings.ADAPTER
    with pytest.raises(UnknownShape) as caught:
        get_adapter("canonical")
    assert isinstance(caught.value, AdapterError) and caught.value.code == "unknown_shape"


def test_every_adapter_names_its_upstream_path() -> None:
    assert {name: get_adapter(name).upstream_path for name in SHAPES} == PATHS
    assert get_adapter("embeddings").upstream_path == "/v1/embeddings"
