"""`relay batches submit|estimate|status|results|rerun|cancel|delete|list`: a client of a Relay API's /v1/batches
over HTTP; and `relay batches purge` for operators, straight on the database and the payload directory.

Output is for people (a summary, a table) unless `--json` asks for the API's answers. `submit` prints the estimate
first and asks before a large spend (the rule: app/commands/batch_estimate.py). Exit codes: 0 done; 1 an error (the
API's code, message and field messages on stderr; also a submit not confirmed); 3 `--wait` saw the batch finish
with items that did not complete (discarded or cancelled).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import requests

from adapters.registry import SHAPES
from app.commands.api_client import ApiError, hint_for_admin_token, request
from app.commands.batch_estimate import confirm, dollars, estimate_lines
from app.commands.batch_input import (
    FORMATS,
    RequestsFile,
    build_body,
    check_openai_options,
    read_requests,
)
from app.commands.batch_purge import cmd_purge, purge_arguments
from app.commands.batch_views import batch_state, batch_summary, batches_table, items_table
from app.commands.batch_wait import interrupted, wait_for
from app.commands.output import print_json
from app.settings import ClientSettings
from schemas.batches import FINAL_STATES, MAX_COST_MODES

EXIT_NOT_ALL_COMPLETED = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell tool stopped by Ctrl-C
# The console's and the API's words for a list's state filter, as the API's status and finished arguments.
LIST_STATES = {"active": {"status": "queued", "finished": "false"}, "done": {"status": "queued", "finished": "true"},
               "cancelled": {"status": "cancelled"}}


def register(sub: Any) -> None:
    batches = sub.add_parser("batches", help="submit and follow batches through a Relay API")
    cmds = batches.add_subparsers(dest="batches_command", required=True, metavar="COMMAND")
    p = _with_client(cmds.add_parser("submit", help="submit a JSON Lines file of requests (one body per line, or"
                                                    " OpenAI's batch input format)"))
    _with_file(p)
    p.add_argument("--metadata", type=json.loads, help='a JSON object, e.g. {"job": "nightly"}')
    p.add_argument("--wait", action="store_true", help="show progress until every item is final (asking again"
                   " with growing pauses while the API does not answer); exits 3 when some items did not complete")
    _with_limits(p)
    p.add_argument("--yes", "-y", action="store_true", help="submit without asking, whatever the estimate says")
    p.add_argument("--confirm-above", type=dollars, metavar="DOLLARS",
                   help="ask before submitting a batch whose cost bound is above this (default 1.00, or"
                        " $RELAY_CONFIRM_ABOVE); without a terminal to ask, refuse unless --yes")
    p.add_argument("--no-estimate", action="store_true",
                   help="submit without asking for the estimate first (and so without the confirmation)")
    p.set_defaults(func=cmd_submit)
    p = _with_client(cmds.add_parser("estimate", help="what submitting the file would cost and how long it would"
                                                      " take; nothing is stored or run"))
    _with_file(p)
    p.add_argument("--metadata", type=json.loads, help='a JSON object, e.g. {"job": "nightly"}')
    _with_limits(p)
    p.set_defaults(func=cmd_estimate)
    p = _with_client(cmds.add_parser("rerun", help="a new batch of a finished batch's discarded items (or those"
                                                   " with the given error codes), with their original requests"))
    p.add_argument("id")
    p.add_argument("--codes", type=_codes, metavar="CODE,...",
                   help="re-run the discarded or cancelled items with these error codes (e.g."
                        " rate_limited,all_keys_failed) instead of every discarded item")
    p.add_argument("--max-cost", type=dollars, metavar="DOLLARS", help="the new batch's spend cap (default: the"
                                                                      " source batch's)")
    p.add_argument("--metadata", type=json.loads, help="the new batch's metadata (default: the source batch's)")
    p.add_argument("--force", action="store_true", help="re-run the items even when a re-run of this batch already"
                   " holds exactly them (without it, that is refused naming the existing re-run)")
    p.add_argument("--wait", action="store_true", help="show progress until every item is final, as submit --wait")
    p.set_defaults(func=cmd_rerun)
    p = _with_client(cmds.add_parser("status", help="show a batch with its counts"))
    p.add_argument("id")
    p.add_argument("--state", help="list items in this state")
    p.add_argument("--limit", type=int, default=20, help="items per page (default 20, at most 1000)")
    p.add_argument("--after", type=int, default=-1, metavar="IDX",
                   help="list items after this idx (`items_next_after` of the previous page)")
    p.add_argument("--all", action="store_true", help="list every item, page after page")
    p.add_argument("--custom-id", help="list items whose custom_id starts with this")
    p.set_defaults(func=cmd_status)
    p = _with_client(cmds.add_parser("results", help="write a batch's results (JSON Lines) to stdout or --output"))
    p.add_argument("id")
    p.add_argument("--output", "-o", type=Path)
    p.add_argument("--merged", action="store_true", help="the merged results of the batch's re-run chain: one"
                                                         " entry per original item, its latest attempt")
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
    p.add_argument("--state", choices=tuple(LIST_STATES), help="active (items queued or running), done, cancelled")
    p.add_argument("--search", help="a batch id, or text in the batches' metadata (any case)")
    p.set_defaults(func=cmd_list)
    p = cmds.add_parser("purge", help="(operators, on the database) delete every batch finished before a date,"
                                      " with its payload files; usage events stay (`relay usage purge` folds them)")
    purge_arguments(p, "--finished-before", "purged")
    p.set_defaults(func=cmd_purge)


def _with_client(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    client = ClientSettings.from_env()
    p.add_argument("--url", default=client.url, help="Relay API base URL (default $RELAY_URL)")
    p.add_argument("--key", default=client.key, help="relay key or token (default $RELAY_KEY)")
    p.add_argument("--json", action="store_true", help="print the API's answer as JSON (for scripts)")
    return p


def _with_file(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path, help="FILE.jsonl; '-' reads standard input")
    p.add_argument("--shape", choices=SHAPES, help="the shape of the request bodies (OpenAI's batch input format"
                                                   " names it in each line's url)")
    p.add_argument("--format", choices=FORMATS, default="auto", help="relay: a request body a line; openai: OpenAI's"
                   " batch input format ({custom_id, method, url, body} a line); auto (the default): told by the lines")


def _with_limits(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-cost", type=dollars, metavar="DOLLARS", help="a spend cap: once the batch's recorded cost"
                   " reaches it, items not started end discarded `budget_exceeded` (its models must be priced)")
    p.add_argument("--max-cost-mode", choices=MAX_COST_MODES, help="how the spend cap holds: hard (the default)"
                   " reserves each item's cost bound before it starts, so the cap is never passed, and an item without"
                   " an output limit cannot run; soft lets the items in flight pass it")
    p.add_argument("--completion-window", metavar="DURATION", help="a deadline such as 2h: items not started by"
                                                                   " then end discarded `expired` (the estimate says"
                                                                   " how many would)")


def _codes(text: str) -> list[str]:
    codes = [code.strip() for code in text.split(",") if code.strip()]
    if not codes:
        raise argparse.ArgumentTypeError("name at least one error code, e.g. rate_limited,all_keys_failed")
    return codes


def cmd_submit(args: argparse.Namespace) -> int:
    requests_file, body = _requests_body(args)
    numbers = requests_file.numbers
    if not args.no_estimate:
        estimate = _estimate(args, body, numbers)
        if estimate is not None:
            print("\n".join(estimate_lines(estimate)), file=sys.stderr)
        confirm(args, estimate, interactive=str(args.file) != "-" and sys.stdin.isatty())
    try:
        batch = (_submit_openai(args, requests_file) if requests_file.openai_endpoint else
                 _call(args, "POST", "/v1/batches", data=body, headers={"content-type": "application/json"}))
    except ApiError as exc:
        raise by_file_line(exc, args.file, numbers) from None
    print(batch["id"])
    return follow(args, batch, "submitted")


def _requests_body(args: argparse.Namespace) -> tuple[RequestsFile, bytes]:
    """The requests file, and the Relay submit body it amounts to (what the estimate is asked of)."""
    requests_file = read_requests(args.file, args.format, args.shape)
    check_openai_options(requests_file, args.max_cost, args.completion_window, args.max_cost_mode)
    body = build_body([text for _, text in requests_file.lines], requests_file.shape, args.metadata,
                      max_cost=args.max_cost, completion_window=args.completion_window,
                      max_cost_mode=args.max_cost_mode)
    return requests_file, body


def _submit_openai(args: argparse.Namespace, requests_file: RequestsFile) -> dict[str, Any]:
    """An OpenAI batch input file through the OpenAI-compatible API: uploaded, a batch created from it for its
    endpoint; the batch as Relay's API shows it."""
    content = b"\n".join(requests_file.original) + b"\n"
    uploaded = _call(args, "POST", "/v1/files", data={"purpose": "batch"},
                     files={"file": (requests_file.path.name, content, "application/jsonl")})
    create = {"input_file_id": uploaded["id"], "endpoint": requests_file.openai_endpoint, "completion_window": "24h",
              **({"metadata": args.metadata} if args.metadata is not None else {})}
    created = _call(args, "POST", "/v1/batches", json=create)
    return _call(args, "GET", f"/v1/batches/{created['id']}", params={"format": "relay", "limit": 0})  # type: ignore[no-any-return]


