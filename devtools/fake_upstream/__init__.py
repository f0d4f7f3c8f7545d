"""The fake upstream: an OpenAI- and Anthropic-compatible HTTP server for the demo, tests and benchmarks.

Run it with `python -m devtools.fake_upstream`, or in-process with `ServerThread` (tests use
`devtools/fake_upstream/harness.py`). Replies and token counts are deterministic: see `content.py`.
"""

from devtools.fake_upstream.behaviour import MODES, Behaviour, InvalidControl, ServerOptions
from devtools.fake_upstream.content import Turn, count_tokens, embedding_inputs, plan_turn, prompt_of
from devtools.fake_upstream.runner import NotLoopback, ServerThread, check_loopback, run_server
from devtools.fake_upstream.server import create_app
from devtools.fake_upstream.state import NO_KEY, UpstreamState

__all__ = [
    "MODES",
    "NO_KEY",
    "Behaviour",
    "InvalidControl",
    "NotLoopback",
    "ServerOptions",
    "ServerThread",
    "Turn",
    "UpstreamState",
    "check_loopback",
    "count_tokens",
    "create_app",
    "embedding_inputs",
    "plan_turn",
    "prompt_of",
    "run_server",
]
