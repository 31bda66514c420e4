"""Structured logs: one line per event, key=value or JSON, aliases only (never audio or names)."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
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


WARNING_WINDOW_SECONDS = 60.0
"""How often a peer's repeated warnings of one kind are summed up in one line."""


@dataclass
class _Tally:
    since: float  # clock reading of the line that opened this window
    more: int = 0  # warnings held back since


class PeerWarnings:
    """Warnings a peer can trigger (an MQTT command, a Wyoming client, a channel message),
    rate-limited per peer and kind: the first is logged; the next ones of the same peer and
    kind within :data:`WARNING_WINDOW_SECONDS` are counted, and the count is one line when the
    window ends (at once on a running event loop, else with the next warning). 500 junk
    commands are two lines, not 500; a peer that is wrong once a minute is logged every time."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        window_seconds: float = WARNING_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.window_seconds = window_seconds
        self._clock = clock
        self._tallies: dict[tuple[str, str], _Tally] = {}

    def warn(self, peer: str, kind: str, message: str, *args: object) -> bool:
        """Log ``message % args`` for ``peer`` unless a warning of ``kind`` from it was logged
        within the window; whether it was logged."""
        now = self._clock()
        key = (peer, kind)
        tally = self._tallies.get(key)
        if tally is not None and now - tally.since < self.window_seconds:
            tally.more += 1
            if tally.more == 1:
                self._summary_later(key, tally.since + self.window_seconds - now)
            return False
        if tally is not None:
            self._summary(key)
        if len(self._tallies) >= 4096:  # a bound on what hostile peers can make us remember
            self._tallies.clear()
        self._tallies[key] = _Tally(now)
        self.logger.warning(message, *args)
        return True

    def _summary_later(self, key: tuple[str, str], delay: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop: the next warning of this kind says it
            return
        loop.call_later(max(0.0, delay), self._summary, key)

    def _summary(self, key: tuple[str, str]) -> None:
        tally = self._tallies.get(key)
        if tally is None or not tally.more:
            return
        peer, kind = key
        self.logger.warning(
            "%s: %d more warnings (%s) in the last %g s", peer, tally.more, kind,
            self.window_seconds,
        )  # fmt: skip
        tally.more = 0
