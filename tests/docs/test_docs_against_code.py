"""What a reader is told must be so: the documentation checked against the code.

- every ``voxmeter …`` command line shown in README.md, docs/, the add-on's documentation and the
  program's own messages is parsed by the real command line (click's ``make_context``, nothing
  executed): a subcommand or an option that does not exist fails the test;
- every configuration key named in prose (``[section] key``, ``section.key``) is a field of the
  settings dataclasses;
- nothing cites a document that does not ship (``DESIGN``, its ``§`` sections);
- no generated benchmark page shows a path of the machine the benchmark ran on.

Command lines in the documentation use the usual metasyntax: ``[--x]`` (optional), ``a|b``
(either), ``…`` or ``...`` (more), ``UPPER`` placeholders. Brackets are dropped, each alternative
of a subcommand is checked, and placeholders are parsed as the values they stand for.
"""

from __future__ import annotations

import ast
import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import typer.main

from monitor.cli import app
from monitor.settings.sections import SECTIONS

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "deploy" / "homeassistant-addon").rglob("*.md"),
    ]
)
SHIPPED_TEXT = [
    *PAGES,
    ROOT / "config.toml",
    *sorted((ROOT / "monitor").rglob("*.py")),
    *sorted(p for p in (ROOT / "deploy").rglob("*") if p.suffix in {".toml", ".yml", ".yaml"}),
]
ROOT_COMMAND = typer.main.get_command(app)

#: "voxmeter" then a subcommand or an option, up to the end of a code span or line (not the
#: system user of ``sudo -u voxmeter``).
INVOCATION = re.compile(
    r"(?<![\w./-])(?<!-u )(?<!your )voxmeter((?: +(?:-|[a-z])[^\n`]*)|(?= *$))", re.M
)
#: Where a shell line stops being voxmeter's arguments.
SHELL_END = re.compile(r"\s(?:#|&&|\|\||;|\||>|2>|<)\s.*$|\s#.*$")


def _code(text: str) -> Iterator[str]:
    """The code of a Markdown page: fenced blocks (continuation lines joined) and code spans."""
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S):
        yield from block.replace("\\\n", " ").splitlines()
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
    yield from re.findall(r"`([^`\n]+)`", prose)


