"""The README's SDK examples of the OpenAI and Anthropic batch APIs run as written, against a real `relay api`
and real workers."""

from __future__ import annotations

import re

import pytest

from devtools.processes import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("workers")]


def readme_example(heading: str) -> str:
    """The first ```python block of the README section HEADING."""
    text = (ROOT / "README.md").read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, f"no python example under {heading}"
    return found.group(1)


@pytest.mark.parametrize(("heading", "said"), [
    ("OpenAI-compatible Files and Batches", "completed BatchRequestCounts(completed=3, failed=0, total=3)"),
    ("Anthropic-compatible Message Batches", "question-2 "),
])
def test_the_readme_example_runs_as_written(heading, said, relay_api, key, workers, monkeypatch,
                                            capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RELAY_URL", relay_api.url)
    monkeypatch.setenv("RELAY_KEY", key)
    exec(compile(readme_example(heading), f"README.md: {heading}", "exec"), {})  # our own README
    printed = capsys.readouterr().out
    assert said in printed and "question-0" in printed and "Error" not in printed
