"""`relay batches purge`, for operators: straight on the database and the payload directory (with the `RELAY_*`
settings, like `relay keys`), every batch finished before a date, with its payload files; usage events stay."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta

from schemas.durations import DurationError, parse_duration


def cmd_purge(args: argparse.Namespace) -> int:
    # Imported here: every other `relay batches` command is an HTTP client, which needs neither psycopg nor the engine.
    from app.batches.retention import purge_batches
    from app.commands.catalog import cli_runtime
    from app.wiring import plug_into_engine

    plug_into_engine()  # a batch that ends here gets its webhook event
    with cli_runtime() as runtime:
        report = purge_batches(runtime, args.finished_before, dry_run=args.dry_run, vacuum=args.vacuum)
    verb = "would purge" if args.dry_run else "purged"
    print(f"{verb} {report.batches} batches ({report.items} items) finished before"
          f" {args.finished_before.isoformat()}; {'would remove' if args.dry_run else 'removed'}"
          f" {report.stray_folders} stray payload folders")
    if report.left_behind:
        print(f"relay: {report.left_behind} payload folders could not be removed; the next purge tries again",
              file=sys.stderr)
        return 1
    return 0


def purge_arguments(p: argparse.ArgumentParser, date_flag: str, done: str) -> None:
    """What both purges (`relay batches purge`, `relay usage purge`) take: the cutoff as DATE_FLAG, --dry-run
    (counting what would be DONE) and --no-vacuum."""
    p.add_argument(date_flag, required=True, type=cutoff, metavar="DATE",
                   help="an RFC 3339 date or time (UTC unless it says otherwise), or an age such as 30d")
    p.add_argument("--dry-run", action="store_true", help=f"count what would be {done}; change nothing")
    p.add_argument("--no-vacuum", dest="vacuum", action="store_false",
                   help="leave the tables to autovacuum instead of vacuuming them afterwards")


def cutoff(text: str) -> datetime:
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
