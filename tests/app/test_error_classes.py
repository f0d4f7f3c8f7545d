"""Errors are classes: each condition has its own status and stable code (docs/architecture.md, house style), and
Relay's JSON error body is built in one place, `RelayError.to_dict`. Read from the source, like the layer rules."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [p for package in ("app", "actors", "adapters") for p in (ROOT / package).rglob("*.py")
           if "fake_upstream" not in p.parts]  # the demo upstream answers in the providers' shapes, not Relay's


def _trees() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), str(path)) for path in SOURCES}


def _error_classes(trees: dict[Path, ast.Module]) -> set[str]:
    """RelayError and every class deriving from it (by name), except those with their own __init__."""
    classes, own_init = {"RelayError"}, set()
    grew = True
    while grew:
        grew = False
        for tree in trees.values():
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name not in classes and any(
                        (b.id if isinstance(b, ast.Name) else getattr(b, "attr", None)) in classes for b in node.bases):
                    classes.add(node.name)
                    grew = True
                    if any(isinstance(s, ast.FunctionDef) and s.name == "__init__" for s in node.body):
                        own_init.add(node.name)
    return classes - own_init


def _called(node: ast.Call) -> str | None:
    return node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)


def _string_codes(trees: dict[Path, ast.Module]) -> list[str]:
    classes = _error_classes(trees)
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or _called(node) not in classes:
                continue
            literal_code = any(k.arg == "code" and isinstance(k.value, ast.Constant) for k in node.keywords)
            if len(node.args) > 1 or literal_code:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def _envelopes(trees: dict[Path, ast.Module]) -> list[str]:
    """Dict literals shaped as Relay's error body: {"error": {"code": ..., "message": ...}}."""
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Dict):
                continue
            for key, value in zip(node.keys, node.values, strict=True):
                inner = {k.value for k in value.keys if isinstance(k, ast.Constant)} if isinstance(value, ast.Dict) \
                    else set()
                if isinstance(key, ast.Constant) and key.value == "error" and {"code", "message"} <= inner <= {
                        "code", "message", "details"}:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_error_is_raised_with_its_code_as_a_string() -> None:
    trees = _trees()
    assert len(_error_classes(trees)) > 50, "the error classes were not found"
    assert not _string_codes(trees), "raise a class with its own code:\n" + "\n".join(_string_codes(trees))


def test_relays_error_body_is_built_only_by_relay_error() -> None:
    assert not _envelopes(_trees()), f"build the body with RelayError.to_dict(): {_envelopes(_trees())}"


def test_the_checks_see_a_string_code_and_a_literal_envelope(tmp_path: Path) -> None:
    source = ('class RelayError(Exception): ...\nclass Gone(RelayError): ...\n'
              'def f():\n    raise Gone("gone_away", "it went")\n'
              'def g():\n    return {"error": {"code": "x", "message": "y"}}\n')
    tree = {ROOT / "app" / "example.py": ast.parse(source)}
    assert _string_codes(tree) == ["app/example.py:4: Gone('gone_away', 'it went')"]
    assert _envelopes(tree) == ["app/example.py:6"]
