"""Redaction: anything that looks like a secret (relay keys, tokens, bearer values, provider keys), and the exact
values a process registers (its admin token and secret key), replaced before a line is written. A leaf module:
the runtime registers its secrets here and the logs redact through it, so neither imports the other."""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "[REDACTED]"
_SECRET_PATTERNS = re.compile(
    r"(?P<bearer>\bbearer\s+)[^\s\"',;]+"
    r"|(?P<header>\bx-api-key[\"']?\s*[:=]\s*[\"']?)[^\s\"',;]+"
    r"|\brk_[A-Za-z0-9_\-]{8,}"
    r"|\brt_[A-Za-z0-9_\-.]{8,}"
    r"|\bsk-[A-Za-z0-9_\-]{8,}",
    re.IGNORECASE,
)
_literal_secrets: set[str] = set()


def redact(text: str) -> str:
    """TEXT with anything that looks like a secret, and every registered secret, replaced by [REDACTED]."""
    for secret in _literal_secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return _SECRET_PATTERNS.sub(_replacement, text)


def _replacement(match: re.Match[str]) -> str:
    return (match.group("bearer") or match.group("header") or "") + REDACTED


def register_secrets(values: Iterable[str]) -> None:
    """Redact these exact values too (e.g. the admin token), wherever they appear."""
    _literal_secrets.update(v for v in values if v and len(v) >= 8)
