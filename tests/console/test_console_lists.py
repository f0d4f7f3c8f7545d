"""The console's copies of Relay's lists (item states, final states) are the Python definitions: the JS has no build
step to import them, so this reads the modules' source and compares. The shapes are no copy: Relay serves them from
its shape registry as /console/shapes.js, which the submit form imports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from adapters.registry import ADAPTERS, SHAPES, openai_batch_endpoints
from schemas.batches import ACTIVE_STATES, FINAL_STATES, ITEM_STATES

STATIC = Path(__file__).resolve().parents[2] / "app" / "console" / "static"


def _array(module: str, name: str, text: str | None = None) -> list[object]:
    """The JSON-compatible array literal `const NAME = [...]` (exported or not) of MODULE (or of TEXT), parsed."""
    text = (STATIC / module).read_text() if text is None else text
    found = re.search(rf"^(?:export )?const {name} = (\[.*?\]);", text, re.S | re.M)
    assert found, f"{module} defines no array {name}"
    return list(json.loads(found.group(1)))


def test_the_consoles_item_states_are_relays_in_the_order_people_read() -> None:
    assert sorted(map(str, _array("ui.js", "ITEM_STATES"))) == sorted(ITEM_STATES)
    assert _array("ui.js", "ITEM_STATES") == [*FINAL_STATES, *reversed(ACTIVE_STATES)]


def test_the_consoles_final_states_are_relays() -> None:
    assert _array("ui.js", "FINAL") == list(FINAL_STATES)


def test_the_consoles_submit_form_offers_every_shape_and_no_other(client) -> None:  # type: ignore[no-untyped-def]
    served = client.get("/console/shapes.js")
    assert served.status_code == 200 and served.mimetype == "text/javascript"
    module = served.get_data(as_text=True)
    assert [pair[0] for pair in _array("shapes.js", "SHAPES", module)] == list(SHAPES)  # type: ignore[index]
    assert _array("shapes.js", "SHAPES", module) == [[shape, ADAPTERS[shape].title] for shape in SHAPES]
    endpoints = re.search(r"^export const SHAPE_OF_ENDPOINT = (\{.*?\});", module, re.M)
    assert endpoints and json.loads(endpoints.group(1)) == openai_batch_endpoints()


def test_the_consoles_scripts_name_no_shape_of_their_own() -> None:
    named = {path.name: [shape for shape in SHAPES if f'"{shape}"' in path.read_text()]
             for path in STATIC.glob("*.js")}
    assert {name: shapes for name, shapes in named.items() if shapes} == {}
    assert 'from "./shapes.js"' in (STATIC / "submit.js").read_text()
