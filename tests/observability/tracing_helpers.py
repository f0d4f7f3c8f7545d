"""The tracing tests' catalog (a host on the fake upstream with two keys) and readers of received spans."""

from __future__ import annotations

from typing import Any

from devtools.otlp_receiver import ReceivedSpan
from tests.usage.conftest import CATALOG as USAGE_CATALOG


def tracing_catalog(upstream_url: str) -> dict[str, Any]:
    """The usage tests' catalog (a PUT replaces the whole catalog) plus a host with two keys (the second takes over
    when the first fails), a priced model, a policy and a service account."""
    doc = {k: list(v) for k, v in USAGE_CATALOG.items()}
    doc["hosts"].append({"name": "tr-openai", "base_url": upstream_url,
                         "keys": [{"name": "tr-first", "value": "sk-tr-first"},
                                  {"name": "tr-second", "value": "sk-tr-second"}]})
    pricing = {"input_per_mtok": 0.15, "output_per_mtok": 0.6}
    doc["models"].append({"name": "tr-gpt", "bindings": [{"host": "tr-openai", "adapter": "openai",
                                                           "upstream_model": "gpt-4o-mini", "pricing": pricing}]})
    doc["policies"].append({"name": "tr-main", "models": ["*"], "key_pool": ["tr-first", "tr-second"]})
    doc["service_accounts"].append({"name": "tr-svc", "policy": "tr-main"})
    return doc


def by_name(spans: list[ReceivedSpan], name: str, trace_id: str | None = None) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name and (trace_id is None or s.trace_id == trace_id)]


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = by_name(spans, name)
    assert len(found) == 1, f"{len(found)} spans named {name!r}: {sorted({s.name for s in spans})}"
    return found[0]


def attribute_texts(spans: list[ReceivedSpan]) -> list[str]:
    """Every attribute value of SPANS (and of their events and resources' names), as text."""
    texts = []
    for span in spans:
        texts += [f"{k}={v}" for k, v in span.attributes.items()]
        texts += [f"{k}={v}" for attrs in span.event_attributes for k, v in attrs.items()]
        texts.append(span.name)
    return texts


def parent_of(traceparent: str) -> tuple[str, str]:
    """The trace id and parent span id of a sampled W3C traceparent (its flags may add the random-id bit)."""
    version, trace_id, span_id, flags = traceparent.split("-")
    assert version == "00" and int(flags, 16) & 1, traceparent
    return trace_id, span_id
