"""The harness and `python -m devtools.fake_upstream` start, serve on loopback only, and stop cleanly."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import requests

from devtools.fake_upstream import NotLoopback, ServerThread, check_loopback
from devtools.fake_upstream.__main__ import main, parser
from devtools.fake_upstream.harness import ROOT, start_fake_upstream

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def chat_status(url: str, key: str) -> int:
    return requests.post(url + "/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {key}"},
                         timeout=10).status_code


def test_process_mode_serves_with_start_up_options_and_stops() -> None:
    upstream = start_fake_upstream(process=True, strict_keys=True, keys=("sk-one",))
    try:
        assert upstream.url.startswith("http://127.0.0.1:")
        assert chat_status(upstream.url, "sk-one") == 200
        assert chat_status(upstream.url, "sk-two") == 401
        upstream.control("sk-two")
        assert chat_status(upstream.url, "sk-two") == 200
        upstream.reset()
        assert chat_status(upstream.url, "sk-two") == 401
    finally:
        upstream.stop()
    with pytest.raises(requests.ConnectionError):
        chat_status(upstream.url, "sk-one")
    upstream.stop()


def test_thread_mode_stops_and_frees_its_port() -> None:
    with start_fake_upstream(latency_ms=0) as upstream:
        assert chat_status(upstream.url, "k") == 200
    with pytest.raises(requests.ConnectionError):
        chat_status(upstream.url, "k")
    upstream.stop()


def test_the_cli_needs_no_relay_settings() -> None:
    env = {name: value for name, value in os.environ.items() if not name.startswith("RELAY_")}
    proc = subprocess.Popen([sys.executable, "-m", "devtools.fake_upstream", "--port", "0"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "fake upstream listening on http://127.0.0.1:" in line
        assert chat_status(line.split("listening on ")[1].strip(), "k") == 200
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_only_loopback_addresses_are_served() -> None:
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        check_loopback(host)
    for host in ("0.0.0.0", "10.0.0.1", "example.com", ""):
        with pytest.raises(NotLoopback):
            check_loopback(host)
    with pytest.raises(NotLoopback):
        ServerThread(host="0.0.0.0")
    assert main(["--host", "0.0.0.0", "--port", "0"]) == 2



def test_the_compose_image_command_is_one_the_fake_upstream_accepts() -> None:
    """Inside its container the fake upstream must listen beyond the container's own loopback (the API reaches it
    at fake-upstream:9100): the image's command asks for that explicitly. (Not started here: this machine may only
    listen on loopback.)"""
    cmd = next(line for line in (ROOT / "Dockerfile").read_text().splitlines()
               if line.startswith('CMD ["python", "-m", "devtools.fake_upstream"'))
    args = parser().parse_args(json.loads(cmd.removeprefix("CMD "))[3:])
    assert args.host == "0.0.0.0" and args.any_address
