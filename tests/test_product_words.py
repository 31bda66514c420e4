"""The product speaks of the product: no history of how it was built in what a user or a reader
of the code meets.

README.md, docs/, config.toml, deploy/, monitor/ and tests/ (names, comments, docstrings, pages)
must not mention issue numbers, people or their roles, branches or merges, worktrees, sessions of
work or commit hashes: a user does not know what "issue 27" or "a3f9c2e" is, and a reader cannot
tell which of two figures is current. History belongs in CHANGELOG.md, which is not scanned.

A pure text scan (no imports of the package): fast, and it fails naming file, line and rule.

Exceptions, on purpose:

* "session" is a product word for an ONNX Runtime inference session, an MQTT session and a
  Wyoming audio session: a line that names ONNX, InferenceSession, MQTT, Wyoming, a broker or a
  client is not a work session.
* a sha256 digest (64 hex digits) is a product fact (the model weights' checksums): only runs of
  7-12 or exactly 40 hex digits count as a commit hash, and not inside a longer token
  (UUIDs, ``0x`` numbers, cache keys of 32 or 64 digits).
* the benchmark pages (docs/benchmarks/) name the commit each result was measured at: that is
  the result's provenance, so the commit rule does not apply there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: What is scanned: single files, and folders with the suffixes of text a reader meets there.
FILES = ("README.md", "config.toml")
FOLDERS: dict[str, tuple[str, ...]] = {
    "docs": (".md", ".yml", ".yaml"),
    "deploy": (".md", ".py", ".sh", ".toml", ".yml", ".yaml", ".json", ".conf", ".service", ""),
    "monitor": (".py", ".md", ".toml"),
    "tests": (".py", ".md", ".toml", ".yml", ".yaml"),
}
SKIPPED = frozenset({Path(__file__).resolve()})

#: rule name -> pattern (case-insensitive). Each names a kind of history, not of product.
RULES: dict[str, re.Pattern[str]] = {
    "issue number": re.compile(
        r"\b(?:issues?|tickets?|pull requests?|PR)\s*#?\d+\b|(?<![\w&/#])#\d{1,5}\b", re.I
    ),
    "person or role": re.compile(
        r"\b(?:engineers?|engineer's|the lead|lead's|lead engineer|helper engineers?"
        r"|the \w+ helper(?:'s)?(?! (?:function|class|module|method|thread|process|script))"
        r"|CEO|reviewers?)\b",
        re.I,
    ),
    "branch or merge": re.compile(
        r"\b(?:this branch|that branch|the branch|branch(?:es)? ['`]\w+|main branch|on main\b"
        r"|main's\b|merged? (?:into|with|from) (?:main|master)|merge commit|rebased?"
        r"|before (?:the|this) merge|after (?:the|this) merge|(?:the \w+ )?merge landed)",
        re.I,
    ),
    "worktree": re.compile(r"\bwork ?trees?\b", re.I),
    "work session": re.compile(
        r"\b(?:(?:this|last|next|previous|that|today's|each|one|the) (?:work(?:ing)? )?session"
        r"|sessions? of work|session \d+)\b",
        re.I,
    ),
    "commit hash": re.compile(
        r"(?<![\w\-./])(?!0x)(?!\d+e\d+\b)(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])"
        r"(?:[0-9a-f]{7,12}|[0-9a-f]{40})(?![\w\-])"
    ),
}

#: A line naming one of these uses "session" as a product word.
SESSION_PRODUCT_WORDS = re.compile(
    r"onnx|inferencesession|ort\b|mqtt|wyoming|broker|client|satellite|aiohttp|http|websocket"
    r"|sqlite|database|pytest|fixture|scope=|sess\b",
    re.I,
)
COMMIT_RULE_EXEMPT = ("docs/benchmarks/",)


def scanned_files(root: Path = ROOT) -> Iterator[Path]:
    """Every file the rules apply to, in a stable order."""
    for name in FILES:
        if (root / name).is_file():
            yield root / name
    for folder, suffixes in FOLDERS.items():
        for path in sorted((root / folder).rglob("*")):
            if not path.is_file() or path.resolve() in SKIPPED:
                continue
            if "__pycache__" in path.parts or path.suffix not in suffixes:
                continue
            yield path


def hits(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: rule: text`` for every line of ``path`` that speaks of history."""
    relative = path.relative_to(root).as_posix()
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for rule, pattern in RULES.items():
            match = pattern.search(line)
            if match is None:
                continue
            if rule == "work session" and SESSION_PRODUCT_WORDS.search(line):
                continue
            if rule == "commit hash" and relative.startswith(COMMIT_RULE_EXEMPT):
                continue
            found.append(f"{relative}:{number}: {rule}: {match.group(0)!r}")
    return found


def test_the_product_speaks_of_the_product() -> None:
    problems = [hit for path in scanned_files() for hit in hits(path)]
    assert problems == [], "history belongs in CHANGELOG.md:\n" + "\n".join(problems)


def test_each_rule_catches_what_it_names(tmp_path: Path) -> None:
    """The rules fail on the words they name and pass the product words beside them."""
    bad = {
        "issue number": "as issue 27 asks",
        "person or role": "owned by the exporters helper",
        "branch or merge": "measured on this branch",
        "worktree": "from a git worktree",
        "work session": "not re-measured this session",
        "commit hash": "the release 4a3c7ff",
    }
    good = [
        "the ONNX Runtime session runs one thread",
        "a client's Wyoming session ends at audio-stop",
        "sha256 = '" + "0123456789abcdef" * 4 + "'",
        "stream wake#3 ended; uuid 123e4567-e89b-12d3-a456-426614174000; 0xdeadbeef1",
        "two tracks merge into one; an if branch",
    ]
    for rule, line in bad.items():
        (tmp_path / "page.md").write_text(line + "\n", encoding="utf-8")
        assert [h.split(": ")[1] for h in hits(tmp_path / "page.md", tmp_path)] == [rule], line
    (tmp_path / "page.md").write_text("\n".join(good) + "\n", encoding="utf-8")
    assert hits(tmp_path / "page.md", tmp_path) == []
