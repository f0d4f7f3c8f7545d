"""`relay admin-batches list|status|results|cancel|workers`: the operator's client of /admin/batches and
/admin/workers over HTTP, with the admin token (every owner's batches, e.g. of a revoked or rotated key). Output is
for people unless `--json` asks for the API's answers; a batch id may be spelled as any API spells it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.commands.api_client import MissingToken, call, request
from app.commands.batch_views import fleet_lines
from app.commands.batches import print_batch, print_cancelled, print_list, report_results, write_stream
from app.commands.output import print_json
from app.settings import ClientSettings
from schemas.batches import ITEM_STATES

_FILTERS = ("principal", "credential", "policy", "from", "to", "status", "cursor", "search")


def register(sub: Any) -> None:
    admin = sub.add_parser("admin-batches", help="every owner's batches, the workers and the queue (admin token)")
    cmds = admin.add_subparsers(dest="admin_batches_command", required=True, metavar="COMMAND")
    p = _with_client(cmds.add_parser("list", help="every owner's batches, newest first, with filters"))
    p.add_argument("--principal", help="user or service account: a name or id (user:NAME, service_account:NAME)")
    p.add_argument("--credential", help="relay key id or inference token id")
    p.add_argument("--policy", help="a policy name or id")
    p.add_argument("--from", help="created at or after (RFC 3339)")
    p.add_argument("--to", help="created before (RFC 3339)")
    p.add_argument("--status", choices=("queued", "cancelled"))
    p.add_argument("--finished", choices=("true", "false"), help="every item final (true) or not yet (false)")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--cursor", help="next_cursor of the previous page")
    p.add_argument("--search", help="a batch id, or text in the batches' metadata (any case)")
    p.set_defaults(func=_with_token(cmd_list))
    p = _with_client(cmds.add_parser("status", help="any batch with its counts and a page of items"))
    p.add_argument("id")
    p.add_argument("--state", choices=ITEM_STATES, help="list items in this state")
    p.add_argument("--after", type=int, default=-1, help="list items with idx greater than this")
    p.add_argument("--limit", type=int, default=20, help="items to list (default 20)")
    p.set_defaults(func=_with_token(cmd_status))
    p = _with_client(cmds.add_parser("results", help="write any batch's results (JSON Lines) to stdout or --output"))
    p.add_argument("id")
    p.add_argument("--output", "-o", type=Path)
    p.set_defaults(func=_with_token(cmd_results))
    p = _with_client(cmds.add_parser("cancel", help="cancel any batch"))
    p.add_argument("id")
    p.set_defaults(func=_with_token(cmd_cancel))
    p = _with_client(cmds.add_parser("workers", help="worker processes (alive or not) and the item queue's depth"))
    p.set_defaults(func=_with_token(cmd_workers))


def _with_client(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    client = ClientSettings.from_env()
    p.add_argument("--url", default=client.url, help="Relay API base URL (default $RELAY_URL)")
    p.add_argument("--token", dest="key", default=client.admin_token,
                   help="the admin token (default $RELAY_ADMIN_TOKEN)")
    p.add_argument("--json", action="store_true", help="print the API's answer as JSON (for scripts)")
    return p


def _with_token(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """COMMAND, after checking that an admin token was given (the API would answer 401 anyway, less clearly)."""
    def run(args: argparse.Namespace) -> int:
        if not args.key:
            raise MissingToken(message="pass --token or set RELAY_ADMIN_TOKEN")
        return command(args)
    return run


def cmd_list(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"limit": args.limit}
    params.update({name: getattr(args, name) for name in (*_FILTERS, "finished") if getattr(args, name)})
    print_list(args, call(args, "GET", "/admin/batches", params=params), more="relay admin-batches list", admin=True)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"limit": args.limit, "after": args.after}
    if args.state:
        params["state"] = args.state
    print_batch(args, call(args, "GET", f"/admin/batches/{args.id}", params=params),
                more=f"relay admin-batches status {args.id}")
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    response = request(args, "GET", f"/admin/batches/{args.id}/results", params={"format": "jsonl"}, stream=True)
    report_results(write_stream(response, args.output), args.output)
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    print_cancelled(args, call(args, "POST", f"/admin/batches/{args.id}/cancel"))
    return 0


def cmd_workers(args: argparse.Namespace) -> int:
    fleet = call(args, "GET", "/admin/workers")
    if args.json:
        print_json(fleet)
    else:
        print("\n".join(fleet_lines(fleet)))
    return 0
