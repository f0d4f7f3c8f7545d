"""Parse and validate a whole catalog document, reporting every problem with its path in the file."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import yaml
from marshmallow import ValidationError

from app.catalog.model import share_rounds_to_zero
from app.errors import RelayError
from schemas.catalog import CatalogSchema

MAX_NODES = 1_000_000  # guards against YAML alias bombs: a catalog this large is not a real one
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class InvalidCatalog(RelayError):
    """The catalog has problems; `details` lists each as "path: message" (never a secret value)."""

    status = 400
    code = "invalid_catalog"

    def __init__(self, problems: list[str]) -> None:
        count = len(problems)
        super().__init__(message=f"the catalog has {count} problem{'s' if count != 1 else ''}", details=problems)
        self.problems = problems


def parse_document(text: str | bytes, fmt: str) -> Any:
    """The document in TEXT as YAML or JSON (FMT `yaml` | `json`); InvalidCatalog saying where it breaks."""
    try:
        if fmt == "json":
            return json.loads(text)
        return yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise InvalidCatalog([f"(document): not valid JSON: {exc.msg} at {where}"]) from exc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        raise InvalidCatalog([f"(document): not valid YAML: {exc.problem or 'syntax error'}{where}"]) from exc
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidCatalog([f"(document): cannot be read ({type(exc).__name__})"]) from exc
    except ValueError as exc:  # an integer of more than 4,300 digits, in JSON or YAML
        raise InvalidCatalog([f"(document): cannot be read: {str(exc)[:120]}"]) from exc


def validate_catalog(raw: Any, env: Mapping[str, str]) -> dict[str, Any]:
    """The loaded catalog (defaults filled in, env references resolved); InvalidCatalog with every problem."""
    if not isinstance(raw, dict):
        raise InvalidCatalog(["(document): must be a mapping with hosts, models, policies, ..."])
    if _too_large(raw):
        raise InvalidCatalog([f"(document): more than {MAX_NODES} values; too large"])
    problems: list[str] = []
    doc: dict[str, Any] | None = None
    try:
        doc = CatalogSchema().load(raw)
    except ValidationError as exc:
        problems.extend(f"{path}: {message}" for path, message in _flatten(exc.messages, ""))
    problems.extend(check_references(raw))
    if doc is not None:
        problems.extend(_resolve_environment(doc, env))
        problems.extend(_starved_pacing(doc))
    if problems or doc is None:
        raise InvalidCatalog(problems)
    return doc


def check_references(raw: dict[str, Any]) -> list[str]:
    """Duplicate names and references to names the document does not define."""
    problems: list[str] = []
    names = {kind: _names(raw, kind, problems) for kind in
             ("hosts", "models", "policies", "teams", "projects", "users", "service_accounts")}
    key_names: dict[str, str] = {}
    for i, host in _items(raw, "hosts"):
        for k, key in _items(host, "keys"):
            name = key.get("name")
            path = f"hosts[{i}].keys[{k}].name"
            if isinstance(name, str):
                if name in key_names:
                    problems.append(f"{path}: duplicate key name {name[:200]!r} (also {key_names[name]})")
                key_names.setdefault(name, path)
    for i, model in _items(raw, "models"):
        for b, binding in _items(model, "bindings"):
            _expect(problems, f"models[{i}].bindings[{b}].host", binding.get("host"), names["hosts"], "host")
    for i, policy in _items(raw, "policies"):
        pool = policy.get("key_pool")
        pool = pool if isinstance(pool, list) else []
        for k, key in enumerate(pool):
            _expect(problems, f"policies[{i}].key_pool[{k}]", key, set(key_names), "host key")
            if isinstance(key, str) and key in pool[:k]:
                problems.append(f"policies[{i}].key_pool[{k}]: {key[:200]!r} is listed twice")
    for i, project in _items(raw, "projects"):
        _expect(problems, f"projects[{i}].team", project.get("team"), names["teams"], "team")
    for kind in ("users", "service_accounts"):
        for i, who in _items(raw, kind):
            _expect(problems, f"{kind}[{i}].policy", who.get("policy"), names["policies"], "policy")
            _expect(problems, f"{kind}[{i}].project", who.get("project"), names["projects"], "project")
            _expect(problems, f"{kind}[{i}].team", who.get("team"), names["teams"], "team")
    return problems


def _starved_pacing(doc: dict[str, Any]) -> list[str]:
    """Paced policies whose share of a rate limit is less than one request or token: their batches never start."""
    problems = []
    for i, policy in enumerate(doc["policies"]):
        if not policy["batch"]["pace"]:
            continue
        for j, limit in enumerate(policy["rate_limits"]):
            why = share_rounds_to_zero(limit.get("requests"), limit.get("tokens"), policy["batch"]["share"])
            if why:
                problems.append(f"policies[{i}].batch.share: {why} (rate_limits[{j}]), so no paced batch item could"
                                " ever start: raise the share or the limit")
    return problems


def expand_env(text: str, env: Mapping[str, str]) -> str:
    """TEXT with ${VAR} and ${VAR:-default} replaced from ENV; KeyError naming an unset variable."""
    def replace(match: re.Match[str]) -> str:
        value = env.get(match.group(1))
        if value:
            return value
        if match.group(2) is not None:
            return match.group(2)
        raise KeyError(match.group(1))

    return _ENV_REF.sub(replace, text)


def _resolve_environment(doc: dict[str, Any], env: Mapping[str, str]) -> list[str]:
    """Expand base_url, read value_env secrets (into `_secret`), and check the URLs."""
    problems = []
    for i, host in enumerate(doc["hosts"]):
        try:
            url = expand_env(host["base_url"], env).rstrip("/")
        except KeyError as exc:
            problems.append(f"hosts[{i}].base_url: environment variable {exc.args[0]} is not set")
            continue
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or _CONTROL.search(url):
            problems.append(f"hosts[{i}].base_url: must be an http:// or https:// URL")
        host["base_url"] = url
        for k, key in enumerate(host["keys"]):
            if "value_env" in key:
                value = env.get(key["value_env"])
                if not value:
                    problems.append(f"hosts[{i}].keys[{k}].value_env: environment variable {key['value_env']}"
                                    " is not set (it is read when the catalog is applied)")
                key["_secret"] = value
            elif "value" in key:
                key["_secret"] = key["value"]
    return problems


def _flatten(messages: Any, path: str) -> Iterator[tuple[str, str]]:
    """(path, message) pairs from marshmallow's nested error dict, paths like models[2].bindings[0].adapter."""
    if isinstance(messages, dict):
        for key, sub in messages.items():
            if key == "_schema":
                sub_path = path
            elif isinstance(key, int):
                sub_path = f"{path}[{key}]"
            else:
                segment = str(key)[:100]
                sub_path = f"{path}.{segment}" if path else segment
            yield from _flatten(sub, sub_path)
    elif isinstance(messages, list):
        for message in messages:
            yield from _flatten(message, path)
    else:
        text = str(messages).rstrip(".")
        yield path or "(document)", text[:1].lower() + text[1:]


def _items(container: Any, kind: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(index, item) for the mapping items of CONTAINER[KIND], skipping what the schema already rejects."""
    items = container.get(kind) if isinstance(container, dict) else None
    for i, item in enumerate(items if isinstance(items, list) else []):
        if isinstance(item, dict):
            yield i, item


def _names(raw: dict[str, Any], kind: str, problems: list[str]) -> set[str]:
    seen: dict[str, int] = {}
    for i, item in _items(raw, kind):
        name = item.get("name")
        if isinstance(name, str):
            if name in seen:
                problems.append(f"{kind}[{i}].name: duplicate name {name[:200]!r} (also {kind}[{seen[name]}])")
            seen.setdefault(name, i)
    return set(seen)


def _expect(problems: list[str], path: str, value: Any, known: set[str], what: str) -> None:
    if isinstance(value, str) and value not in known:
        problems.append(f"{path}: no {what} named {value[:200]!r} in this catalog")


def _too_large(raw: Any) -> bool:
    """True when the document holds more than MAX_NODES values (counted without recursion)."""
    stack, count = [raw], 0
    while stack:
        node = stack.pop()
        count += 1
        if count > MAX_NODES:
            return True
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False
