"""The architecture page draws the import layers that tests/test_import_rules.py enforces.

docs/architecture.md's first code block lists the packages layer by layer, highest first
(``evaluate | daemon   corpus audit | voxmeter run``: the names before the description); it must
be LAYERS read from the top, so a reader never learns a layering the code does not have.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_import_rules import LAYERS

PAGE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


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
