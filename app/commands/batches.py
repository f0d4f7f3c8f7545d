"""`relay batches submit|status|results|cancel|list`: a client of a Relay API's /v1/batches over HTTP."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import IO, Any

import requests

from app.errors import RelayError

_SHAPES = ("openai", "anthropic", "openai_responses")
_FINAL = ("completed", "discarded", "cancelled")


class ApiError(RelayError):
    """The Relay API answered with an error (its code and message are passed through)."""

    code = "api_error"


def register(sub: Any) -> None:
    batches = sub.add_parser("batches", help="submit and follow batches through a Relay API")
    cmds = batches.add_subparsers(dest="batches_command", required=True, metavar="COMMAND")
    p = _with_client(cmds.add_parser("submit", help="submit a JSON Lines file of requests (one body per line)"))
    p.add_argument("file", type=Path, help="FILE.jsonl; '-' reads standard input")
    p.add_argument("--shape", required=True, choices=_SHAPES)
    p.add_argument("--metadata", type=json.loads, help='a JSON object, e.g. {"job": "nightly"}')
    p.add_argument("--wait", action="store_true", help="show progress until every item is final")
    p.set_defaults(func=cmd_submit)
    p = _with_client(cmds.add_parser("status", help="show a batch with its counts"))
    p.add_argument("id")
    p.add_argument("--state", help="list items in this state")
    p.add_argument("--limit", type=int, default=20, help="items to list (default 20)")
    p.set_defaults(func=cmd_status)
    p = _with_client(cmds.add_parser("results", help="write a batch's results (JSON Lines) to stdout or --output"))
    p.add_argument("id")
    p.add_argument("--output", "-o", type=Path)
    p.set_defaults(func=cmd_results)
    p = _with_client(cmds.add_parser("cancel", help="cancel a batch"))
    p.add_argument("id")
    p.set_defaults(func=cmd_cancel)
    p = _with_client(cmds.add_parser("list", help="list your batches, newest first"))
    p.add_argument("--limit", type=int, default=20)
    p.set_defaults(func=cmd_list)


def _with_client(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--url", default=os.environ.get("RELAY_URL", "http://127.0.0.1:8080"), help="Relay API base URL")
    p.add_argument("--key", default=os.environ.get("RELAY_KEY"), help="relay key or token (default $RELAY_KEY)")
    return p


def cmd_submit(args: argparse.Namespace) -> int:
    body = build_body(_read_lines(args.file), args.shape, args.metadata)
    batch = _call(args, "POST", "/v1/batches", data=body, headers={"content-type": "application/json"})
    print(batch["id"])
    if not args.wait:
        return 0
    batch = wait_for(args, batch["id"], sys.stderr)
    _print_counts(batch)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"format": "relay", "limit": args.limit}
    if args.state:
        params["state"] = args.state
    _print_json(_call(args, "GET", f"/v1/batches/{args.id}", params=params))
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    response = _request(args, "GET", f"/v1/batches/{args.id}/results", params={"format": "jsonl"}, stream=True)
    out: IO[bytes] = open(args.output, "wb") if args.output else sys.stdout.buffer
    try:
        for chunk in response.iter_content(chunk_size=65536):
            out.write(chunk)
    finally:
        if args.output:
            out.close()
        else:
            out.flush()
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    _print_json(_call(args, "POST", f"/v1/batches/{args.id}/cancel", params={"format": "relay"}))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    _print_json(_call(args, "GET", "/v1/batches", params={"format": "relay", "limit": args.limit}))
    return 0


def build_body(lines: list[bytes], shape: str, metadata: Any) -> bytes:
    """The submit body, splicing each line's JSON as it is (no re-serialising of large files)."""
    head: dict[str, Any] = {"shape": shape}
    if metadata is not None:
        head["metadata"] = metadata
    prefix = json.dumps(head)[:-1].encode() + b', "requests": ['
    return prefix + b",".join(lines) + b"]}"


def _read_lines(path: Path) -> list[bytes]:
    """Non-blank lines of a JSON Lines file, each checked to be JSON (the line number says which is not)."""
    data = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    lines = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            json.loads(line)
        except ValueError as exc:
            raise ApiError("invalid_jsonl", f"{path}:{number}: not valid JSON ({exc})") from exc
        lines.append(line.strip())
    if not lines:
        raise ApiError("invalid_jsonl", f"{path}: no requests")
    return lines


def wait_for(args: argparse.Namespace, batch_id: str, out: IO[str], interval: float = 0.5) -> dict[str, Any]:
    """Poll the batch until it is finished, drawing a progress bar on OUT."""
    while True:
        batch = _call(args, "GET", f"/v1/batches/{batch_id}", params={"format": "relay", "limit": 0})
        out.write("\r" + progress_line(batch))
        out.flush()
        if batch["finished"]:
            out.write("\n")
            return batch
        time.sleep(interval)


def progress_line(batch: dict[str, Any], width: int = 30) -> str:
    """`[#####.....]  50% 500/1000  completed 480  discarded 20  cancelled 0  running 16`."""
    counts, total = batch["counts"], max(1, batch["total"])
    done = sum(counts[s] for s in _FINAL)
    filled = int(width * done / total)
    parts = "  ".join(f"{s} {counts[s]}" for s in (*_FINAL, "running"))
    return f"[{'#' * filled}{'.' * (width - filled)}] {100 * done // total:3d}% {done}/{batch['total']}  {parts}"


def _print_counts(batch: dict[str, Any]) -> None:
    counts = batch["counts"]
    print(" ".join(f"{s}={counts[s]}" for s in _FINAL))


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def _call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    return _request(args, method, path, **kwargs).json()


def _request(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> requests.Response:
    """One HTTP call to the Relay API; API errors become ApiError with the API's code and message."""
    if not args.key:
        raise ApiError("missing_key", "pass --key or set RELAY_KEY")
    headers = {"authorization": f"Bearer {args.key}", **kwargs.pop("headers", {})}
    try:
        response = requests.request(method, args.url.rstrip("/") + path, headers=headers, timeout=300, **kwargs)
    except requests.RequestException as exc:
        raise ApiError("api_unreachable", f"cannot reach the Relay API at {args.url}: {exc}") from exc
    if response.status_code >= 400:
        try:
            error = response.json()["error"]
            code, message = error["code"], error["message"] + _details(error.get("details"))
        except (ValueError, KeyError, TypeError):
            code, message = "http_error", f"HTTP {response.status_code}"
        raise ApiError(code, message)
    return response


def _details(details: Any) -> str:
    """Item errors of a rejected batch, one per line (the first 20)."""
    if not isinstance(details, list):
        return ""
    lines = [f"\n  requests[{d.get('idx')}].{d.get('field')}: {d.get('message')}" if d.get("idx") is not None
             else f"\n  {d.get('field')}: {d.get('message')}" for d in details[:20] if isinstance(d, dict)]
    more = f"\n  ... and {len(details) - 20} more" if len(details) > 20 else ""
    return "".join(lines) + more
