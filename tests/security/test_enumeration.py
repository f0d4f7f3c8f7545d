"""Nothing tells a stranger whether a batch exists: an unknown id and someone else's id get the same answer, byte
for byte apart from the request id, in comparable time; and secrets are compared in constant time or found by a
hash lookup, never with `==`."""

from __future__ import annotations

import ast
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devtools.processes import ROOT
from devtools.stack import Stack

pytestmark = pytest.mark.integration

ROUTES = [("GET", "/v1/batches/{id}"), ("GET", "/v1/batches/{id}/results"), ("POST", "/v1/batches/{id}/cancel"),
          ("DELETE", "/v1/batches/{id}")]
VARYING_HEADERS = {"x-request-id", "request-id", "date"}  # request-id: the same id, named as the SDKs read it


@pytest.fixture(scope="module")
def foreign_batch(security_stack: Stack, issue: Callable[..., dict[str, Any]]) -> str:
    owner = issue("key", "svc-b")
    return security_stack.submit(owner["secret"], "foreign", 3)


@pytest.fixture(scope="module")
def stranger(issue: Callable[..., dict[str, Any]]) -> str:
    return str(issue("key", "svc-a")["secret"])


def _answer(stack: Stack, secret: str, method: str, path: str) -> tuple[int, bytes, dict[str, str]]:
    res = stack.call(secret, method, path)
    headers = {k.lower(): v for k, v in res.headers.items() if k.lower() not in VARYING_HEADERS}
    return res.status_code, res.get_data(), headers


@pytest.mark.parametrize(("method", "route"), ROUTES)
def test_an_unknown_id_and_someone_elses_id_get_byte_identical_answers(security_stack: Stack, foreign_batch: str,
                                                                       stranger: str, method: str,
                                                                       route: str) -> None:
    foreign = _answer(security_stack, stranger, method, route.format(id=foreign_batch))
    for unknown in (str(uuid.uuid4()), "not-a-uuid", foreign_batch.upper(), foreign_batch.replace("-", "")):
        if unknown in (foreign_batch.upper(), foreign_batch.replace("-", "")):
            pass  # other spellings of the same id: still not the stranger's
        assert _answer(security_stack, stranger, method, route.format(id=unknown)) == foreign
    assert foreign[0] == 404


def test_unknown_and_foreign_ids_take_comparable_time(security_stack: Stack, foreign_batch: str,
                                                      stranger: str) -> None:
    """Interleaved requests, compared by their spread rather than a threshold: the two latency ranges overlap
    and neither median lies outside the other's range."""
    path = "/v1/batches/{id}"
    unknown_ids = [str(uuid.uuid4()) for _ in range(60)]
    timings: dict[str, list[float]] = {"unknown": [], "foreign": []}
    for _ in range(5):  # warm up both paths (connections, caches)
        security_stack.call(stranger, "GET", path.format(id=foreign_batch))
        security_stack.call(stranger, "GET", path.format(id=unknown_ids[0]))
    for unknown in unknown_ids:
        for kind, batch_id in (("unknown", unknown), ("foreign", foreign_batch)):
            started = time.perf_counter()
            res = security_stack.call(stranger, "GET", path.format(id=batch_id))
            timings[kind].append(time.perf_counter() - started)
            assert res.status_code == 404
    unknown, foreign = sorted(timings["unknown"]), sorted(timings["foreign"])
    assert max(unknown[0], foreign[0]) <= min(unknown[-1], foreign[-1])  # the ranges overlap
    assert unknown[0] <= statistics.median(foreign) <= unknown[-1]
    assert foreign[0] <= statistics.median(unknown) <= foreign[-1]


SECRET_NAMES = ("admin_token", "secret_key", "signature", "secret", "token", "key_hash", "password")


def _compared_with_equality(source: str) -> list[str]:
    """`==` / `!=` comparisons in SOURCE where one side names a secret (attribute, variable or call)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare) or not any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
            continue
        for side in (node.left, *node.comparators):
            names = {n.attr for n in ast.walk(side) if isinstance(n, ast.Attribute)}
            names |= {n.id for n in ast.walk(side) if isinstance(n, ast.Name)}
            if any(secret in name.lower() for name in names for secret in SECRET_NAMES):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_secrets_are_compared_in_constant_time_or_found_by_hash_never_with_equality() -> None:
    modules = [ROOT / "app" / "auth.py", ROOT / "app" / "api" / "admin_auth.py", ROOT / "app" / "api" / "usage.py",
               ROOT / "app" / "credentials" / "tokens.py", ROOT / "app" / "credentials" / "keys.py"]
    problems = {str(m.relative_to(ROOT)): _compared_with_equality(m.read_text()) for m in modules}
    assert not {m: p for m, p in problems.items() if p}
    text = {m.name: m.read_text() for m in modules}
    assert "hmac.compare_digest" in text["admin_auth.py"] and "hmac.compare_digest" in text["usage.py"]
    assert "hmac.compare_digest" in text["tokens.py"]  # the token signature
    assert "key_values.get(key_hash)" in text["auth.py"]  # relay keys: a lookup by SHA-256, never a comparison


def test_the_equality_scan_does_catch_a_secret_compared_with_equality() -> None:
    assert _compared_with_equality("if token == settings.admin_token:\n    pass\n")
    assert _compared_with_equality("ok = sig != signature")
    assert not _compared_with_equality("ok = hmac.compare_digest(a, b)\nx = state == 'revoked'")


def test_every_app_module_is_free_of_equality_checks_on_secrets() -> None:
    problems = {}
    for module in sorted((ROOT / "app").rglob("*.py")):  # the fake upstream (devtools/) checks its own fake keys
        name = str(module.relative_to(ROOT))
        found = _compared_with_equality(Path(module).read_text())
        if found:
            problems[name] = found
    assert not problems, problems
