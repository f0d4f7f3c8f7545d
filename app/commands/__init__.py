"""Subcommands of the `relay` CLI."""
