"""Text from users (aliases, metadata) made safe to print on a terminal or in one log line."""

from __future__ import annotations


def printable(text: object) -> str:
    """``str(text)`` with every non-printable character escaped as Python's repr does it.

    ESC, OSC, CR, TAB, newlines, other C0/C1 controls and invisible format characters
    (``\\u200b``, ``\\u2028``, ...) become ``\\x1b``, ``\\t``, ``\\u2028``...: an alias can then
    neither recolour or retitle a terminal nor forge a log line. Printable non-ASCII letters
    stay as they are.
    """
    value = str(text)
    if value.isprintable():
        return value
    return "".join(c if c.isprintable() else _escape(c) for c in value)


def _escape(char: str) -> str:
    return repr(char)[1:-1]
