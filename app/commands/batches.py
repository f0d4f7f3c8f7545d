"""`relay batches submit|status|results|cancel|delete|list`: a client of a Relay API's /v1/batches over HTTP; and
`relay batches purge` for operators, straight on the database and the payload directory.

Exit codes: 0 done; 1 an error (the API's code, message and field messages on stderr); 3 `submit --wait` saw the
batch finish with items that did not complete (discarded or cancelled).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import requests

from app.batches.retention import purge_batches
from app.commands.catalog import cli_runtime
from app.errors import RelayError
from schemas.durations import DurationError, parse_duration

_SHAPES = ("openai", "anthropic", "openai_responses")
_FINAL = ("completed", "discarded", "cancelled")
EXIT_NOT_ALL_COMPLETED = 3


class ApiError(RelayError):
    """The Relay API answered with an error (its code, message and details are passed through)."""

    code = "api_error"


class UnreadableFile(RelayError):
    """The requests file cannot be read or holds no valid JSON Lines."""

    code = "unreadable_file"


def register(sub: Any) -> None:
    batches = sub.add_parser("batches", help="submit and follow batches through a Relay API")
    cmds = batches.add_subparsers(dest="batches_command", required=True, metavar="COMMAND")
    p = _with_client(cmds.add_parser("submit", help="submit a JSON Lines file of requests (one body per line)"))
    p.add_argument("file", type=Path, help="FILE.jsonl; '-' reads standard input")
    p.add_argument("--shape", required=True, choices=_SHAPES)
    p.add_argument("--metadata", type=json.loads, help='a JSON object, e.g. {"job": "nightly"}')
    p.add_argument("--wait", action="store_true", help="show progress until every item is final; exits 3 when"
                   " some items did not complete (discarded or cancelled)")
    p.set_defaults(func=cmd_submit)
    p = _with_client(cmds.add_parser("status", help="show a batch with its counts"))
    p.add_argument("id")
    p.add_argument("--state", help="list items in this state")
    p.add_argument("--limit", type=int, default=20, help="items per page (default 20, at most 1000)")
    p.add_argument("--after", type=int, default=-1, metavar="IDX",
                   help="list items after this idx (`items_next_after` of the previous page)")
    p.add_argument("--all", action="store_true", help="list every item, page after page")
    p.set_defaults(func=cmd_status)
    p = _with_client(cmds.add_parser("results", help="write a batch's results (JSON Lines) to stdout or --output"))
    p.add_argument("id")
    p.add_argument("--output", "-o", type=Path)
    p.set_defaults(func=cmd_results)
    p = _with_client(cmds.add_parser("cancel", help="cancel a batch"))
    p.add_argument("id")
    p.set_defaults(func=cmd_cancel)
    p = _with_client(cmds.add_parser("delete", help="delete a finished batch with its stored requests and responses"))
    p.add_argument("id")
    p.set_defaults(func=cmd_delete)
    p = _with_client(cmds.add_parser("list", help="list your batches, newest first"))
    p.add_argument("--limit", type=int, default=20, help="batches per page (default 20, at most 100)")
    p.add_argument("--after", metavar="CURSOR", help="the page after this one (`next_cursor` of the previous page)")
    p.set_defaults(func=cmd_list)
    p = cmds.add_parser("purge", help="(operators, on the database) delete every batch finished before a date,"
                                      " with its payload files; usage events stay")
    p.add_argument("--finished-before", required=True, type=_cutoff, metavar="DATE",
                   help="an RFC 3339 date or time (UTC unless it says otherwise), or an age such as 30d")
    p.add_argument("--dry-run", action="store_true", help="count what would be purged; delete nothing")
    p.set_defaults(func=cmd_purge)


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
    return 0 if batch["counts"]["completed"] == batch["total"] else EXIT_NOT_ALL_COMPLETED


def cmd_status(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"format": "relay", "limit": args.limit, "after": args.after}
    if args.state:
        params["state"] = args.state
    batch = _call(args, "GET", f"/v1/batches/{args.id}", params=params)
    while args.all and batch["items_next_after"] is not None:
        page = _call(args, "GET", f"/v1/batches/{args.id}", params={**params, "after": batch["items_next_after"]})
        batch["items"] += page["items"]
        batch["items_next_after"] = page["items_next_after"]
    _print_json(batch)
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    response = _request(args, "GET", f"/v1/batches/{args.id}/results", params={"format": "jsonl"}, stream=True)
    write_stream(response, args.output)
    return 0


def write_stream(response: requests.Response, output: Path | None) -> None:
    """A streamed answer's body to OUTPUT, or to standard output."""
    out: IO[bytes] = open(output, "wb") if output else sys.stdout.buffer
    try:
        for chunk in response.iter_content(chunk_size=65536):
            out.write(chunk)
    finally:
        if output:
            out.close()
        else:
            out.flush()


