"""What the site's build cannot check: the README and the architecture page's layer picture.

``mkdocs build --strict`` (part of ``make test``) checks every page and link under docs/. The
README lives outside it: it stays a landing page (at most 250 lines) whose links resolve.
docs/architecture.md's first code block lists the packages layer by layer, highest first
(``evaluate | daemon   corpus audit | voxmeter run``: the names before the description); it must
be LAYERS read from the top, so a reader never learns a layering the code does not have.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_import_rules import LAYERS

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
README = ROOT / "README.md"
README_MAX_LINES = 250


def drawn_layers(text: str) -> list[set[str]]:
    """The package names of each line of the page's first code block, top line first."""
    block = re.search(r"^```\n(.*?)^```", text, re.M | re.S)
    assert block, "docs/architecture.md has no code block with the layers"
    layers = []
    for line in block.group(1).splitlines():
        names = re.split(r"\s{3,}", line.strip(), maxsplit=1)[0]
        layers.append({name for name in re.split(r"[\s|]+", names) if name})
    return layers


def test_the_page_draws_the_enforced_layers() -> None:
    drawn = drawn_layers(PAGE.read_text(encoding="utf-8"))
    assert drawn == [set(layer) for layer in reversed(LAYERS)]


def test_a_wrong_drawing_is_caught() -> None:
    wrong = "```\ncli   commands\ndaemon | evaluate | tracking   the rest\n```\n"
    assert drawn_layers(wrong) == [{"cli"}, {"daemon", "evaluate", "tracking"}]
    assert drawn_layers(wrong) != [set(layer) for layer in reversed(LAYERS)]


def test_the_readme_is_a_landing_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move detail to docs/"


def test_every_readme_link_resolves() -> None:
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets, "the README links into the documentation"
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert missing == []