def follow(args: argparse.Namespace, batch: dict[str, Any], done: str) -> int:
    """After a submit or a re-run: the hint to follow it (or, with --wait, its progress until it is finished)."""
    if not args.wait:
        print(f"{done} {batch['total']} items; follow with: relay batches status {batch['id']}", file=sys.stderr)
        if args.json:
            print_json(batch)
        return 0
    try:
        batch = wait_for(lambda: _call(args, "GET", f"/v1/batches/{batch['id']}",
                                       params={"format": "relay", "limit": 0}), batch["id"], sys.stderr)
    except KeyboardInterrupt:
        print("\n" + interrupted(batch["id"]), file=sys.stderr)
        return EXIT_INTERRUPTED
    print(" ".join(f"{s}={batch['counts'][s]}" for s in FINAL_STATES))
    if args.json:
        print_json(batch)
    return 0 if batch["counts"]["completed"] == batch["total"] else EXIT_NOT_ALL_COMPLETED


def _estimate(args: argparse.Namespace, body: bytes, numbers: Sequence[int]) -> dict[str, Any] | None:
    """The API's estimate of the submit BODY (its refusal told by file line); None from an API without estimates."""
    try:
        return _call(args, "POST", "/v1/batches/estimate", data=body,  # type: ignore[no-any-return]
                     headers={"content-type": "application/json"})
    except ApiError as exc:
        if exc.status in (404, 405):
            print("relay API gives no estimate (an older version): submitting without one", file=sys.stderr)
            return None
        raise by_file_line(exc, args.file, numbers) from None


