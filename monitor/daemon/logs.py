"""Structured logs: one line per event, key=value or JSON, aliases only (never audio or names)."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from datetime import datetime
from typing import Any

from monitor.daemon.config import LoggingSettings
from monitor.daemon.events import (
    DaemonEvent,
    DaemonStarted,
    DaemonStopping,
    PipelineStats,
    StateChanged,
    TrackExpired,
    TrackRestored,
    WindowScored,
)

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


def configure_logging(settings: LoggingSettings, stream: Any = None) -> None:
    """Route the ``monitor`` loggers to one structured handler on stderr."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(LineFormatter(settings.format))
    root = logging.getLogger("monitor")
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.level.upper())
    root.propagate = False


class LogExporter:
    """Every daemon event as one structured log line."""

    name = "log"

    def __init__(self, log: logging.Logger | None = None) -> None:
        self.log = log or logging.getLogger("monitor.daemon.events")

    async def run(self) -> None:
        await asyncio.Event().wait()

    async def handle(self, event: DaemonEvent) -> None:
        match event:
            case WindowScored():
                fields: dict[str, Any] = {
                    "track": event.track,
                    "kind": event.kind,
                    "window": event.window_index,
                    "windows": event.windows,
                    "speech_s": round(event.pooled_speech_seconds, 2),
                    "bits": round(event.budget_figure_bits, 3),
                    "state": event.state,
                    "latency_s": round(event.latency_seconds, 3),
                }
                if event.kind == "unknown":
                    fields["gain_bits"] = round(event.information_gain_bits or 0.0, 3)
                    fields["top"] = event.top_candidate
                self.log.info("window", extra={"fields": fields})
            case StateChanged():
                self.log.warning(
                    "budget",
                    extra={
                        "fields": {
                            "track": event.track,
                            "from": event.from_state,
                            "to": event.to_state,
                            "bits": round(event.bits, 3),
                            "budget": event.budget_bits,
                            "seq": event.seq,
                            "reason": event.reason,
                        }
                    },
                )
            case TrackExpired():
                self.log.info("expired", extra={"fields": {"track": event.track}})
            case TrackRestored():
                last = event.last
                fields = {
                    "track": last.track,
                    "kind": last.kind,
                    "windows": last.windows,
                    "speech_s": round(last.pooled_speech_seconds, 2),
                    "bits": round(last.budget_figure_bits, 3),
                    "state": last.state,
                }
                self.log.info("restored", extra={"fields": fields})
            case PipelineStats():
                self.log.debug(
                    "stats",
                    extra={
                        "fields": {
                            "frames": event.frames_total,
                            "speech": event.frames_speech,
                            "dropped": event.frames_dropped,
                            "device_errors": event.audio_device_errors,
                            "rtf": round(event.realtime_factor, 4),
                            "tracks": event.tracks,
                        }
                    },
                )
            case DaemonStarted():
                self.log.info(
                    "started",
                    extra={
                        "fields": {
                            "device": event.device_id,
                            "version": event.version,
                            "templates": max(event.templates.values(), default=0),
                            "restored": len(event.states),
                        }
                    },
                )
            case DaemonStopping():
                self.log.info("stopping", extra={"fields": {"reason": event.reason}})
