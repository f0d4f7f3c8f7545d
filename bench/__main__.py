"""Relay's benchmarks: one command starts the fake upstream, `relay api` and `relay worker` processes on the local
services (scripts/services.sh up if needed), runs every scenario REPEAT times, and prints a table of medians with
targets and baseline ratios (also written as JSON).

    .venv/bin/python -m bench                       # everything, 3 runs each (~15 min)
    .venv/bin/python -m bench --quick --repeat 1    # smaller sizes
    .venv/bin/python -m bench --only drain,live     # a subset
    .venv/bin/python -m bench --only live,slowclients --peer litellm   # the live scenarios beside LiteLLM
    .venv/bin/python -m bench --only soak --soak 10x100000   # the million-item soak (not in the default run)

Scenarios: accept, reads, live, slowclients, drain, ratelimit, slow, cancel, fairshare, pacing, pacedlive, files,
objectstore, webhooks, hungwebhooks, pacedowners, tracing, soak (only when named: it runs for an hour at its full
size). It uses its own database and RabbitMQ vhost (`relay_bench`, or --database; dropped at the end). Timings on a
2-core machine are noisy: compare ratios, not single times.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench import (
    batches,
    fairness,
    live,
    objectstore,
    paced_owners,
    pacing,
    peers,
    reads,
    slow_clients,
    soak,
    storage,
    tracing,
    webhooks,
)
from bench.env import BenchEnv
from bench.report import Results
from bench.sizes import FULL, QUICK, Sizes

Scenario = Callable[[BenchEnv, Sizes, int, Results], None]
# In the order they run: those without workers first, then by worker configuration.
SCENARIOS: dict[str, Scenario] = {
    "accept": batches.accept,
    "reads": reads.reads,
    "live": live.live,
    "slowclients": slow_clients.slow_clients,
    "drain": batches.drain,
    "ratelimit": batches.rate_limited,
    "slow": batches.slow_drain,
    "cancel": batches.cancel,
    "fairshare": fairness.fair_share,
    "pacing": pacing.pacing,
    "pacedlive": pacing.paced_live,
    "files": storage.files,
    "objectstore": objectstore.object_store,
    "webhooks": webhooks.webhooks,
    "hungwebhooks": webhooks.hung_receiver,
    "pacedowners": paced_owners.paced_owners,
    "tracing": tracing.tracing,
    "soak": soak.soak,
}
DEFAULT_RUN = [name for name in SCENARIOS if name != "soak"]
DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "latest.json"


def run(sizes: Sizes, only: list[str], repeat: int, json_path: Path | None, database: str = "relay_bench",
        log: Callable[[str], None] = print, peer_names: tuple[str, ...] = ()) -> Results:
    """Run the chosen scenarios on a fresh environment (with the PEER_NAMES gateways started beside Relay for the
    live scenarios); the results (also written to JSON_PATH if given)."""
    results = Results()
    env = BenchEnv.create(sizes, name=database)
    peer_procs = []
    try:
        for name in peer_names:
            proc, peer = peers.PEERS[name](env, log)
            peer_procs.append(proc)
            env.peers[name] = peer
        for name in [n for n in SCENARIOS if n in only]:
            started = time.monotonic()
            log(f"[bench] {name} ...")
            SCENARIOS[name](env, sizes, repeat, results)
            log(f"[bench] {name} done in {time.monotonic() - started:.0f} s")
    finally:
        for proc in peer_procs:
            proc.stop()
        env.close()
    if json_path is not None:
        results.write_json(json_path, " ".join(["python -m bench", *sys.argv[1:]]))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(DEFAULT_RUN),
                        help=f"comma-separated scenarios (default all but soak: {','.join(DEFAULT_RUN)})")
    parser.add_argument("--repeat", type=int, default=3, help="runs per scenario; the table shows medians")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (minutes instead of a quarter hour)")
    parser.add_argument("--peer", action="append", default=[], choices=sorted(peers.PEERS),
                        help="also run the live scenarios against this gateway (installed on first use into "
                             ".bench-peers/) and print Relay ÷ peer")
    parser.add_argument("--database", default="relay_bench",
                        help="the database and RabbitMQ vhost it creates and drops (a second bench on the same services"
                             " needs another name)")
    parser.add_argument("--soak", type=soak_size, metavar="BATCHESxITEMS",
                        help="the soak's size (default 10x100000; --quick 2x20000)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"where to write the JSON ({DEFAULT_JSON})")
    args = parser.parse_args(argv)
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in only if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    sizes = QUICK if args.quick else FULL
    if args.soak is not None:
        sizes = dataclasses.replace(sizes, soak_batches=args.soak[0], soak_items=args.soak[1])
    results = run(sizes, only, max(1, args.repeat), args.json, database=args.database, peer_names=tuple(args.peer))
    print(results.table())
    for name in args.peer:
        print(f"\nRelay ÷ {name} (medians; below 1 is better for latency, above 1 for requests/s):\n")
        print(peers.comparison(results, name))
    for note in results.notes:
        print(f"note: {note}")
    return 0


def soak_size(text: str) -> tuple[int, int]:
    """`10x100000` → (10, 100000): the soak's batches and items per batch."""
    try:
        batches_text, items_text = text.lower().split("x")
        size = int(batches_text), int(items_text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not BATCHESxITEMS: {text!r} (e.g. 2x20000)") from None
    if size[0] < 2 or size[1] < 1:
        raise argparse.ArgumentTypeError("the soak needs at least 2 batches (one half purged) of at least 1 item")
    return size


if __name__ == "__main__":
    sys.exit(main())
