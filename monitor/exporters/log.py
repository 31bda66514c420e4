"""The log exporter: every daemon event as one structured line (formatting: daemon/logs.py)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from monitor.events.messages import (
    DaemonEvent,
    DaemonStarted,
    DaemonStopping,
    Figures,
    PipelineStats,
    StateChanged,
    TrackExpired,
    TrackRestored,
    WindowScored,
)
from monitor.references import advice, beyond_words, saturated
from monitor.vocabulary import FigureKey


class LogExporter:
    """Every daemon event as one structured log line."""

    name = "log"

    def __init__(self, log: logging.Logger | None = None) -> None:
        self.log = log or logging.getLogger("monitor.events.messages")
        self.saturated = False  # a figure beyond the reference (or at log2 N): said once per run

    async def run(self) -> None:
        await asyncio.Event().wait()

    async def handle(self, event: DaemonEvent) -> None:
        match event:
            case WindowScored():
                self.log.info("window", extra={"fields": _window_fields(event)})
                self._reference_set(event.figures)
            case StateChanged():
                self.log.warning("budget", extra={"fields": _budget_fields(event)})
            case TrackExpired(merged_into=None):
                self.log.info("expired", extra={"fields": {"track": event.track}})
            case TrackExpired():
                fields = {"track": event.track, "into": event.merged_into}
                self.log.info("merged", extra={"fields": fields})
            case TrackRestored():
                self.log.info("restored", extra={"fields": _figure_fields(event.figures)})
            case PipelineStats():
                self.log.debug(
                    "stats",
                    extra={
                        "fields": {
                            "frames": event.frames_total,
                            "speech": event.frames_speech,
                            "dropped_seconds": round(event.dropped_seconds, 3),
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

    def _reference_set(self, figures: Figures) -> None:
        """Say once per run when a figure lies beyond what the reference set can validate (or,
        figures against the templates alone, when one window reached their ceiling)."""
        key = FigureKey.parse(figures.budget_measure)
        window_bits = figures.bits(key.feature, key.measure, cumulative=False)
        bound = figures.budget_at_least_bits
        if self.saturated:
            return
        if bound is not None:
            self.saturated = True
            self.log.warning(
                beyond_words(figures.budget_figure_bits, bound, figures.templates),
                extra={"fields": {"templates": figures.templates, "at_least_bits": bound}},
            )
        elif not figures.population and saturated(window_bits, figures.ceiling_bits):
            self.saturated = True
            self.log.warning(
                advice(figures.templates, shipped=False) or "",
                extra={"fields": {"templates": figures.templates, "window_bits": window_bits}},
            )


def _window_fields(event: WindowScored) -> dict[str, Any]:
    """The log fields of a window scored: its figures, latency and where it lies."""
    fields = {**_figure_fields(event.figures), "window": event.figures.window_index}
    fields["latency_s"] = round(event.latency_seconds, 3)
    # where the window lies in the file or stream, beside the wall clock
    fields["stream_start_s"] = round(event.window_start_seconds, 2)
    fields["stream_end_s"] = round(event.window_end_seconds, 2)
    if event.stream.source:  # which source (room) heard it, which of its clients
        fields["source"] = event.stream.source
    if event.stream.connection:
        fields["connection"] = event.stream.connection
    return fields


def _budget_fields(event: StateChanged) -> dict[str, Any]:
    """The log fields of a budget state change."""
    return {
        "track": event.track,
        "from": event.from_state,
        "to": event.to_state,
        "bits": round(event.bits, 3),
        "budget": event.budget_bits,
        "seq": event.seq,
        "reason": event.reason,
    }


def _figure_fields(figures: Figures) -> dict[str, Any]:
    """The log fields of a track's figures (a window, or a track restored from the ledger)."""
    fields: dict[str, Any] = {
        "track": figures.track,
        "kind": figures.kind,
        "windows": figures.windows,
        "speech_s": round(figures.pooled_speech_seconds, 2),
        "bits": round(figures.budget_figure_bits, 3),
        "state": figures.state,
    }
    if figures.kind == "unknown":
        fields["gain_bits"] = round(figures.information_gain_bits or 0.0, 3)
        fields["top"] = figures.top_candidate
    return fields
