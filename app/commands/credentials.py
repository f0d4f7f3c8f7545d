"""`relay keys ...` and `relay tokens ...`: credentials straight on the database; secrets are printed once."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any
from uuid import UUID

from marshmallow import Schema

from app.commands.catalog import cli_runtime
from app.credentials import keys, tokens
from schemas.admin import MintedTokenSchema, RelayKeySchema, RelayKeySecretSchema, TokenSchema
from schemas.durations import DurationError, parse_duration


def register(sub: Any) -> None:
    _register_keys(sub.add_parser("keys", help="relay keys").add_subparsers(
        dest="keys_command", required=True, metavar="COMMAND"))
    _register_tokens(sub.add_parser("tokens", help="inference tokens").add_subparsers(
        dest="tokens_command", required=True, metavar="COMMAND"))


def _register_keys(sub: Any) -> None:
    p = sub.add_parser("create", help="create a relay key and print its secret (shown once)")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", metavar="NAME")
    who.add_argument("--service-account", metavar="NAME")
    p.add_argument("--policy", required=True, metavar="NAME")
    p.add_argument("--project", metavar="NAME", help="default: the principal's")
    p.add_argument("--team", metavar="NAME", help="default: the principal's")
    p.add_argument("--name", help="a label for the key")
    p.add_argument("--expires-at", type=_timestamp, metavar="TS", help="RFC 3339 time, e.g. 2030-01-01T00:00:00Z")
    p.set_defaults(func=cmd_keys_create)
    p = sub.add_parser("list", help="list relay keys (never their secrets)")
    p.set_defaults(func=cmd_keys_list)
    p = sub.add_parser("rotate", help="give a key a new secret and print it (shown once)")
    p.add_argument("id", type=UUID)
    p.add_argument("--grace", type=_seconds, default=0, metavar="DURATION",
                   help="how long the old value keeps working, e.g. 10m (default 0: stops at once)")
    p.set_defaults(func=cmd_keys_rotate)
    for action in ("disable", "enable", "revoke"):
        p = sub.add_parser(action, help=f"{action} a relay key" + (" (final)" if action == "revoke" else ""))
        p.add_argument("id", type=UUID)
        p.set_defaults(func=cmd_keys_state, action=action)


def _register_tokens(sub: Any) -> None:
    p = sub.add_parser("mint", help="mint an inference token for a user and print it (shown once)")
    p.add_argument("--user", required=True, metavar="NAME")
    p.add_argument("--ttl", required=True, type=_seconds, metavar="DURATION", help="e.g. 1h, 30m, 7d")
    p.set_defaults(func=cmd_tokens_mint)
    p = sub.add_parser("list", help="list inference tokens (never the tokens themselves)")
    p.add_argument("--user", metavar="NAME")
    p.set_defaults(func=cmd_tokens_list)
    p = sub.add_parser("revoke", help="revoke an inference token")
    p.add_argument("id", type=UUID)
    p.set_defaults(func=cmd_tokens_revoke)


def cmd_keys_create(args: argparse.Namespace) -> int:
    kind, principal = ("user", args.user) if args.user else ("service_account", args.service_account)
    with cli_runtime() as runtime:
        issued = keys.create_key(runtime, principal_kind=kind, principal=principal, policy=args.policy,
                                 project=args.project, team=args.team, name=args.name, expires_at=args.expires_at)
    return _print(RelayKeySecretSchema(), {**keys.key_fields(issued.view), "key": issued.secret})


def cmd_keys_list(args: argparse.Namespace) -> int:
    with cli_runtime() as runtime:
        views = keys.list_keys(runtime)
    return _print(RelayKeySchema(many=True), [keys.key_fields(v) for v in views])


def cmd_keys_rotate(args: argparse.Namespace) -> int:
    with cli_runtime() as runtime:
        issued = keys.rotate_key(runtime, args.id, int(args.grace))
    return _print(RelayKeySecretSchema(), {**keys.key_fields(issued.view), "key": issued.secret})


def cmd_keys_state(args: argparse.Namespace) -> int:
    with cli_runtime() as runtime:
        view = keys.change_key_state(runtime, args.id, args.action)
    return _print(RelayKeySchema(), keys.key_fields(view))


def cmd_tokens_mint(args: argparse.Namespace) -> int:
    with cli_runtime() as runtime:
        issued = tokens.mint_token(runtime, args.user, int(args.ttl))
    return _print(MintedTokenSchema(), {**tokens.token_fields(issued.view), "token": issued.token})


def cmd_tokens_list(args: argparse.Namespace) -> int:
    with cli_runtime() as runtime:
        views = tokens.list_tokens(runtime, args.user)
    return _print(TokenSchema(many=True), [tokens.token_fields(v) for v in views])


def cmd_tokens_revoke(args: argparse.Namespace) -> int:
    with cli_runtime() as runtime:
        view = tokens.revoke_token(runtime, args.id)
    return _print(TokenSchema(), tokens.token_fields(view))


def _print(schema: Schema, data: Any) -> int:
    print(json.dumps(schema.dump(data), indent=2))
    return 0


def _timestamp(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 time: {text!r}") from exc
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError("give a timezone, e.g. 2030-01-01T00:00:00Z")
    return value


def _seconds(text: str) -> float:
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(f"{exc}: {text!r}") from exc
