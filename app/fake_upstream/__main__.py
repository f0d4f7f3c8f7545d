"""`python -m app.fake_upstream [options]`: `relay fake-upstream` without loading Relay's other subcommands."""

from __future__ import annotations

import argparse
import sys

from app.commands.fake_upstream import register


def main(argv: list[str] | None = None) -> int:
    """Parse the `relay fake-upstream` options and serve until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m app.fake_upstream")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["fake-upstream", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
