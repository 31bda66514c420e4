"""The log exporter: the window line carries its place in the stream; a merge is its own line."""

from __future__ import annotations

import asyncio
import logging

import pytest

from monitor.events.messages import TrackExpired
from monitor.exporters.log import LogExporter
from tests.exporters.exporter_events import scored


def test_window_lines_carry_the_stream_position_and_merges_are_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("tests.events")
    exporter = LogExporter(log)
    with caplog.at_level(logging.INFO, logger="tests.events"):
        asyncio.run(exporter.handle(scored("home-1", index=2)))
        asyncio.run(exporter.handle(TrackExpired("unknown-2", "unknown", 9.0, 1.8e9, "unknown-1")))
        asyncio.run(exporter.handle(TrackExpired("unknown-3", "unknown", 9.0, 1.8e9)))
    window, merged, expired = caplog.records
    fields = window.fields  # type: ignore[attr-defined]
    assert (fields["stream_start_s"], fields["stream_end_s"]) == (6.0, 9.0)
    assert merged.getMessage() == "merged"
    assert merged.fields == {"track": "unknown-2", "into": "unknown-1"}  # type: ignore[attr-defined]
    assert expired.getMessage() == "expired"
