"""How a daemon setting is declared and checked: :func:`setting` makes a documented dataclass
field, and each check returns a problem string for a bad value (else None), which
:mod:`monitor.settings.config` turns into a ConfigError naming the key. The records themselves
are :mod:`monitor.settings.sections`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import field
from typing import Any

from monitor.errors import InputError
from monitor.sources.spec import parse_source, parse_sources
from monitor.userfiles import socket_path_problem
from monitor.vocabulary import EXTRACTORS, TRACKING_FEATURE, FigureKey

Check = Callable[[Any], str | None]


def setting(
    default: Any,
    doc: str,
    check: Check | None = None,
    *,
    secret: bool = False,
    unit: str = "",
    example: str = "",
) -> Any:
    """A documented field; ``check`` returns a problem string for a bad value, else None.
    A ``secret`` value is never shown in an error (the key is named, the value is not).
    ``unit`` is stated where the key's name does not carry it (``_seconds``, ``_ms``,
    ``_bytes`` do); ``example`` is a TOML line shown commented out above the key in config.toml
    and on the configuration page (one source for both: :mod:`monitor.settings.reference`)."""
    metadata = {"doc": doc, "check": check, "secret": secret, "unit": unit, "example": example}
    return field(default=default, repr=not secret, metadata=metadata)


def positive(value: float) -> str | None:
    return None if value > 0 and math.isfinite(value) else "must be > 0"


def non_negative(value: float) -> str | None:
    return None if value >= 0 and math.isfinite(value) else "must be >= 0"


def fraction(value: float) -> str | None:
    return None if 0 < value < 1 else "must be between 0 and 1 (exclusive)"


def share(value: float) -> str | None:
    return None if 0 <= value < 1 else "must be in [0, 1)"


def rare_rate(value: float) -> str | None:
    """0 (off), or a rate the shipped quantiles cover: 0.001..0.1."""
    return None if value == 0 or 0.001 <= value <= 0.1 else "must be 0 (off) or in 0.001..0.1"


def window_length(value: float) -> str | None:
    """A window's audio is held until it closes, and a window shorter than half a second gives
    features next to nothing: 0.5..60 s (the calibration's buckets are 3, 6 and 12 s)."""
    return None if 0.5 <= value <= 60 else "must be between 0.5 and 60 seconds"


def one_of(*choices: str) -> Check:
    def check(value: str) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}"

    return check


def timezone(value: str) -> str | None:
    """Empty (the system's zone) or an IANA name the tz database knows."""
    from monitor.settings.zones import find_zone  # zoneinfo only when a zone is named

    if not value or find_zone(value) is not None:
        return None
    return "must be an IANA time zone name such as Europe/Paris (empty: the system's)"


def configuration_url(value: str) -> str | None:
    """Home Assistant opens http(s) links and its own homeassistant:// pages."""
    if not value or value.startswith(("http://", "https://", "homeassistant://")):
        return None
    return "must start with http://, https:// or homeassistant:// (empty: the documentation)"


def port(value: int) -> str | None:
    """A port to connect to: 0 is no port."""
    return None if 1 <= value <= 65535 else "must be a TCP port 1..65535"


def listen_port(value: int) -> str | None:
    """A port to listen on: 0 asks the kernel for any free one."""
    return None if 0 <= value <= 65535 else "must be a TCP port 1..65535 (or 0 = any free port)"


def source(value: str) -> str | None:
    try:
        parse_source(value)
    except InputError as error:
        return error.problem
    return None


def sources(value: tuple[str, ...]) -> str | None:
    if not value:
        return None  # daemon.source alone
    try:
        parse_sources(value)
    except InputError as error:
        return error.problem
    return None


def features(value: tuple[str, ...]) -> str | None:
    known = EXTRACTORS
    if not value:
        return "must name at least one feature"
    bad = [v for v in value if v not in known]
    if bad or len(set(value)) != len(value):
        return f"must be distinct names among {', '.join(known)}"
    if TRACKING_FEATURE not in value:
        return "must include embedding (the tracker follows voices by their embedding)"
    return None


def measure(value: str) -> str | None:
    try:
        FigureKey.parse(value)
    except ValueError as error:
        return str(error)
    return None


def cosine(value: float) -> str | None:
    return None if -1 <= value <= 1 else "must be a cosine in [-1, 1]"


def delta(value: float) -> str | None:
    return None if 0 < value < 1 else "must be in (0, 1)"


def socket_path(value: str) -> str | None:
    """A Unix socket's path: empty, or absolute and short enough for ``sun_path`` (the same
    rule ``voxmeter relay`` applies: :func:`monitor.userfiles.socket_path_problem`)."""
    problem = socket_path_problem(value)
    return None if problem is None else problem.split(": ", 1)[1]


def topic_level(value: str) -> str | None:
    if value and not any(c in value for c in "+#") and not value.startswith("/"):
        return None
    return "must be a non-empty MQTT topic without + or # (and not starting with /)"


def node_id(value: str) -> str | None:
    return None if re.fullmatch(r"[a-zA-Z0-9_-]*", value) else "must match [a-zA-Z0-9_-]*"


def alpha(value: str) -> str | None:
    from monitor.protect.mcadams import parse_alpha

    try:
        parse_alpha(value)
    except ValueError as error:
        return str(error).split(": ", 1)[1]
    return None
