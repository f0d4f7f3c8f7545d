"""One owner for a batch item's life: only app/batches/lifecycle.py writes `batch_items.state` (read from the source:
every SQL text in the runtime packages that updates, inserts or copies the column), and the engine knows no API
by name."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIFECYCLE = ROOT / "app" / "batches" / "lifecycle.py"
_UPDATE = re.compile(r"UPDATE\s+batch_items(?:\s+(?:AS\s+)?(?!SET\b)\w+)?\s+SET\s+(.*?)(?=\bFROM\b|\bWHERE\b|"
                     r"\bRETURNING\b|$)", re.IGNORECASE | re.DOTALL)
_COLUMNS = re.compile(r"(?:INSERT\s+INTO|COPY)\s+batch_items\s*\(([^)]*)\)", re.IGNORECASE)
_SETS_STATE = re.compile(r"(?:^|,)\s*(?:\w+\.)?state\s*=", re.IGNORECASE)
_NAMES_STATE = re.compile(r"(?:^|,)\s*state\s*(?:,|$)", re.IGNORECASE)


def _texts(path: Path) -> list[str]:
    """Every string in PATH's code, an f-string with its placeholders as `{}`."""
    texts, parts = [], set()  # parts: an f-string's pieces, read with it
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.JoinedStr):
            texts.append("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values))
            parts |= {id(v) for v in node.values}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts:
            texts.append(node.value)
    return texts


def state_writes(path: Path) -> list[str]:
    """The SQL texts in PATH that write batch_items.state."""
    found = []
    for text in _texts(path):
        sets = [m.group(1) for m in _UPDATE.finditer(text)]
        columns = [m.group(1) for m in _COLUMNS.finditer(text)]
        if any(_SETS_STATE.search(s) for s in sets) or any(_NAMES_STATE.search(c) for c in columns):
            found.append(" ".join(text.split()))
    return found


def _runtime_sources() -> list[Path]:
    return sorted(p for package in ("app", "actors") for p in (ROOT / package).rglob("*.py"))


def test_only_the_lifecycle_module_writes_an_items_state() -> None:
    writers = {str(p.relative_to(ROOT)): w for p in _runtime_sources() if p != LIFECYCLE and (w := state_writes(p))}
    assert writers == {}


def test_the_rule_sees_the_lifecycles_own_writes_the_claims_and_the_final_write() -> None:
    writes = state_writes(LIFECYCLE)
    assert len(writes) == 3, writes
    assert sum("SET state = 'running'" in w for w in writes) == 2
    assert sum("SET state = f.state" in w for w in writes) == 1


def test_the_rule_reads_sql_in_every_spelling_of_a_state_write(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        'A = "UPDATE batch_items SET error = NULL, state = %s WHERE idx = 1"\n'
        'B = f"update batch_items AS i set started_at = now(), i.state = {X} FROM batches b"\n'
        'C = "INSERT INTO batch_items (batch_id, idx, state) VALUES (%s, %s, %s)"\n'
        'D = "COPY batch_items (batch_id, state) FROM STDIN"\n'
        'E = "UPDATE batch_items i SET error = NULL WHERE i.state = \'queued\'"\n'  # reads the state: allowed
        'F = "COPY batch_items (batch_id, idx, model) FROM STDIN"\n'
        'G = "UPDATE batches SET status = \'cancelled\', state = 1"\n')
    assert len(state_writes(sample)) == 4


_API_NAMES = {"openai", "anthropic", "relay"}


def api_branches(path: Path) -> list[int]:
    """Lines of PATH that compare a batch's `api` (a `[...]["api"]` or a name `api`) with an API's name."""
    def is_api(node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id == "api") or (
            isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "api")

    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            named = any(isinstance(o, ast.Constant) and o.value in _API_NAMES for o in operands)
            if named and any(is_api(o) for o in operands):
                lines.append(node.lineno)
    return lines


def test_the_engine_and_the_webhooks_never_branch_on_the_api_that_created_a_batch() -> None:
    sources = [p for package in ("batches", "webhooks") for p in (ROOT / "app" / package).rglob("*.py")]
    branches = {str(p.relative_to(ROOT)): lines for p in sources if (lines := api_branches(p))}
    assert branches == {}


def test_the_api_rule_sees_a_branch_on_the_api(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('a = batch["api"] == "openai"\nb = "anthropic" != row["api"]\nc = api == "relay"\n'
                      'd = shape == "openai"\ne = batch["api"] == other\n')
    assert api_branches(sample) == [1, 2, 3]


def engine_sql_imports(path: Path) -> list[int]:
    """Lines of PATH that import the engine's SQL modules (app.batches.store and its siblings *_store)."""
    def sql(name: str) -> bool:
        return name.startswith("app.batches.") and name.rpartition(".")[2].endswith("store")

    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            if any(sql(n) for n in names):
                lines.append(node.lineno)
        elif isinstance(node, ast.Import) and any(sql(a.name) for a in node.names):
            lines.append(node.lineno)
    return lines


def test_the_compatible_apis_read_the_engine_through_its_public_reads_never_its_sql() -> None:
    sources = [*(ROOT / "app" / "compat").rglob("*.py"), *(ROOT / "app" / "api" / "compat").rglob("*.py")]
    found = {str(p.relative_to(ROOT)): lines for p in sources if (lines := engine_sql_imports(p))}
    assert found == {}


def test_the_sql_rule_sees_every_spelling_of_an_import_of_the_engines_store(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from app.batches import store\nfrom app.batches.store import get_batch\n"
                      "import app.batches.operator_store\nfrom app.batches import reads\n"
                      "from app.compat.files import store\n")
    assert engine_sql_imports(sample) == [1, 2, 3]
