"""Numbers a user typed: ASCII digits only.

Python's ``int()`` and ``float()`` read every Unicode decimal digit: ``int("٧")`` is 7 and
``float("７.５")`` is 7.5, so an option or a file line that looks like a word to the user was taken
as a number without a word said (``compose --steps ٧`` would compose seven steps).
Every place that turns a user's text into a number goes through here; a non-ASCII numeral is a
ValueError like any other non-number, and the caller's message names the option or file.
"""

from __future__ import annotations


def ascii_int(text: str) -> int:
    """``int(text)`` for ASCII text only (sign, digits, underscores, spaces as Python reads them);
    ValueError for any other character, Unicode digits included."""
    if not text.isascii():
        raise ValueError(f"invalid literal for an integer: {text!r} (ASCII digits only)")
    return int(text)


def ascii_float(text: str) -> float:
    """``float(text)`` for ASCII text only; ValueError for anything else (``inf`` and ``nan`` pass,
    as with float(): the callers say why they refuse them)."""
    if not text.isascii():
        raise ValueError(f"could not convert to a number: {text!r} (ASCII digits only)")
    return float(text)


def ascii_digits(text: str) -> bool:
    """``text`` is one or more of 0-9 (``str.isdigit`` also takes ``٧``, ``７`` and ``²``)."""
    return text.isascii() and text.isdigit()
