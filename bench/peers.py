"""Peer gateways for `python -m bench --peer NAME`: installed on first use under `.bench-peers/` (git-ignored; never
a dependency of Relay: LiteLLM into its own virtualenv, Portkey's gateway from npm), started on loopback beside
Relay on the same fake upstream, so the live scenarios run against each and the report shows Relay ÷ peer. The
`floor` and `floor-flask` peers are no gateways: Relay's HTTP server and upstream client forwarding bodies and
nothing else, bare and in a Flask route (bench/floor.py), what any gateway on them adds at least."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import requests

from bench.env import KEYS, MODEL, BenchEnv, Peer
from bench.floor import start_floor
from bench.report import Results
from devtools.processes import RelayProcess, free_port

ROOT = Path(__file__).resolve().parent.parent
PEERS_DIR = ROOT / ".bench-peers"
LITELLM = "litellm[proxy]==1.108.7"  # the version the issue compared against
PORTKEY = "@portkey-ai/gateway@1.15.2"  # likewise
PORTKEY_DIR = PEERS_DIR / "portkey"
# Loaded before Portkey's gateway (node --import): it listens on every interface at a fixed port (8787 or --port);
# this makes it listen on loopback at the port the OS gives, and print that port for start_portkey to read.
PORTKEY_LOOPBACK = """import http from "node:http";
const listen = http.Server.prototype.listen;
http.Server.prototype.listen = function (...args) {
  this.once("listening", () => console.log(`relay-bench-port=${this.address().port}`));
  return listen.call(this, { port: 0, host: "127.0.0.1" }, ...args.filter((a) => typeof a === "function"));
};
"""
# model name on the peer → the fake upstream key it calls with (the same keys Relay's bench policies use)
PEER_MODELS = {MODEL: KEYS["fast"], f"{MODEL}-trickle": KEYS["trickle"], f"{MODEL}-big": KEYS["big"]}


def install_litellm(log: Callable[[str], None]) -> Path:
    """The `litellm` command of .bench-peers/litellm, installing it there first when missing."""
    venv = PEERS_DIR / "litellm"
    command = venv / "bin" / "litellm"
    if not command.exists():
        log(f"[bench] installing {LITELLM} into {venv} (first use only) ...")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", LITELLM],
                       check=True)
    return command


def litellm_config(upstream_url: str, master_key: str) -> str:
    """A LiteLLM proxy config: each peer model is an OpenAI-compatible model on the fake upstream (YAML is JSON)."""
    models = [{"model_name": name, "litellm_params": {"model": f"openai/{MODEL}", "api_base": f"{upstream_url}/v1",
                                                      "api_key": key}}
              for name, key in PEER_MODELS.items()]
    return json.dumps({"model_list": models, "litellm_settings": {"drop_params": True},
                       "general_settings": {"master_key": master_key}})


def start_litellm(env: BenchEnv, log: Callable[[str], None], workers: int = 2) -> tuple[RelayProcess, Peer]:
    """The LiteLLM proxy (WORKERS processes, as many as Relay's API) on a free loopback port, once it answers, and
    its master key (the callers' key)."""
    command = install_litellm(log)
    config = env.work / "litellm.yaml"
    key = "sk-bench-peer-" + secrets.token_hex(16)
    config.write_text(litellm_config(env.upstream.url, key))
    port = free_port()
    log_path = env.work / f"litellm-{port}.log"
    proc = subprocess.Popen([str(command), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
                             "--num_workers", str(workers)], stdout=log_path.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=env.work)
    peer = RelayProcess(proc=proc, log_path=log_path, url=f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"litellm exited early:\n{peer.log()[-3000:]}")
        try:
            if requests.get(peer.url + "/health/liveliness", timeout=2).status_code == 200:
                return peer, Peer(peer.url, key)
        except requests.RequestException:
            pass
        time.sleep(0.5)
    peer.stop()
    raise RuntimeError(f"litellm did not start:\n{peer.log()[-3000:]}")


def install_portkey(log: Callable[[str], None]) -> Path:
    """The entry script of Portkey's gateway in .bench-peers/portkey, installing it there with npm first when
    missing."""
    folder = PORTKEY_DIR
    script = folder / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    if not script.exists():
        if shutil.which("npm") is None:
            raise RuntimeError("--peer portkey needs Node.js and npm (apt-get install nodejs npm)")
        log(f"[bench] installing {PORTKEY} into {folder} (first use only) ...")
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", str(folder), "--no-audit", "--no-fund", "--loglevel=error",
                        PORTKEY], check=True)
    (folder / "loopback.mjs").write_text(PORTKEY_LOOPBACK)
    return script


def start_portkey(env: BenchEnv, log: Callable[[str], None]) -> tuple[RelayProcess, Peer]:
    """Portkey's gateway (one Node process: it has no worker option) on loopback, once it answers. It keeps no
    keys: a caller names the provider and host in headers and sends the upstream key itself (the bare policy's)."""
    script = install_portkey(log)
    log_path = env.work / "portkey.log"
    proc = subprocess.Popen(["node", "--import", (PORTKEY_DIR / "loopback.mjs").as_uri(), str(script),
                             "--headless"], stdout=log_path.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=env.work, env={**os.environ, "NODE_ENV": "production"})
    peer = RelayProcess(proc=proc, log_path=log_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"portkey exited early:\n{peer.log()[-3000:]}")
        found = re.search(r"relay-bench-port=(\d+)", peer.log())
        if found:
            peer.url = f"http://127.0.0.1:{found.group(1)}"
            headers = {"x-portkey-provider": "openai", "x-portkey-custom-host": f"{env.upstream.url}/v1"}
            return peer, Peer(peer.url, KEYS["fast"], headers, slow_clients=False)
        time.sleep(0.2)
    peer.stop()
    raise RuntimeError(f"portkey did not start:\n{peer.log()[-3000:]}")


def start_floor_peer(env: BenchEnv, log: Callable[[str], None], flask: bool = False) -> tuple[RelayProcess, Peer]:
    """The floor (bench/floor.py; in a bare Flask route with FLASK), two workers as Relay's API, calling the fake
    upstream with the bare policy's key; it checks no caller key."""
    log(f"[bench] starting the floor{' in Flask' if flask else ''} (Relay's server and upstream client, forwarding "
        "only) ...")
    floor = start_floor(env.upstream.url, KEYS["fast"], env.work / f"floor{'-flask' if flask else ''}.log",
                        flask=flask)
    return floor, Peer(floor.url, "none", slow_clients=False)


PEERS: dict[str, Callable[[BenchEnv, Callable[[str], None]], tuple[RelayProcess, Peer]]] = {
    "litellm": start_litellm, "portkey": start_portkey, "floor": start_floor_peer,
    "floor-flask": lambda env, log: start_floor_peer(env, log, flask=True)}


def comparison(results: Results, peer: str) -> str:
    """A Markdown table of every figure measured on Relay and on PEER: both medians and Relay ÷ peer."""
    lines = [f"| figure | Relay | {peer} | Relay ÷ {peer} |", "|---|---|---|---|"]
    for (scenario, name), fig in results.figures.items():
        other = results.figures.get((f"{scenario} ({peer})", name))
        if other is None:
            continue
        ratio = f"{fig.median / other.median:.2f}x" if other.median else ""
        lines.append(f"| {scenario}: {name} | {fig.median:.2f} {fig.unit} | {other.median:.2f} {other.unit} "
                     f"| {ratio} |")
    return "\n".join(lines)
