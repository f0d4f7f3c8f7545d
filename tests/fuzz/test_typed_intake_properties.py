"""The typed path of batch intake (app/batches/intake.py `typed_batch`, msgspec with each shape's batch_item_type)
never accepts a body the one-pass scanner would refuse, and what it accepts it reads exactly as the scanner does:
same items, same bytes, same model names, same envelope. Bodies are generated near the edges of validity: valid
items with members replaced by any JSON value, unknown members, raw JSON text no decoder should let through
(1e999, 4,301-digit integers, lone surrogates, NaN), reordered or repeated envelope members."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.batches.intake import ParsedBatch, TypedBatch, _parse_batch, typed_batch
from app.errors import RelayError
from tests.fuzz.test_batch_validation_properties import JSON_VALUES, PLAIN_TEXT, VALID_ITEMS

SETTINGS = settings(max_examples=400, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
LIMITS = {"max_items": 6, "max_item_bytes": 600}

RAW = "\x00raw\x00"  # a string value replaced by raw JSON text after dumping
RAW_TEXTS = ["1e999", "-1E+400", "9" * 4301, "1" + "0" * 400 + ".0", '"\\ud800"', '"a\\udc00"', '"\\u0000"', "NaN",
             "1e308", "0.5e-400", '"\\ud83d\\ude00"', "[" * 40 + "]" * 40, "true", "null", '"embedding"']
# The members each shape's checks look at, and a few that no check knows.
MEMBERS = ["model", "messages", "input", "max_tokens", "stream", "temperature", "n", "stop", "tools", "tool_choice",
           "stream_options", "system", "top_k", "stop_sequences", "metadata", "encoding_format", "dimensions",
           "instructions", "max_output_tokens", "role", "content", "tool_call_id", "type", "seed", "x-extra"]
VALUES = JSON_VALUES | st.just(RAW) | st.sampled_from([0, 1, -1, 2**63, 1.5, "", " ", "\t", "user", "tool", "system",
                                                       "assistant", "text-embedding-3", "gpt\x00", "modèle"])


def _mutate(item: Any, data: st.DataObject) -> Any:
    """ITEM with a few members (of it or of its messages) set, replaced or removed."""
    for _ in range(data.draw(st.integers(0, 3))):
        target = item
        messages = item.get("messages") if isinstance(item, dict) else None
        if isinstance(messages, list) and messages and data.draw(st.booleans()):
            target = messages[data.draw(st.integers(0, len(messages) - 1))]
        if not isinstance(target, dict):
            break
        name = data.draw(st.sampled_from(MEMBERS))
        if data.draw(st.integers(0, 4)) == 0:
            target.pop(name, None)
        else:
            target[name] = data.draw(VALUES)
    return item


def _dump(body: dict[str, Any], data: st.DataObject) -> bytes:
    text, marker = json.dumps(body, ensure_ascii=data.draw(st.booleans())), json.dumps(RAW)
    while marker in text:
        text = text.replace(marker, data.draw(st.sampled_from(RAW_TEXTS)), 1)
    return text.encode("utf-8", "surrogatepass")


def _parse_typed(raw: bytes, **limits: Any) -> tuple[TypedBatch, list[str]] | None:
    """The batch and its model names, when the typed path reads the whole body; None when the scanner must."""
    typed = typed_batch(raw, **limits)
    models = typed.models() if typed is not None else None
    return None if typed is None or models is None else (typed, models)


def _same(read: tuple[TypedBatch, list[str]], scanned: ParsedBatch) -> None:
    typed, models = read
    assert (typed.shape, typed.metadata, models) == (scanned.shape, scanned.metadata, scanned.models)
    assert [bytes(b) for b in typed.bodies()] == list(scanned.item_bodies())


@SETTINGS
@given(shape=st.sampled_from(sorted(VALID_ITEMS)), data=st.data(), shape_last=st.booleans(),
       metadata=st.none() | st.dictionaries(PLAIN_TEXT, JSON_VALUES | st.just(RAW), max_size=2),
       extra=st.none() | st.sampled_from(["requests", "shape", "other"]))
def test_the_typed_path_accepts_only_what_the_scanner_accepts_and_reads_it_the_same(
        shape: str, data: st.DataObject, shape_last: bool, metadata: Any, extra: str | None) -> None:
    items = [_mutate(item, data) for item in data.draw(st.lists(VALID_ITEMS[shape], min_size=0, max_size=7))]
    body: dict[str, Any] = {"requests": items, "shape": shape} if shape_last else {"shape": shape, "requests": items}
    if metadata is not None:
        body["metadata"] = metadata
    raw = _dump(body, data)
    if extra is not None:  # a repeated or unknown envelope member, after the others
        raw = raw[:-1] + b', "%s": %s}' % (extra.encode(), _dump({"v": data.draw(VALUES)}, data)[6:-1])
    typed = _parse_typed(raw, **LIMITS)
    try:
        scanned = _parse_batch(raw, **LIMITS)
    except RelayError:
        assert typed is None, f"the typed path accepted a body the scanner refuses: {raw[:300]!r}"
        return
    if typed is not None:
        _same(typed, scanned)


@SETTINGS
@given(shape=st.sampled_from(sorted(VALID_ITEMS)), data=st.data())
def test_the_typed_path_takes_the_common_batches(shape: str, data: st.DataObject) -> None:
    items = data.draw(st.lists(VALID_ITEMS[shape], min_size=1, max_size=6))
    raw = json.dumps({"shape": shape, "metadata": {"run": 1}, "requests": items}).encode()
    typed = _parse_typed(raw, **LIMITS)
    assert typed is not None, raw[:300]
    _same(typed, _parse_batch(raw, **LIMITS))


def _nested_item_batch(depth: int) -> bytes:
    item = '{"model":"m","messages":[{"role":"user","content":"x"}],"metadata":{"deep":%s}}'
    return ('{"shape":"openai","requests":[%s]}' % (item % ("[" * depth + "]" * depth))).encode()


def test_items_nested_near_the_recursion_limit_are_accepted_by_the_typed_path_only_if_the_scanner_accepts_them(
        ) -> None:
    outcomes = set()
    for depth in range(850, 1001, 2):
        raw = _nested_item_batch(depth)
        typed = _parse_typed(raw, max_items=5, max_item_bytes=None)
        try:
            scanned = _parse_batch(raw, max_items=5, max_item_bytes=None)
        except RecursionError:  # parse_batch answers it with InvalidJson
            assert typed is None, f"the typed path accepted an item nested {depth} deep that the scanner refuses"
            outcomes.add("refused")
            continue
        outcomes.add("typed" if typed is not None else "scanned")
        if typed is not None:
            _same(typed, scanned)
    assert outcomes == {"typed", "scanned", "refused"}  # the band around both limits was crossed
