"""The SDK examples run as written, against a real `relay api` and real workers: the README's first live call, and
the OpenAI and Anthropic batch API examples of docs/compatible-apis.md."""

from __future__ import annotations

import re

import pytest

from devtools.processes import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("workers")]


def readme_example(page: str, heading: str) -> str:
    """The first ```python block of the section HEADING of PAGE."""
    text = (ROOT / page).read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, f"no python example under {heading}"
    return found.group(1)


@pytest.mark.parametrize(("page", "heading", "said"), [
    ("docs/compatible-apis.md", "OpenAI-compatible Files and Batches",
     "completed BatchRequestCounts(completed=3, failed=0, total=3)"),
    ("docs/compatible-apis.md", "Anthropic-compatible Message Batches", "question-2 "),
])
def test_the_batch_api_example_runs_as_written(page, heading, said, relay_api, key, workers, monkeypatch,
                                               capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RELAY_URL", relay_api.url)
    monkeypatch.setenv("RELAY_KEY", key)
    exec(compile(readme_example(page, heading), f"{page}: {heading}", "exec"), {})  # our own docs
    printed = capsys.readouterr().out
    assert said in printed and "question-0" in printed and "Error" not in printed


def test_the_readmes_first_live_call_runs_as_written(relay_api, key, monkeypatch,
                                                     capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RELAY_URL", relay_api.url)
    monkeypatch.setenv("RELAY_KEY", key)
    exec(compile(readme_example("README.md", "A first live call"), "README.md: A first live call", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 and all(printed), printed  # the answer, then the streamed one
