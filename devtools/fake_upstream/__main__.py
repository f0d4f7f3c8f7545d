"""`python -m devtools.fake_upstream [options]`: run the fake OpenAI/Anthropic server (needs no RELAY_* settings)."""

from __future__ import annotations

import argparse
import sys

from devtools.fake_upstream.behaviour import Behaviour, InvalidControl, ServerOptions
from devtools.fake_upstream.runner import NotLoopback, run_server
from devtools.fake_upstream.state import UpstreamState

PROG = "python -m devtools.fake_upstream"


def parser() -> argparse.ArgumentParser:
    """The command line of the fake upstream (demo, tests, benchmarks)."""
    p = argparse.ArgumentParser(prog=PROG, description="A fake OpenAI/Anthropic server for the demo, tests and "
                                "benchmarks. Control it at run time through /_control/.")
    p.add_argument("--host", default="127.0.0.1", help="loopback address to listen on (default 127.0.0.1)")
    p.add_argument("--any-address", action="store_true",
                   help="allow a non-loopback --host (inside a container only: it answers any key)")
    p.add_argument("--port", type=int, default=9100, help="port (default 9100; 0 picks a free one)")
    p.add_argument("--latency-ms", type=int, default=0, help="latency added to every call (global)")
    p.add_argument("--default-latency-ms", type=int, default=0,
                   help="latency of keys without their own behaviour (the default behaviour)")
    p.add_argument("--strict-keys", action="store_true",
                   help="only keys given with --key or set through the control API are valid")
    p.add_argument("--key", action="append", default=[], metavar="KEY", help="a key that is valid (repeatable)")
    p.add_argument("--allow-missing-key", action="store_true", help="answer calls that carry no key at all")
    p.add_argument("--request-log-size", type=int, default=1000, help="recent calls kept for /_control/requests")
    return p


def main(argv: list[str] | None = None) -> int:
    """Serve until interrupted; prints `fake upstream listening on URL` once the port is bound."""
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        options = ServerOptions().updated({
            "latency_ms": args.latency_ms, "strict_keys": args.strict_keys,
            "allow_missing_key": args.allow_missing_key, "request_log_size": args.request_log_size})
        default = Behaviour.from_json({"latency_ms": args.default_latency_ms})
    except InvalidControl as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    state = UpstreamState(options, default, {key: Behaviour() for key in args.key})

    def ready(url: str) -> None:
        print(f"fake upstream listening on {url}", flush=True)

    try:
        run_server(args.host, args.port, state, on_ready=ready, any_address=args.any_address)
    except NotLoopback as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{PROG}: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
