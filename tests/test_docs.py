"""The README is a front door and docs/ holds the rest: every relative link of the README and docs/ resolves (the
file exists, the #anchor is one of its headings), every docs page is reachable from the README, the README's test
command is the one CI runs, every setting is in the configuration reference, and every catalog snippet is a valid
catalog."""

from __future__ import annotations

import re
import textwrap
from dataclasses import fields
from pathlib import Path

import yaml

from app.settings import Settings
from schemas.catalog import CatalogSchema

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """The #fragments GitHub gives the headings of PATH (lowercased, punctuation dropped, spaces to hyphens)."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", _prose(path.read_text()), re.MULTILINE):
        slug = base = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = 0
        while slug in found:
            n += 1
            slug = f"{base}-{n}"
        found.add(slug)
    return found


def _prose(text: str) -> str:
    """TEXT without its fenced code blocks (a `# comment` there is no heading, a `[x](y)` no link)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def links(path: Path) -> list[str]:
    """The relative link targets of PATH, outside code."""
    text = re.sub(r"`[^`\n]*`", "", _prose(path.read_text()))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in links(path):
        file, _, fragment = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(f"{target}: no such heading in {dest.name}")
    return broken


def test_every_relative_link_of_the_readme_and_docs_names_a_file_and_heading_that_exist() -> None:
    broken = {str(p.relative_to(ROOT)): b for p in [README, *PAGES] if (b := broken_links(p))}
    assert not broken, broken


def test_a_link_to_a_missing_heading_or_file_is_caught(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## A part\n")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n[ok](other.md#a-part) [here](#page) [gone](other.md#no-part) [nowhere](missing.md)\n"
                    "```sh\n# not a heading [code](nothing.md)\n```\n")
    assert broken_links(page) == ["other.md#no-part: no such heading in other.md", "missing.md: no such file"]


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(README)}
    unlinked = [p.name for p in PAGES if p.resolve() not in linked]
    assert PAGES and not unlinked, unlinked


def test_the_readme_is_a_front_door_of_a_few_hundred_lines() -> None:
    assert len(README.read_text().splitlines()) <= 350


def test_the_readmes_two_commands_are_the_ones_that_exist_and_ci_runs_the_test_command() -> None:
    text = README.read_text()
    assert "scripts/dev.sh up" in text and "\nscripts/test.sh " in text
    assert (ROOT / "scripts/dev.sh").exists() and "scripts/test.sh" in (ROOT / ".ci/run").read_text()


def test_every_setting_has_a_row_in_the_configuration_reference() -> None:
    rows = [line for line in (ROOT / "docs/configuration.md").read_text().splitlines() if line.startswith("| `RELAY_")]
    names = ["RELAY_" + f.name.upper() for f in fields(Settings)]
    missing = [name for name in names if not any(f"`{name}`" in row for row in rows)]
    assert not missing, missing


def test_every_yaml_snippet_of_the_readme_and_docs_is_a_valid_part_of_a_catalog() -> None:
    snippets = [(p.name, textwrap.dedent(body)) for p in [README, *PAGES]
                for _, body in re.findall(r"^( *)```yaml\n(.*?)^\1```", p.read_text(), re.MULTILINE | re.DOTALL)]
    assert len(snippets) >= 3
    for name, body in snippets:
        assert not CatalogSchema().validate(yaml.safe_load(body), partial=True), (name, body)