def cmd_cancel(args: argparse.Namespace) -> int:
    _print_json(_call(args, "POST", f"/v1/batches/{args.id}/cancel", params={"format": "relay"}))
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    _print_json(_call(args, "DELETE", f"/v1/batches/{args.id}"))
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    with cli_runtime() as runtime:
        report = purge_batches(runtime, args.finished_before, dry_run=args.dry_run)
    verb = "would purge" if args.dry_run else "purged"
    print(f"{verb} {report.batches} batches ({report.items} items) finished before"
          f" {args.finished_before.isoformat()}; {'would remove' if args.dry_run else 'removed'}"
          f" {report.stray_folders} stray payload folders")
    if report.left_behind:
        print(f"relay: {report.left_behind} payload folders could not be removed; the next purge tries again",
              file=sys.stderr)
        return 1
    return 0


def _cutoff(text: str) -> datetime:
    """`2026-01-31`, `2026-01-31T12:00:00+02:00` (no zone: UTC), or an age such as `30d` (that long ago)."""
    try:
        return datetime.now(UTC) - timedelta(seconds=parse_duration(text))
    except DurationError:
        pass
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date, a time or an age: {text!r} (e.g. 2026-01-31 or 30d)") \
            from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def cmd_list(args: argparse.Namespace) -> int:
    params = {"format": "relay", "limit": args.limit, **({"cursor": args.after} if args.after else {})}
    _print_json(_call(args, "GET", "/v1/batches", params=params))
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
        lines.append(line.strip())
    if not lines:
        raise UnreadableFile("invalid_jsonl", f"{path}: no requests")
    return lines


def wait_for(args: argparse.Namespace, batch_id: str, out: IO[str], interval: float = 0.5) -> dict[str, Any]:
    """Poll the just-submitted batch until it is finished, drawing a progress bar (with rate and ETA) on OUT."""
    started = time.monotonic()
    while True:
        batch = _call(args, "GET", f"/v1/batches/{batch_id}", params={"format": "relay", "limit": 0})
        elapsed = time.monotonic() - started
        out.write("\r" + progress_line(batch, rate=_done(batch) / elapsed if elapsed > 0 else None))
        out.flush()
        if batch["finished"]:
            out.write("\n")
            return batch
        time.sleep(interval)


def progress_line(batch: dict[str, Any], width: int = 30, rate: float | None = None) -> str:
    """`[#####.....]  50% 500/1000  41.7/s  ETA 0:12  completed 480  discarded 20  cancelled 0  running 16`;
    RATE is items made final per second since the submit (no rate or ETA until there is one)."""
    counts, total = batch["counts"], max(1, batch["total"])
    done = _done(batch)
    filled = int(width * done / total)
    speed = f"{rate:.1f}/s  ETA {_clock((batch['total'] - done) / rate)}" if rate else "-/s  ETA -"
    parts = "  ".join(f"{s} {counts[s]}" for s in (*_FINAL, "running"))
    return (f"[{'#' * filled}{'.' * (width - filled)}] {100 * done // total:3d}% {done}/{batch['total']}  {speed}"
            f"  {parts}")


def _done(batch: dict[str, Any]) -> int:
    return sum(batch["counts"][s] for s in _FINAL)


def _clock(seconds: float) -> str:
    """`0:07`, `12:30`, `2:05:00`."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


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
            code, message, details = str(error["code"]), str(error["message"]), error.get("details")
        except (ValueError, KeyError, TypeError):
            code, message, details = "http_error", f"HTTP {response.status_code}", None
        raise ApiError(code, message, details=details)
    return response
