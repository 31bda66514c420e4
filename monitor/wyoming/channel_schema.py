"""The schema of the relay channel's messages (:mod:`monitor.wyoming.channel`), checked by
both ends on every message they read: the relay process on what a measuring process sends, the
measuring process on what the relay sends. A message that does not fit is one warning and is
ignored (a subscription that does not fit ends that connection); nothing a peer writes can
raise anything else.

A kind this version does not know fits (a later version may send it; each end ignores it).
Each known kind's fields, by the Python types JSON gives (``int | float`` for numbers, never bool):

- ``subscribe`` (measuring → relay, first): ``sources``: a list of source specs (strings).
- ``protect`` (measuring → relay): ``protect``: bool; ``speaker``: string or null; optional
  ``mode``, ``method``: strings, ``enabled``: bool, ``alpha``: a string, number or list of
  numbers (:func:`monitor.protect.mcadams.parse_alpha` reads it).
- ``hello`` (relay → measuring): ``relay``: string; ``unmeasured``: {source: seconds}.
- ``event`` (relay → measuring): ``source``, ``stream``: strings; ``unmeasured``: seconds;
  ``type``: ``audio-start``/``-chunk``/``-stop``; ``data``: an object, an audio format the
  table accepts (:func:`monitor.wyoming.formats.audio_problem`); optional ``gap``: bool.
- ``left`` (relay → measuring): ``source``, ``stream``: strings; ``unmeasured``: seconds.

Numpy-free: the relay process imports it.
"""

from __future__ import annotations

from typing import Any

from monitor.wyoming.formats import audio_problem

AUDIO_TYPES = ("audio-start", "audio-chunk", "audio-stop")
MAX_SOURCES = 64
"""Most sources one subscription names (a household has a few satellites)."""

_NUMBER = "a number of seconds"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


def _is_text(value: object) -> bool:
    return isinstance(value, str)


_Fields = dict[str, tuple[str, Any]]

_REQUIRED: dict[str, _Fields] = {
    "subscribe": {
        "sources": (
            f"a list of at most {MAX_SOURCES} source names",
            lambda v: isinstance(v, list) and len(v) <= MAX_SOURCES and all(map(_is_text, v)),
        ),
    },
    "protect": {
        "protect": ("true or false", lambda v: isinstance(v, bool)),
    },
    "hello": {
        "relay": ("a string", _is_text),
        "unmeasured": (
            "an object of seconds per source",
            lambda v: isinstance(v, dict) and all(map(_is_number, v.values())),
        ),
    },
    "event": {
        "source": ("a string", _is_text),
        "stream": ("a string", _is_text),
        "unmeasured": (_NUMBER, _is_number),
        "type": (f"one of {', '.join(AUDIO_TYPES)}", lambda v: v in AUDIO_TYPES),
        "data": ("an object", lambda v: isinstance(v, dict)),
    },
    "left": {
        "source": ("a string", _is_text),
        "stream": ("a string", _is_text),
        "unmeasured": (_NUMBER, _is_number),
    },
}

_OPTIONAL: dict[str, _Fields] = {
    "protect": {
        "speaker": ("a string or null", lambda v: v is None or _is_text(v)),
        "mode": ("a string", _is_text),
        "method": ("a string", _is_text),
        "enabled": ("true or false", lambda v: isinstance(v, bool)),
        "alpha": (
            "a string, a number or a list of numbers",
            lambda v: _is_text(v) or _is_number(v) or (isinstance(v, list) and len(v) <= 2),
        ),
    },
    "event": {"gap": ("true or false", lambda v: isinstance(v, bool))},
}


def message_problem(header: dict[str, Any], payload_bytes: int = 0) -> str | None:
    """Why a channel message (its JSON header and the size of its payload) does not fit the
    schema, in one line naming the kind, field and value; None when it fits."""
    kind = header.get("kind")
    if not isinstance(kind, str):
        return f"a message whose kind is {str(kind)[:40]}, not a name"
    if kind not in _REQUIRED:  # a later version's: each end ignores what it does not know
        return None
    for name, (expected, fits) in _REQUIRED[kind].items():
        if name not in header:
            return f"{kind} without {name}"
        if not fits(header[name]):
            return f"{kind} {name} must be {expected}, got {str(header[name])[:40]}"
    for name, (expected, fits) in _OPTIONAL.get(kind, {}).items():
        if name in header and not fits(header[name]):
            return f"{kind} {name} must be {expected}, got {str(header[name])[:40]}"
    if kind == "event":
        problem = audio_problem(header["type"], header["data"], payload_bytes)
        if problem is not None:
            return f"event: {problem}"
    return None
