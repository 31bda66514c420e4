"""Structured logs: one line per event, key=value or JSON, aliases only (never audio or names)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime
from typing import Any, Protocol

logger = logging.getLogger(__name__)


class LineFormatter(logging.Formatter):
    """One line per record: ``key=value`` pairs or one JSON object (no audio, aliases only)."""

    def __init__(self, style: str) -> None:
        super().__init__()
        self.json = style == "json"

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created)
            .astimezone()
            .isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields.update(getattr(record, "fields", {}))
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info).replace("\n", " | ")
        if self.json:
            return json.dumps(fields, default=str, separators=(",", ":"))
        return " ".join(f"{k}={_kv(v)}" for k, v in fields.items())


def _kv(value: Any) -> str:
    """One value of a ``key=value`` line; quoted (JSON, which escapes ESC, CR, TAB and every
    invisible character) when it has a space, ``=`` or anything not printable, so that an alias
    can neither forge a log line nor recolour a terminal."""
    if isinstance(value, float):
        return f"{value:.4g}"
    text = str(value)
    quote = " " in text or "=" in text or not text or not text.isprintable()
    return json.dumps(text) if quote else text


class LogStyle(Protocol):
    """What logging is configured from (:class:`~monitor.settings.sections.LoggingSettings`;
    the relay process has its own, without importing the daemon's settings)."""

    @property
    def level(self) -> str: ...
    @property
    def format(self) -> str: ...


def configure_logging(settings: LogStyle, stream: Any = None) -> None:
    """Route the ``monitor`` loggers to one structured handler on stderr."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(LineFormatter(settings.format))
    root = logging.getLogger("monitor")
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.level.upper())
    root.propagate = False
