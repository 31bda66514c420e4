"""The time zone budget periods follow: named, else the system's (the TZ variable, which the
Home Assistant Supervisor sets to Home Assistant's zone in every add-on, else /etc/localtime),
else UTC. A DST-aware zone, not today's fixed offset, so midnight stays midnight all year."""

from __future__ import annotations

import os
from datetime import UTC, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

LOCALTIME = Path("/etc/localtime")


def find_zone(name: str) -> tzinfo | None:
    """The zone called ``name`` (IANA), None when the tz database has no such zone."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def system_zone() -> tzinfo:
    """This system's zone: TZ (``Europe/Paris`` or ``:Europe/Paris``), /etc/localtime, UTC."""
    named = os.environ.get("TZ", "").lstrip(":")
    if named:
        zone = find_zone(named)
        if zone is not None:
            return zone
    try:
        with LOCALTIME.open("rb") as file:
            return ZoneInfo.from_file(file, key="localtime")
    except (OSError, ValueError):
        return UTC


def budget_zone(name: str) -> tzinfo:
    """``budget.timezone`` (checked when the settings were loaded) or the system's zone."""
    return (find_zone(name) if name else None) or system_zone()


def zone_name(zone: tzinfo) -> str:
    """What to call ``zone`` in logs and entities (its IANA key where it has one)."""
    key = getattr(zone, "key", None)
    if key == "localtime":
        return "the system's local time"
    return str(key) if key else str(zone)
