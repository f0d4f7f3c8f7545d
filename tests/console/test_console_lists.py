"""The console's copies of Relay's lists (item states, final states, shapes) are the Python definitions: the JS has
no build step to import them, so this reads the modules' source and compares."""

from __future__ import annotations

import json
import re
from pathlib import Path

from adapters.base import SHAPES
from schemas.batches import ACTIVE_STATES, FINAL_STATES, ITEM_STATES

STATIC = Path(__file__).resolve().parents[2] / "app" / "console" / "static"


def _array(module: str, name: str) -> list[object]:
    """The JSON-compatible array literal `const NAME = [...]` (exported or not) of MODULE, parsed."""
    text = (STATIC / module).read_text()
    found = re.search(rf"^(?:export )?const {name} = (\[.*?\]);", text, re.S | re.M)
    assert found, f"{module} defines no array {name}"
    return list(json.loads(found.group(1)))


def test_the_consoles_item_states_are_relays_in_the_order_people_read() -> None:
    assert sorted(map(str, _array("ui.js", "ITEM_STATES"))) == sorted(ITEM_STATES)
    assert _array("ui.js", "ITEM_STATES") == [*FINAL_STATES, *reversed(ACTIVE_STATES)]


def test_the_consoles_final_states_are_relays() -> None:
    assert _array("ui.js", "FINAL") == list(FINAL_STATES)


def test_the_consoles_submit_form_offers_every_shape_and_no_other() -> None:
    assert [pair[0] for pair in _array("submit.js", "SHAPES")] == list(SHAPES)  # type: ignore[index]
