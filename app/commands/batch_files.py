"""The file `relay batches submit` and `estimate` send: its JSON Lines read and checked by line, spliced into a
submit body as they are, and a refused batch's errors told by the file's line numbers."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from app.commands.api_client import ApiError
from app.errors import RelayError


class UnreadableFile(RelayError):
    """The requests file cannot be read or holds no valid JSON Lines."""

    code = "unreadable_file"


def by_file_line(exc: ApiError, path: Path, numbers: Sequence[int]) -> ApiError:
    """A refused batch's errors told by the file's line numbers (blank lines are skipped, so item N is not line
    N + 1), as the console tells them."""
    if exc.code != "invalid_batch" or not isinstance(exc.details, list):
        return exc
    details = [{**d, "line": numbers[d["idx"]]} if isinstance(d, dict) and isinstance(d.get("idx"), int)
               and 0 <= d["idx"] < len(numbers) else d for d in exc.details]
    first = details[0] if details and isinstance(details[0], dict) else {}
    message = exc.message
    if first.get("line") is not None and message.startswith("invalid batch: "):
        message = f"invalid batch: {path}:{first['line']}: " + message.removeprefix("invalid batch: ")
    return ApiError(exc.code, message, details=details, status=exc.status)


def build_body(lines: list[bytes], shape: str, metadata: Any, *, max_cost: Decimal | None = None,
               completion_window: str | None = None) -> bytes:
    """The submit body, splicing each line's JSON as it is (no re-serialising of large files)."""
    head: dict[str, Any] = {"shape": shape}
    if metadata is not None:
        head["metadata"] = metadata
    if max_cost is not None:
        head["max_cost"] = float(max_cost)
    if completion_window is not None:
        head["completion_window"] = completion_window
    prefix = json.dumps(head)[:-1].encode() + b', "requests": ['
    return prefix + b",".join(lines) + b"]}"


def read_lines(path: Path) -> list[tuple[int, bytes]]:
    """Non-blank lines of a JSON Lines file with their line numbers, each checked to be JSON."""
    try:
        data = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    except OSError as exc:
        raise UnreadableFile(message=f"cannot read {path}: {exc.strerror or exc}") from None
    lines = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            json.loads(line)
        except ValueError as exc:
            raise UnreadableFile("invalid_jsonl", f"{path}:{number}: not valid JSON ({exc})") from exc
        lines.append((number, line.strip()))
    if not lines:
        raise UnreadableFile("invalid_jsonl", f"{path}: no requests")
    return lines
