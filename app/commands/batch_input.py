"""The requests file of `relay batches submit` and `estimate`: JSON Lines of request bodies (Relay's format, with
`--shape`), or OpenAI's batch input file (`{custom_id, method, url, body}` a line), recognised by its lines or named
with `--format openai`. Either way the estimate is asked of the Relay submit the file amounts to; an OpenAI file is
then submitted through the OpenAI-compatible API (`POST /v1/files`, `POST /v1/batches`), so its results keep the
custom_ids, as the console does."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from adapters.registry import SHAPES, openai_batch_endpoints
from app.errors import RelayError

FORMATS = ("auto", "relay", "openai")
OPENAI_MEMBERS = frozenset({"custom_id", "method", "url", "body"})


def _either(names: tuple[str, ...]) -> str:
    """NAMES as prose: `a, b or c`."""
    return " or ".join(filter(None, (", ".join(names[:-1]), names[-1])))


class UnreadableFile(RelayError):
    """The requests file cannot be read or holds no valid JSON Lines."""

    code = "unreadable_file"


class InvalidJsonl(UnreadableFile):
    """A line of the requests file is not JSON, or the file holds no request."""

    code = "invalid_jsonl"


class InvalidRequestsFile(RelayError):
    """The file's format and the options disagree: an OpenAI input file naming no single endpoint Relay batches, a
    Relay file without --shape, or an option the OpenAI-compatible API does not take."""

    code = "invalid_requests_file"


@dataclass(frozen=True)
class RequestsFile:
    """A read requests file: its non-blank lines (line number, raw JSON) and, for OpenAI's format, the endpoint."""

    path: Path
    lines: list[tuple[int, bytes]]
    shape: str
    openai_endpoint: str | None = None  # set for an OpenAI batch input file
    original: tuple[bytes, ...] = ()  # an OpenAI file's own lines, uploaded as they are

    @property
    def numbers(self) -> list[int]:
        return [number for number, _ in self.lines]


def read_requests(path: Path, fmt: str, shape: str | None) -> RequestsFile:
    """PATH read and told apart: OpenAI's input format when FMT says so, or (auto) when every line is one."""
    lines = read_lines(path)
    values = [json.loads(raw) for _, raw in lines]
    openai = fmt == "openai" or (fmt == "auto" and all(_openai_line(v) for v in values))
    if not openai:
        if shape is None:
            raise InvalidRequestsFile(message=f"{path}: a file of request bodies needs --shape ({_either(SHAPES)});"
                                              " OpenAI's batch input format names it in each line")
        return RequestsFile(path, lines, shape)
    endpoints = sorted({str(v.get("url")) if isinstance(v, dict) else "?" for v in values})
    endpoint, shape_of_endpoint = endpoints[0] if len(endpoints) == 1 else None, openai_batch_endpoints()
    if endpoint not in shape_of_endpoint:
        raise InvalidRequestsFile(message=f"{path}: an OpenAI batch input file names one endpoint in every line's url:"
                                          f" {' or '.join(shape_of_endpoint)} (this one names {', '.join(endpoints)})")
    if shape is not None and shape != shape_of_endpoint[endpoint]:
        raise InvalidRequestsFile(message=f"{path}: its lines are for {endpoint}, shape"
                                          f" {shape_of_endpoint[endpoint]}, not --shape {shape}")
    bodies = [(number, json.dumps(v.get("body") if isinstance(v, dict) else v).encode())
              for (number, _), v in zip(lines, values, strict=True)]
    return RequestsFile(path, bodies, shape_of_endpoint[endpoint], openai_endpoint=endpoint,
                        original=tuple(raw for _, raw in lines))


def check_openai_options(requests: RequestsFile, max_cost: Decimal | None, completion_window: str | None,
                         max_cost_mode: str | None = None) -> None:
    """The OpenAI-compatible API takes neither a spend cap nor Relay's deadline (its window is 24 h)."""
    if requests.openai_endpoint is None:
        return
    given = [name for name, value in (("--max-cost", max_cost), ("--max-cost-mode", max_cost_mode),
                                      ("--completion-window", completion_window)) if value]
    if given:
        raise InvalidRequestsFile(message=f"{requests.path}: an OpenAI batch input file goes through the"
                                          f" OpenAI-compatible API, which takes no {' or '.join(given)}; give the"
                                          " request bodies alone (with --shape) to use them")


def _openai_line(value: Any) -> bool:
    return isinstance(value, dict) and {"custom_id", "body"} <= value.keys() <= OPENAI_MEMBERS


def build_body(lines: list[bytes], shape: str, metadata: Any, *, max_cost: Decimal | None = None,
               completion_window: str | None = None, max_cost_mode: str | None = None) -> bytes:
    """The submit body, splicing each line's JSON as it is (no re-serialising of large files)."""
    head: dict[str, Any] = {"shape": shape}
    if metadata is not None:
        head["metadata"] = metadata
    if max_cost is not None:
        head["max_cost"] = float(max_cost)
    if max_cost_mode is not None:
        head["max_cost_mode"] = max_cost_mode
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
            raise InvalidJsonl(message=f"{path}:{number}: not valid JSON ({exc})") from exc
        lines.append((number, line.strip()))
    if not lines:
        raise InvalidJsonl(message=f"{path}: no requests")
    return lines
