"""config.toml and the configuration page, both rendered from the settings' declarations
(:mod:`monitor.settings.sections`): a setting's doc, unit, default and example are written
once, where the setting is declared, and never typed again.

``scripts/render_reference.py`` writes both files; its ``--check`` (and a test) fails when
either differs from what the declarations give.
"""

from __future__ import annotations

import json
import re
from dataclasses import MISSING, Field, fields
from typing import Any

from monitor.settings.sections import SECTIONS

#: What a key's name says about its unit (the unit column of the configuration page).
UNIT_SUFFIXES = (("_seconds", "s"), ("_ms", "ms"), ("_bytes", "bytes"), ("_bits", "bits"))

CONFIG_HEADER = """\
# voxmeter run: every key with its default. Override one key with
#   voxmeter run --config config.toml --set section.key=value
# Unknown keys, wrong types and bad values stop the daemon at start with one line naming the key.
# Generated from the settings' declarations (python scripts/render_reference.py): edit those,
# not this file.
"""

PAGE_HEADER = """\
# Configuration

`voxmeter run --config config.toml` reads one TOML file; every key is optional and takes the
default below when absent. `--set section.key=value` overrides one key (TOML value syntax:
`--set budget.bits=6`, `--set features.enabled='["f0", "embedding"]'`; a value that is not
valid TOML is taken as a bare string: `--set daemon.source=file:x.flac`). An unknown key, a
wrong type or a bad value stops the daemon at start with one line naming the key.

The repository's `config.toml` lists every key with its default and this documentation as
comments. This page and that file are generated from the settings' declarations.
"""


def default_of(item: Field[Any]) -> Any:
    """A field's default value (``default`` or ``default_factory``)."""
    if item.default is not MISSING:
        return item.default
    return item.default_factory()  # type: ignore[misc]


def toml_value(value: Any) -> str:
    """``value`` as a TOML literal (strings as basic strings, tuples as arrays)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def unit_of(item: Field[Any]) -> str:
    """The declared unit, else the one the key's name carries, else empty."""
    declared: str = item.metadata.get("unit", "")
    if declared:
        return declared
    return next((unit for suffix, unit in UNIT_SUFFIXES if item.name.endswith(suffix)), "")


def section_doc(kind: type) -> str:
    """A section's docstring as one line, without reStructuredText markup."""
    text = " ".join((kind.__doc__ or "").split())
    return re.sub(r"``([^`]*)``", r"\1", text)


def config_toml() -> str:
    """The repository's config.toml: every section and key, its default, its doc."""
    lines = [CONFIG_HEADER]
    for name, kind in SECTIONS.items():
        lines.append(f"[{name}]  # {section_doc(kind)}")
        for item in fields(kind):
            example = item.metadata.get("example", "")
            if example:
                lines.append(f"# e.g. {example}")
            lines.append(f"{item.name} = {toml_value(default_of(item))}  # {item.metadata['doc']}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def configuration_page() -> str:
    """docs/reference/configuration.md: one table per section."""
    lines = [PAGE_HEADER]
    for name, kind in SECTIONS.items():
        lines += [f"## `[{name}]`", "", section_doc(kind), ""]
        lines += ["| key | default | unit | what it does |", "|---|---|---|---|"]
        for item in fields(kind):
            default = _cell(toml_value(default_of(item)))
            doc = _cell(item.metadata["doc"])
            example = item.metadata.get("example", "")
            if example:
                doc += f"; e.g. `{_cell(example)}`"
            lines.append(f"| `{item.name}` | `{default}` | {unit_of(item)} | {doc} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
