"""The `relay` command: one entry point, subcommands registered by modules in app/commands."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from pathlib import Path

from app.commands.output import detail_lines
from app.errors import RelayError
from app.observability.logs import install_json_logging
from app.settings import SettingMissing, SettingsError

LOCAL_ENV = Path(".run") / "env"  # where scripts/dev.sh keeps a local install's settings

# Each module exposes register(subparsers); its subcommands set `func(args) -> int`. COMMANDS names the module of
# each top-level command, so that a command imports its own module only: the others pull in psycopg, requests or
# marshmallow, about 0.3 s of CPU at every start (`relay api` and `relay worker` start twice under gevent).
COMMANDS = {
    "migrate": "app.commands.server", "api": "app.commands.server", "worker": "app.commands.server",
    "apply": "app.commands.catalog", "catalog": "app.commands.catalog",
    "keys": "app.commands.credentials", "tokens": "app.commands.credentials",
    "batches": "app.commands.batches",
    "admin-batches": "app.commands.admin_batches",
    "usage": "app.commands.usage",
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command; or, when ARGV starts with a command, of that command's module alone."""
    parser = argparse.ArgumentParser(prog="relay", description="Relay LLM gateway")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = dict.fromkeys(COMMANDS.values())
    if argv and argv[0] in COMMANDS:
        modules = {COMMANDS[argv[0]]: None}
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    install_json_logging(logging.INFO)
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SettingsError as exc:
        print(f"relay: configuration error: {exc}", file=sys.stderr)
        if isinstance(exc, SettingMissing):
            print(f"  {environment_hint()}", file=sys.stderr)
        return 2
    except RelayError as exc:
        print(f"relay: {exc.code}: {exc.message}", file=sys.stderr)
        for line in detail_lines(exc.details):
            print(f"  {line}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader went away (`relay keys list | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 141  # 128 + SIGPIPE, as a shell tool killed by the closed pipe
    except KeyboardInterrupt:
        return 130


def environment_hint() -> str:
    """Where the settings a command lacks are: RELAY_* variables, kept by a local install in .run/env."""
    where = (f"this directory's local install keeps them in {LOCAL_ENV}: run `source {LOCAL_ENV}` first"
             if LOCAL_ENV.is_file() else
             f"a local install started by scripts/dev.sh keeps them in its {LOCAL_ENV} (`source {LOCAL_ENV}` in"
             " its directory)")
    return f"relay reads its settings from RELAY_* environment variables (docs/configuration.md); {where}"


if __name__ == "__main__":
    sys.exit(main())
