"""`relay usage purge`, for operators: straight on the database (with the `RELAY_*` settings, like `relay keys`),
fold the usage events created before a date into hourly sums (app/usage/retention.py)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from app.commands.batch_purge import purge_arguments


def register(sub: Any) -> None:
    usage = sub.add_parser("usage", help="(operators, on the database) usage retention")
    cmds = usage.add_subparsers(dest="usage_command", required=True, metavar="COMMAND")
    p = cmds.add_parser("purge", help="fold the usage events created before a date into hourly sums, which summaries"
                                      " still count; a batch's events wait until the batch is purged or deleted")
    purge_arguments(p, "--before", "folded")
    p.set_defaults(func=cmd_purge)


def cmd_purge(args: argparse.Namespace) -> int:
    from app.commands.catalog import cli_runtime
    from app.migrate import pending_migrations
    from app.usage.retention import purge_usage

    with cli_runtime() as runtime:
        pending = pending_migrations(runtime.settings.database_url)
        if pending:  # usage_rollups is migration 0032's: a database this code has not started on yet lacks it
            print(f"relay: the database lacks migrations {', '.join(map(str, pending))}: run `relay migrate` first"
                  " (`relay api` and `relay worker` apply them when they start)", file=sys.stderr)
            return 2
        report = purge_usage(runtime.pool, args.before, dry_run=args.dry_run, vacuum=args.vacuum)
    if args.dry_run:
        print(f"would fold {report.events} usage events created before {args.before.isoformat()}")
    else:
        print(f"folded {report.events} usage events created before {args.before.isoformat()} into {report.rows}"
              " hourly rows")
    return 0
