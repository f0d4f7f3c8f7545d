"""The `shape` members' validator: one of the shapes registered in adapters.registry, read at each check."""

from __future__ import annotations

from collections.abc import Iterable

from marshmallow import validate

from adapters.registry import batch_shapes


class RegisteredShape(validate.OneOf):
    """OneOf the batch shapes registered when a value is checked (the registry is the one list: a shape
    registered after the schema was built is accepted, and the OpenAPI document lists the shapes as registered)."""

    def __init__(self, *, error: str | None = None) -> None:
        super().__init__((), error=error)

    @property  # type: ignore[override]
    def choices(self) -> Iterable[str]:
        return batch_shapes()

    @choices.setter
    def choices(self, _: Iterable[str]) -> None:
        """OneOf's constructor sets the choices: ignored, they are the registry's."""

    @property  # type: ignore[override]
    def choices_text(self) -> str:
        return ", ".join(batch_shapes())

    @choices_text.setter
    def choices_text(self, _: str) -> None:
        """Ignored, as for choices."""
