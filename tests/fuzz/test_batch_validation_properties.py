"""Properties of the batch validators (app/batches/validation.py) and the one-pass intake that calls them
(app/batches/intake.py), on generated input: they never fail with anything but a 4xx RelayError, they accept
every well-formed batch whatever its formatting, and they name the right item when one is bad."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.batches.errors import BatchItemTooLarge, BatchTooLarge, InvalidBatch
from app.batches.intake import parse_batch
from app.batches.validation import (
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    SHAPES,
    ItemError,
    item_errors,
    json_depth,
    text_problem,
    validate_envelope,
)
from app.errors import InvalidJson, RelayError

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

# Any text, control characters and lone surrogates included (JSON can carry them as escapes).
ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=30)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | ANY_TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(ANY_TEXT, children, max_size=4),
    max_leaves=20)

PLAIN_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40)
MODELS = st.from_regex(r"[a-z][a-z0-9.\-]{0,20}", fullmatch=True)
CHAT_ITEMS = st.fixed_dictionaries(
    {"model": MODELS, "messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]),
                                                                 "content": PLAIN_TEXT}), min_size=1, max_size=3)},
    optional={"temperature": st.floats(0, 2), "max_tokens": st.integers(1, 4096), "stream": st.just(False)})
MESSAGES_ITEMS = st.fixed_dictionaries(
    {"model": MODELS, "max_tokens": st.integers(1, 4096),
     "messages": st.lists(st.fixed_dictionaries({"role": st.just("user"), "content": PLAIN_TEXT}), min_size=1,
                          max_size=3)})
RESPONSES_ITEMS = st.fixed_dictionaries({"model": MODELS, "input": PLAIN_TEXT},
                                        optional={"instructions": PLAIN_TEXT})
VALID_ITEMS = {"openai": CHAT_ITEMS, "anthropic": MESSAGES_ITEMS, "openai_responses": RESPONSES_ITEMS}
# How a client might format the same JSON: compact, spaced, indented, ASCII-escaped.
FORMATS = st.sampled_from([{"separators": (",", ":")}, {}, {"indent": 2}, {"ensure_ascii": False},
                           {"indent": "\t", "ensure_ascii": True}])


@SETTINGS
@given(shape=st.sampled_from([*SHAPES, "nope"]), idx=st.integers(0, 10**6), item=JSON_VALUES)
def test_item_validation_never_raises_and_every_error_names_the_item(shape: str, idx: int, item: Any) -> None:
    for surrogates in (False, True):
        errors = item_errors(shape, idx, item, may_hold_surrogates=surrogates) if shape in SHAPES else []
        assert all(isinstance(e, ItemError) and e.idx == idx and isinstance(e.message, str) for e in errors)


@SETTINGS
@given(envelope=st.dictionaries(ANY_TEXT | st.sampled_from(["shape", "metadata", "requests"]), JSON_VALUES,
                                max_size=5), has_requests=st.booleans())
def test_envelope_validation_never_raises_and_only_lists_envelope_errors(envelope: dict[str, Any],
                                                                         has_requests: bool) -> None:
    errors = validate_envelope(envelope, has_requests=has_requests)
    assert all(e.idx is None for e in errors)
    if not has_requests:
        assert any(e.field == "requests" for e in errors)


@SETTINGS
@given(shape=st.sampled_from(SHAPES), data=st.data(), fmt=FORMATS,
       metadata=st.none() | st.dictionaries(PLAIN_TEXT, PLAIN_TEXT, max_size=3))
def test_every_well_formed_batch_is_accepted_whatever_its_formatting(shape: str, data: st.DataObject,
                                                                     fmt: dict[str, Any], metadata: Any) -> None:
    items = data.draw(st.lists(VALID_ITEMS[shape], min_size=1, max_size=8))
    body: dict[str, Any] = {"shape": shape, "requests": items}
    if metadata is not None:
        body["metadata"] = metadata
    parsed = parse_batch(json.dumps(body, **fmt).encode(), max_items=100)
    assert parsed.count == len(items) and parsed.shape == shape and parsed.metadata == metadata
    assert [json.loads(raw) for raw in parsed.item_bodies()] == items  # each file holds exactly its item
    assert parsed.models == [item["model"] for item in items]


@SETTINGS
@given(shape=st.sampled_from(SHAPES), data=st.data(), bad=JSON_VALUES, shape_last=st.booleans())
def test_one_bad_item_rejects_the_batch_naming_its_index(shape: str, data: st.DataObject, bad: Any,
                                                         shape_last: bool) -> None:
    items = data.draw(st.lists(VALID_ITEMS[shape], min_size=1, max_size=6))
    where = data.draw(st.integers(0, len(items)))
    if not item_errors(shape, where, bad, may_hold_surrogates=True):
        return  # the generated value happens to be a valid request of this shape
    items.insert(where, bad)
    body = {"requests": items, "shape": shape} if shape_last else {"shape": shape, "requests": items}
    try:
        parse_batch(json.dumps(body).encode(), max_items=100)
    except InvalidBatch as exc:
        assert {d["idx"] for d in exc.details} == {where}
    else:
        raise AssertionError(f"item {where} ({bad!r}) was accepted")


def _nested_body(spec: tuple[int, str]) -> bytes:
    """A batch whose metadata and only item nest DEPTH levels deep."""
    depth, opener = spec
    closer = "]" if opener == "[" else "}"
    nested = opener * depth + "1" + closer * depth
    return ('{"shape":"openai","metadata":{"m":%s},"requests":[%s]}' % (nested, nested)).encode()  # noqa: UP031


@SETTINGS
@given(raw=st.binary(max_size=300) | JSON_VALUES.map(lambda v: json.dumps(v).encode())
       | st.tuples(st.integers(1, 3000), st.sampled_from(["[", '{"a":'])).map(_nested_body))
def test_any_body_is_parsed_or_refused_with_a_4xx_relay_error(raw: bytes) -> None:
    try:
        parse_batch(raw, max_items=5, max_item_bytes=200)
    except (InvalidJson, InvalidBatch, BatchTooLarge, BatchItemTooLarge) as exc:
        assert isinstance(exc, RelayError) and 400 <= exc.status < 500 and exc.code


@SETTINGS
@given(value=JSON_VALUES)
def test_text_problem_finds_exactly_what_utf8_and_postgres_text_cannot_hold(value: Any) -> None:
    dumped = json.dumps(value, ensure_ascii=False)
    try:
        dumped.encode("utf-8")
        encodable = True
    except UnicodeEncodeError:
        encodable = False
    assert (text_problem(value) is None) == (encodable and not _contains_nul(value))
    assert (text_problem(value, nul=False) is None) == encodable


def _contains_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_contains_nul(k) or _contains_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_contains_nul(v) for v in value)
    return False


NON_FINITE = st.sampled_from([float("nan"), float("inf"), float("-inf")])


@SETTINGS
@given(shape=st.sampled_from(SHAPES), data=st.data(), in_metadata=st.booleans(), number=NON_FINITE)
def test_a_nan_or_infinity_anywhere_in_a_batch_refuses_it_as_invalid_json(shape: str, data: st.DataObject,
                                                                          in_metadata: bool, number: float) -> None:
    items = data.draw(st.lists(VALID_ITEMS[shape], min_size=1, max_size=4))
    body: dict[str, Any] = {"shape": shape, "requests": items}
    holder = data.draw(st.recursive(st.just(number), lambda inner: st.lists(inner, min_size=1, max_size=2)
                                    | st.dictionaries(PLAIN_TEXT, inner, min_size=1, max_size=2), max_leaves=4))
    if in_metadata:
        body["metadata"] = {"n": holder}
    else:
        items[data.draw(st.integers(0, len(items) - 1))]["extra"] = holder
    try:
        parse_batch(json.dumps(body).encode(), max_items=100, max_item_bytes=data.draw(st.sampled_from([None, 400])))
    except InvalidJson as exc:
        assert "is not a JSON number" in exc.message or "out of range" in exc.message
    except BatchItemTooLarge:
        assert not in_metadata
    else:
        raise AssertionError("a non-finite number was accepted")


@SETTINGS
@given(depth=st.integers(0, 40), width=st.integers(0, 3000), opener=st.sampled_from(["[", '{"a":']))
def test_metadata_is_accepted_exactly_when_it_is_at_most_16_deep_and_16_kib(depth: int, width: int,
                                                                            opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    nested = opener * depth + json.dumps("x" * (width * 8)) + closer * depth
    raw = ('{"shape":"openai","metadata":{"m":%s},"requests":[{"model":"m","messages":[{"role":"user",'  # noqa: UP031
           '"content":"x"}]}]}' % nested).encode()
    metadata = json.loads(raw)["metadata"]
    fits = json_depth(metadata) <= MAX_METADATA_DEPTH and len(json.dumps(metadata)) <= MAX_METADATA_BYTES
    try:
        parsed = parse_batch(raw, max_items=5)
    except InvalidBatch as exc:
        assert not fits and exc.details[0]["field"] == "metadata"
    else:
        assert fits and parsed.metadata == metadata
