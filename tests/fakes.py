"""The tests' hand-written fakes (not mocks), each defined once: what several test modules
stand in for the same part imports it from here."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from wyoming.event import Event

if TYPE_CHECKING:  # the real upstreams import this module in a process without the daemon
    from monitor.events.messages import DaemonEvent, WindowScored


class Recorder:
    """An exporter that keeps every event."""

    name = "recorder"

    def __init__(self) -> None:
        self.events: list[DaemonEvent] = []

    async def run(self) -> None:
        await asyncio.Event().wait()

    async def handle(self, event: DaemonEvent) -> None:
        self.events.append(event)

    def scored(self) -> list[WindowScored]:
        from monitor.events.messages import WindowScored

        return [e for e in self.events if isinstance(e, WindowScored)]


class RecordingTap:
    """A relay's tap that keeps what reaches it: (stream key, event type) and ``left`` as
    (key, None)."""

    def __init__(self) -> None:
        self.seen: list[tuple[object, str | None]] = []
        self.gaps = 0

    def offer(self, who: object, event: Event, *, gap: bool = False) -> None:
        self.seen.append((who, event.type))
        self.gaps += gap

    def left(self, who: object) -> None:
        self.seen.append((who, None))


class RecordingReader:
    """A stream reader that keeps every byte read through it (what the peer sent)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.received = bytearray()

    async def readline(self) -> bytes:
        line = await self.reader.readline()
        self.received += line
        return line

    async def readexactly(self, n: int) -> bytes:
        data = await self.reader.readexactly(n)
        self.received += data
        return data

    def feed_eof(self) -> None:  # the package's handler.stop() ends the reader
        self.reader.feed_eof()