def _strings(path: Path) -> Iterator[str]:
    """Every string literal of a module; an f-string's fields read as a placeholder ``X``."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value
        elif isinstance(node, ast.JoinedStr):
            yield "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)


def command_lines() -> list[tuple[str, str]]:
    """(where, the arguments after ``voxmeter``) of every command line shown to a reader."""
    found: list[tuple[str, str]] = []
    for page in PAGES:
        where = str(page.relative_to(ROOT))
        for code in _code(page.read_text(encoding="utf-8")):
            found += [(where, m.group(1)) for m in INVOCATION.finditer(code)]
    names = set(ROOT_COMMAND.commands)  # type: ignore[attr-defined]
    for module in sorted((ROOT / "monitor").rglob("*.py")):
        where = str(module.relative_to(ROOT))
        for text in _strings(module):
            for m in re.finditer(r"(?<![\w./-])voxmeter ([a-z][\w-]*)([^\n`\"')]*)", text):
                # prose ("voxmeter measures …") is not a command line; a subcommand or an
                # option after it makes one
                if m.group(1) in names or m.group(2).lstrip().startswith("-"):
                    found.append((where, f" {m.group(1)}{m.group(2)}"))
    return found


def _tokens(arguments: str) -> list[str]:
    """The argument vector a reader would type: shell syntax, metasyntax removed."""
    arguments = SHELL_END.sub("", arguments.strip())
    try:
        words = shlex.split(arguments)
    except ValueError:  # a span cut inside a quotation
        words = arguments.split()
    tokens: list[str] = []
    for word in words:
        word = word.strip("[]{}").rstrip(",;:.)")
        if word in ("", "...", "…") or word.startswith(("…", "...")):
            continue
        if word.startswith("--") and "/--" in word:  # "--scores/--key": both options
            tokens += word.split("/")
        else:
            tokens.append(word.split("|")[0] if word.startswith("-") else word)
    return tokens


def _resolve(tokens: list[str]) -> tuple[list[tuple[Any, list[str]]], str | None]:
    """The commands the tokens name, each with the arguments it is given; or a problem. (Typer
    carries its own copy of click: commands are told apart from groups by their subcommands.)"""
    command: Any = ROOT_COMMAND
    path = ["voxmeter"]
    rest = list(tokens)
    while hasattr(command, "commands") and rest and not rest[0].startswith("-"):
        word = rest.pop(0)
        if word.isupper():  # COMMAND, OPTIONS: the general form
            return [], None
        names = word.split("|")
        unknown = [n for n in names if n not in command.commands]
        if unknown:
            return [], f"{' '.join(path)} has no command {unknown[0]!r}"
        if len(names) > 1:  # "list|show": each alternative takes the rest
            return [(command.commands[n], rest) for n in names], None
        command = command.commands[word]
        path.append(word)
    return [(command, rest)], None


def _problem(arguments: str) -> str | None:
    """Why the command line would not parse, or None."""
    tokens = _tokens(arguments)
    commands, problem = _resolve(tokens)
    if problem:
        return problem
    for command, rest in commands:
        known = {o for p in command.params for o in [*p.opts, *p.secondary_opts]}
        for word in rest:
            name = word.split("=", 1)[0]
            if name.startswith("--") and name not in known and name != "--help":
                return f"voxmeter {command.name} has no option {name}"
        try:
            command.make_context(command.name or "voxmeter", list(rest), resilient_parsing=True)
        except Exception as error:  # click's UsageError and kin: a line that does not parse
            return f"voxmeter {command.name}: {getattr(error, 'format_message', error.__str__)()}"
    return None


def test_command_lines_are_found_everywhere_a_reader_sees_them() -> None:
    found = command_lines()
    places = {where for where, _ in found}
    assert "README.md" in places
    assert "docs/operations.md" in places
    # the add-on's pages are read too, though a household has no shell to type a command in
    assert ROOT / "deploy" / "homeassistant-addon" / "voxmeter" / "DOCS.md" in PAGES
    assert any(p.startswith("monitor/") for p in places)
    assert len(found) > 100


def test_every_command_line_parses() -> None:
    wrong = [
        f"{where}: voxmeter{arguments.rstrip()}: {problem}"
        for where, arguments in command_lines()
        if (problem := _problem(arguments))
    ]
    assert wrong == []


@pytest.mark.parametrize(
    "arguments",
    [
        " enroll --corpus",  # the option that never existed
        " enroll CORPUS --db DB --utterances 5 --locale",
        " db list|shows ALIAS",
        " population add CORPUS",
        " score --scores/--keys",
        " compose --epsilon 0.5 --stepz 10",  # compose takes unknown options: named all the same
        " run --sources mic",
    ],
)
def test_a_command_line_that_does_not_exist_is_caught(arguments: str) -> None:
    assert _problem(arguments) is not None


@pytest.mark.parametrize(
    "arguments",
    [
        " enroll /srv/household --db voxmeter.db --utterances 5 --local   # local profiles",
        " db list|show ALIAS|remove ALIAS --db voxmeter.db",
        " run [--config F] [--set k=v]... [--db] [--source] [--fast] [--duration S]",
        " score --scores/--key",
        " COMMAND --help",
    ],
)
def test_the_metasyntax_of_the_pages_is_read(arguments: str) -> None:
    assert _problem(arguments) is None


def test_the_embedding_option_names_the_real_default_and_every_backend() -> None:
    from monitor.features.base import DEFAULT_EMBEDDING, EMBEDDING_BACKENDS

    enroll = ROOT_COMMAND.commands["enroll"]  # type: ignore[attr-defined]
    (option,) = [p for p in enroll.params if "--embedding" in p.opts]
    assert f"{DEFAULT_EMBEDDING} (default)" in option.help
    named = set(re.findall(r"[a-z0-9]+(?:-int8)?", option.help.split(":", 1)[1]))
    assert set(EMBEDDING_BACKENDS) <= named


KEY_IN_TABLE = re.compile(r"\[([a-z_]+)\][ \t]+([a-z_]+)\b(?=[ \t]*(?:=|`))")
KEY_DOTTED = re.compile(r"(?<![\w./$-])([a-z_]+)\.([a-z_]+)\b(?![\w(/-]|\.[a-z])")


def named_keys(text: str) -> Iterator[str]:
    """``section.key`` for every key the text names: ``[section] key =`` or ``section.key``
    (a known section's name first, so ``monitor.cli`` or ``report.md`` are not keys)."""
    for section, key in KEY_IN_TABLE.findall(text):
        yield f"{section}.{key}"
    for section, key in KEY_DOTTED.findall(text):
        if section in SECTIONS:
            yield f"{section}.{key}"


def _code_names() -> set[str]:
    """Every module, function and class name of the package: ``ledger.alert_figures`` in prose
    names code, not a key."""
    names = set()
    for module in (ROOT / "monitor").rglob("*.py"):
        names.add(module.stem)
        names.update(re.findall(r"^\s*(?:async def|def|class) (\w+)", module.read_text(), re.M))
    return names


def _not_a_key(name: str, known: set[str], code: set[str]) -> bool:
    """Whether a dotted name in prose is something else: a file (``ledger.py``, a host
    ``homeassistant.local``), code (``ledger.alert_figures``), or a family of keys
    (``audio.retry_*``)."""
    key = name.split(".")[1]
    if key in ("py", "md", "json", "toml", "local"):
        return True
    if key.endswith("_"):
        return any(k.startswith(name) for k in known)
    return key in code


def test_every_config_key_named_in_prose_exists() -> None:
    known = {f"{s}.{f.name}" for s, kind in SECTIONS.items() for f in fields(kind)}
    code = _code_names()
    wrong = []
    for path in [*PAGES, *sorted((ROOT / "monitor").rglob("*.py"))]:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".py":
            text = "\n".join(_strings(path))
        wrong += [
            f"{path.relative_to(ROOT)}: {key}"
            for key in set(named_keys(text))
            if key not in known and not _not_a_key(key, known, code)
        ]
    assert sorted(wrong) == []


def test_a_key_that_does_not_exist_is_caught() -> None:
    text = 'Set `[protect] modes = "exceeded"`, or `daemon.exit_at_start`; see monitor.cli.'
    assert sorted(named_keys(text)) == ["daemon.exit_at_start", "protect.modes"]
    known = {"audio.retry_min_seconds"}
    code = _code_names()
    assert not any(_not_a_key(k, known, code) for k in ("daemon.exit_at_start", "protect.modes"))
    assert all(
        _not_a_key(k, known, code) for k in ("ledger.py", "ledger.alert_figures", "audio.retry_")
    )


def test_nothing_cites_a_document_that_does_not_ship() -> None:
    # the papers are cited by number only where docs/measures.md lists them
    cited = re.compile(r"\bDESIGN\b|(?<!RFC \d{4} )§")
    wrong = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in SHIPPED_TEXT
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if cited.search(line)
    ]
    assert wrong == []
    assert "**paper 000**" in (ROOT / "docs" / "measures.md").read_text(encoding="utf-8")


DEVELOPMENT_PATH = re.compile(r"(?<![\w.])(?:/tmp|/work|/root|/home)/")


def test_no_benchmark_page_shows_a_development_machine_path() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    from render_benchmarks import portable

    pages = sorted((ROOT / "docs" / "benchmarks").glob("*.md"))
    assert pages
    wrong = [
        f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
        for page in pages
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if DEVELOPMENT_PATH.search(line)
    ]
    assert wrong == []
    recorded = (
        "flock /tmp/bench.lock env PYTHONPATH=. python -m bench tracking --baseline /tmp/b469 "
        "--out /tmp/t2/big/ecapa.json ../x /work/shared/data/speechocean762 --cache /root/a.npz"
    )
    assert not DEVELOPMENT_PATH.search(portable(recorded))
    assert "--baseline <checkout of the previous release>" in portable(recorded)
