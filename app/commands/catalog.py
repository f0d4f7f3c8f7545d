"""`relay apply FILE` and `relay catalog export`: the catalog from and to a file, straight on the database."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from app.catalog.apply import ApplyResult, apply_catalog
from app.catalog.export import export_catalog
from app.catalog.validate import InvalidCatalog, parse_document
from app.runtime import Runtime
from app.settings import Settings


def register(sub: Any) -> None:
    p = sub.add_parser("apply", help="apply a whole catalog from a YAML or JSON file (idempotent)")
    p.add_argument("file", help="the catalog file (YAML, or JSON when it ends in .json); - reads stdin")
    p.add_argument("--dry-run", action="store_true", help="validate and show the changes without making them")
    p.add_argument("--if-empty", action="store_true",
                   help="apply only when the catalog is empty (a fresh install); otherwise leave it as it is")
    p.set_defaults(func=cmd_apply)

    catalog = sub.add_parser("catalog", help="catalog commands")
    catalog_sub = catalog.add_subparsers(dest="catalog_command", required=True, metavar="COMMAND")
    p = catalog_sub.add_parser("export", help="print the catalog in the file format (without secret values)")
    p.add_argument("--format", choices=("yaml", "json"), default="yaml")
    p.set_defaults(func=cmd_export)


@contextmanager
def cli_runtime() -> Iterator[Runtime]:
    """A small Runtime for one CLI command (no cache, no listener), closed when it is done."""
    runtime = Runtime.build(Settings.from_env(), pool_max=2)
    try:
        yield runtime
    finally:
        runtime.close()


def cmd_apply(args: argparse.Namespace) -> int:
    text = sys.stdin.buffer.read() if args.file == "-" else _read(args.file)
    fmt = "json" if args.file.endswith(".json") else "yaml"
    try:
        with cli_runtime() as runtime:
            result = apply_catalog(runtime, parse_document(text, fmt), dry_run=args.dry_run,
                                   only_if_empty=args.if_empty)
    except InvalidCatalog as exc:
        print(f"relay: {args.file}: {exc.message}", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print(describe_changes(result))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with cli_runtime() as runtime:
        doc = export_catalog(runtime)
    if args.format == "json":
        print(json.dumps(doc, indent=2))
    else:
        print(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), end="")
    return 0


def describe_changes(result: ApplyResult) -> str:
    """One line per kind and change, e.g. `created models: gpt-4o-mini, claude-sonnet`."""
    if result.kept:
        return f"the catalog is not empty: left as it is (catalog version {result.version})"
    lines = [f"{change} {kind}: {', '.join(names)}"
             for kind, changes in result.changes.items() for change, names in changes.items() if names]
    if not lines:
        return f"no changes (catalog version {result.version})"
    tail = "dry run: nothing was changed" if result.dry_run else f"catalog version {result.version}"
    return "\n".join([*lines, tail])


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SystemExit(f"relay: cannot read {path}: {exc.strerror}") from exc