def cmd_estimate(args: argparse.Namespace) -> int:
    requests_file, body = _requests_body(args)
    try:
        estimate = _call(args, "POST", "/v1/batches/estimate", data=body, headers={"content-type": "application/json"})
    except ApiError as exc:
        raise by_file_line(exc, args.file, requests_file.numbers) from None
    if args.json:
        print_json(estimate)
    else:
        print("\n".join(estimate_lines(estimate)))
    return 0


def cmd_rerun(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {}
    if args.codes:
        body["codes"] = args.codes
    if args.max_cost is not None:
        body["max_cost"] = float(args.max_cost)
    if args.metadata is not None:
        body["metadata"] = args.metadata
    if args.force:
        body["force"] = True
    try:
        batch = _call(args, "POST", f"/v1/batches/{args.id}/rerun", params={"format": "relay"}, json=body)
    except ApiError as exc:
        raise rerun_exists_hint(exc, args.id) from None
    if args.wait or args.json:
        print(batch["id"])
        return follow(args, batch, "re-running")
    print("\n".join(batch_summary(batch)))
    print(f"re-running {batch['total']} items; follow with: relay batches status {batch['id']}", file=sys.stderr)
    return 0


def rerun_exists_hint(exc: ApiError, source: str) -> ApiError:
    """A 409 rerun_exists told in the CLI's words: the existing re-run (its `details.rerun_id`), the command to see
    it, and --force (the API's message speaks of the body's `"force": true`)."""
    details = exc.details if isinstance(exc.details, dict) else {}
    rerun_id = details.get("rerun_id")
    if exc.code != "rerun_exists" or not rerun_id:
        return exc
    message = (f"batch {source} already has a re-run of these {details.get('items', '')} items: {rerun_id}; see it"
               f" with `relay batches status {rerun_id}`, or pass --force to run them again")
    return ApiError(message, code=exc.code, details=details, status=exc.status)


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
    return ApiError(message, code=exc.code, details=details, status=exc.status)


def cmd_status(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"format": "relay", "limit": args.limit, "after": args.after}
    for name in ("state", "custom_id"):
        if getattr(args, name):
            params[name] = getattr(args, name)
    batch = _call(args, "GET", f"/v1/batches/{args.id}", params=params)
    while args.all and batch["items_next_after"] is not None:
        page = _call(args, "GET", f"/v1/batches/{args.id}", params={**params, "after": batch["items_next_after"]})
        batch["items"] += page["items"]
        batch["items_next_after"] = page["items_next_after"]
    print_batch(args, batch, more=f"relay batches status {args.id}")
    return 0


def print_batch(args: argparse.Namespace, batch: dict[str, Any], *, more: str) -> None:
    """The batch as JSON (--json), or its summary and a table of the page of items it holds."""
    if args.json:
        print_json(batch)
        return
    print("\n".join(batch_summary(batch)))
    if batch["items"]:
        print()
        print("\n".join(items_table(batch["items"])))
    if batch["items_next_after"] is not None:
        print(f"more items: {more} --after {batch['items_next_after']} (or --all)")


def cmd_results(args: argparse.Namespace) -> int:
    params = {"format": "jsonl", **({"merged": "true"} if args.merged else {})}
    response = _request(args, "GET", f"/v1/batches/{args.id}/results", params=params, stream=True)
    report_results(write_stream(response, args.output), args.output)
    return 0


def write_stream(response: requests.Response, output: Path | None) -> tuple[int, int]:
    """A streamed answer's body to OUTPUT, or to standard output; (bytes, lines) written."""
    out: IO[bytes] = open(output, "wb") if output else sys.stdout.buffer
    size = lines = 0
    try:
        for chunk in response.iter_content(chunk_size=65536):
            out.write(chunk)
            size, lines = size + len(chunk), lines + chunk.count(b"\n")
    finally:
        if output:
            out.close()
        else:
            out.flush()
    return size, lines


def report_results(written: tuple[int, int], output: Path | None) -> None:
    """Say what `results -o FILE` wrote (on standard output the results themselves are the answer)."""
    if output is not None:
        size, lines = written
        print(f"wrote {lines} results ({size} bytes) to {output}")


def cmd_cancel(args: argparse.Namespace) -> int:
    batch = _call(args, "POST", f"/v1/batches/{args.id}/cancel", params={"format": "relay"})
    print_cancelled(args, batch)
    return 0


def print_cancelled(args: argparse.Namespace, batch: dict[str, Any]) -> None:
    if args.json:
        print_json(batch)
        return
    counts = batch["counts"]
    print(f"batch {batch['id']}: {batch_state(batch)}: {counts['cancelled']} items cancelled, {counts['running']}"
          f" running items being stopped, {counts['completed'] + counts['discarded']} had already ended")


def cmd_delete(args: argparse.Namespace) -> int:
    deleted = _call(args, "DELETE", f"/v1/batches/{args.id}")
    if args.json:
        print_json(deleted)
    else:
        print(f"deleted batch {deleted['id']} (its items and stored requests and responses; usage events stay)")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    params = {"format": "relay", "limit": args.limit, **({"cursor": args.after} if args.after else {}),
              **LIST_STATES.get(args.state or "", {}), **({"search": args.search} if args.search else {})}
    page = _call(args, "GET", "/v1/batches", params=params)
    print_list(args, page, more="relay batches list")
    return 0


def print_list(args: argparse.Namespace, page: dict[str, Any], *, more: str, admin: bool = False) -> None:
    if args.json:
        print_json(page)
        return
    if not page["data"]:
        print("no batches match" if (getattr(args, "state", None) or getattr(args, "search", None)
                                     or admin) else "no batches yet")
    else:
        print("\n".join(batches_table(page["data"], admin=admin)))
    if page["next_cursor"]:
        print(f"older batches: {more} --{'cursor' if admin else 'after'} {page['next_cursor']}")


def _call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    return _request(args, method, path, **kwargs).json()


def _request(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> requests.Response:
    """One call with the caller's credential; the admin token, refused here, gets a hint to the command it fits."""
    try:
        return request(args, method, path, **kwargs)
    except ApiError as exc:
        raise hint_for_admin_token(args, exc) from None
