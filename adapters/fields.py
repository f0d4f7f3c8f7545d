"""Small type checks for request validation: each returns a problem sentence, or None when the value is fine."""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Union

import msgspec

from adapters.base import FieldError

Check = Callable[[Any], str | None]


def non_empty_string(value: Any) -> str | None:
    """A string with at least one non-blank character."""
    if not isinstance(value, str) or not value.strip():
        return "must be a non-empty string"
    return None


def string(value: Any) -> str | None:
    """Any string."""
    return None if isinstance(value, str) else "must be a string"


def boolean(value: Any) -> str | None:
    """true or false."""
    return None if isinstance(value, bool) else "must be a boolean"


def number(value: Any) -> str | None:
    """An int or float (JSON number), not a boolean."""
    return None if isinstance(value, int | float) and not isinstance(value, bool) else "must be a number"


def integer(value: Any) -> str | None:
    """A JSON integer, not a boolean."""
    return None if isinstance(value, int) and not isinstance(value, bool) else "must be an integer"


def positive_integer(value: Any) -> str | None:
    """An integer >= 1."""
    return integer(value) or (None if value >= 1 else "must be a positive integer")


def obj(value: Any) -> str | None:
    """A JSON object."""
    return None if isinstance(value, dict) else "must be an object"


def array(value: Any) -> str | None:
    """A JSON array."""
    return None if isinstance(value, list) else "must be an array"


def strings(value: Any) -> str | None:
    """An array of strings."""
    return None if isinstance(value, list) and all(isinstance(v, str) for v in value) else "must be an array of strings"


def string_or_strings(value: Any) -> str | None:
    """A string or an array of strings (e.g. `stop`)."""
    if isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        return None
    return "must be a string or an array of strings"


def string_or_object(value: Any) -> str | None:
    """A string or an object (e.g. `tool_choice`)."""
    return None if isinstance(value, str | dict) else "must be a string or an object"


def one_of(*allowed: str) -> Check:
    """One of the given strings."""

    def check(value: Any) -> str | None:
        if isinstance(value, str) and value in allowed:
            return None
        return "must be one of " + ", ".join(allowed)

    return check


def check_body(body: Any, required: Mapping[str, Check], optional: Mapping[str, Check]) -> list[FieldError]:
    """Required fields must pass their check; optional ones may be absent or null. Unknown fields pass."""
    if not isinstance(body, dict):
        return [FieldError("body", "must be a JSON object")]
    errors: list[FieldError] = []
    for name, check in required.items():
        if name not in body:
            errors.append(FieldError(name, "is required"))
        elif (problem := check(body[name])) is not None:
            errors.append(FieldError(name, problem))
    for name, check in optional.items():
        value = body.get(name)
        if value is not None and (problem := check(value)) is not None:
            errors.append(FieldError(name, problem))
    return errors


def check_items(items: list[Any], field: str, check_item: Callable[[str, Any], list[FieldError]]) -> list[FieldError]:
    """Run CHECK_ITEM on each element, naming it `field[i]`; non-objects are reported without calling it."""
    errors: list[FieldError] = []
    for i, item in enumerate(items):
        name = f"{field}[{i}]"
        if not isinstance(item, dict):
            errors.append(FieldError(name, "must be an object"))
        else:
            errors.extend(check_item(name, item))
    return errors


def content_parts(value: Any) -> str | None:
    """Message content: a string, or an array of parts that are objects with a string `type`."""
    if isinstance(value, str):
        return None
    if isinstance(value, list) and all(isinstance(p, dict) and isinstance(p.get("type"), str) for p in value):
        return None
    return "must be a string or an array of content parts (objects with a `type`)"


# The checks above as msgspec types, for decoding many request bodies at C speed (a batch's items). Each accepts
# a subset of what its check accepts, never more: a body one of them refuses is checked again by the checks above,
# which say what is wrong. Raw values are syntax-checked and kept undecoded.
Object = dict[str, msgspec.Raw]  # obj


class ContentPart(msgspec.Struct):
    """An element of message content: an object with a string `type` (other members pass). The usual members of
    text and image parts are named, so that a part made of them is known whole (app/batches/intake.py)."""

    type: str
    text: str | msgspec.UnsetType = msgspec.UNSET
    image_url: Object | msgspec.UnsetType = msgspec.UNSET
    source: Object | msgspec.UnsetType = msgspec.UNSET
    cache_control: Object | msgspec.UnsetType = msgspec.UNSET


Content = str | list[ContentPart]  # content_parts
NonBlank = Annotated[str, msgspec.Meta(pattern=r"\S")]  # non_empty_string (re's \s is str.isspace)
PositiveInt = Annotated[int, msgspec.Meta(ge=1)]  # positive_integer (msgspec's int refuses booleans and floats)
# A batch item's output limit (max_tokens, max_completion_tokens, max_output_tokens) and its choices (`n`): larger
# ones no provider takes, and a cost bound over them would not fit the arithmetic of a price (app/batches/validation).
MAX_TOKEN_LIMIT = 2**31 - 1
MAX_CHOICES = 128  # OpenAI's largest `n`
TokenLimit = Annotated[int, msgspec.Meta(ge=1, le=MAX_TOKEN_LIMIT)]
Choices = Annotated[int, msgspec.Meta(ge=1, le=MAX_CHOICES)]
Array = list[msgspec.Raw]  # array
StringOrObject = str | Object  # string_or_object
StringOrStrings = str | list[str]  # string_or_strings
Absent = msgspec.UnsetType  # a member that must be absent (its presence, null included, needs the checks above)


def closed_type(tp: Any, made: dict[Any, Any] | None = None) -> Any:
    """TP (one of the types above, or a struct made of them) with every struct in it refusing unknown members and
    every msgspec.Raw value decoded untyped (which refuses NaN, 1e999, 4,301-digit integers and lone surrogates):
    a body that decodes as it holds nothing a decode as TP would skip unchecked."""
    made = {} if made is None else made
    if tp in made:
        return made[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is msgspec.Raw:
        closed: Any = Any
    elif isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        fields = msgspec.structs.fields(tp)
        closed = msgspec.defstruct(f"Closed{tp.__name__}", [_closed_field(f, made) for f in fields],
                                   tag_field=tp.__struct_config__.tag_field, tag=tp.__struct_config__.tag,
                                   rename={f.name: f.encode_name for f in fields}, forbid_unknown_fields=True,
                                   module=__name__)
    elif origin is Annotated:
        closed = Annotated[(closed_type(args[0], made), *tp.__metadata__)]  # type: ignore[valid-type]
    elif origin in (Union, types.UnionType):
        closed = Union[tuple(closed_type(arg, made) for arg in args)]  # noqa: UP007
    elif origin in (list, dict, tuple):
        closed = origin[tuple(closed_type(arg, made) for arg in args)]
    else:
        closed = tp  # str, int, float, bool, None, Literal[...], UnsetType
    made[tp] = closed
    return closed


def _closed_field(field: msgspec.structs.FieldInfo, made: dict[Any, Any]) -> tuple[Any, ...]:
    """FIELD of a struct for msgspec.defstruct, its type closed and its default kept."""
    closed = closed_type(field.type, made)
    if field.default is not msgspec.NODEFAULT:
        return field.name, closed, field.default
    if field.default_factory is not msgspec.NODEFAULT:
        return field.name, closed, msgspec.field(default_factory=field.default_factory)
    return field.name, closed
