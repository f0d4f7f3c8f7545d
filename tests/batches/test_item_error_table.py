"""docs/item-errors.md lists every code a batch item can end with, and agrees with the code that makes them."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import app.batches.outcomes as outcomes
from adapters.errors import AdapterError
from app.errors import RelayError

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "item-errors.md"
# The modules whose errors a batch item can end with (the pipeline's refusals, the credential and policy rechecks).
RAISERS = ("app.pipeline.routing", "app.pipeline.calls", "app.pipeline.plan", "app.pipeline.ratelimit",
           "app.credentials.errors", "adapters.errors", "app.payload_port")


def table_rows(text: str) -> dict[str, tuple[str, str]]:
    """code -> (state, status) from the page's table."""
    rows = {}
    for line in text.splitlines():
        found = re.match(r"\| `([a-z_]+)` \| (\w+) \| ([^|]+) \|", line)
        if found:
            rows[found.group(1)] = (found.group(2), found.group(3).strip())
    return rows


def literal_outcomes() -> dict[str, tuple[str, int | None]]:
    """code -> (state, status) of every Outcome(state, error, code, status) in outcomes.py whose code is a literal
    (status None where it is not: the upstream's own)."""
    found = {}
    for node in ast.walk(ast.parse(Path(outcomes.__file__).read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Outcome" and len(node.args) == 4:
            state, _, code, status = node.args
            if isinstance(code, ast.Constant) and isinstance(state, ast.Constant):
                found[code.value] = (state.value, status.value if isinstance(status, ast.Constant) else None)
    return found


def error_classes() -> dict[str, int]:
    """code -> status of every RelayError or adapter error class a batch item's error can come from."""
    for name in RAISERS:
        importlib.import_module(name)
    seen: dict[str, int] = {}
    todo: list[type] = [RelayError, AdapterError]  # the adapters' errors reach an item through plan.CrossShape
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__ in RAISERS or cls.__module__ == "app.errors":
            seen.setdefault(cls.code, cls.status)
    return seen


def test_every_code_an_outcome_writes_is_in_the_table_with_its_state_and_status() -> None:
    rows = table_rows(TABLE.read_text())
    written = literal_outcomes()
    assert len(written) >= 10
    for code, (state, status) in written.items():
        assert code in rows, f"{code} is written by app/batches/outcomes.py but missing from docs/item-errors.md"
        shown = str(status) if status is not None else "the upstream's"
        assert rows[code] == (state, shown), f"{code}: the table says {rows[code]}, the code {state} {shown}"


def test_every_code_in_the_table_is_made_by_an_outcome_or_an_error_class_with_the_same_status() -> None:
    rows = table_rows(TABLE.read_text())
    written, classes = literal_outcomes(), error_classes()
    for code, (state, status) in rows.items():
        assert code in written or code in classes, f"docs/item-errors.md lists {code}, which no code makes"
        if code in classes and code not in written:
            assert state == "discarded"
            assert status == str(classes[code]), f"{code}: the table says {status}, its class {classes[code]}"


def test_a_table_row_with_a_wrong_status_is_caught() -> None:
    rows = table_rows("| `worker_lost` | discarded | 503 | ... | maybe |")
    assert rows["worker_lost"] != (literal_outcomes()["worker_lost"][0], str(literal_outcomes()["worker_lost"][1]))
