"""A Wyoming proxy: voxmeter inside the assistant's voice pipeline, measuring what it hears.

``wyoming-proxy://HOST:PORT?upstream=tcp://UHOST:UPORT``: the relay itself (the server, the
upstream's state, the byte-for-byte pumps, ``info`` renamed ``… via voxmeter``, an upstream
that is down) is :mod:`monitor.wyoming.relay`, which imports nothing that measures. This
module is the measuring side's source: the relayed audio as :class:`AudioFrame` s.

Two layouts. In-process (``relay.socket`` unset): the relay runs on this process's event loop,
and after an event is passed on, a copy of its audio is offered to a bounded queue
(:class:`SideTap`) with ``put_nowait``. Separate (``relay.socket`` set): ``voxmeter relay``
relays in a small process of its own and hands the copies over the local channel
(:mod:`monitor.wyoming.channel`); this source subscribes there and feeds the same tap, so a
SIGKILL, segfault or OOM kill of the measuring process never reaches the assistant.

Either way, when the measuring side is behind (a slow extractor, a stalled or crashed pipeline)
the copy is dropped and its seconds counted, and the relay never waits. Every client connection
(every satellite) is a stream of its own: its audio is tagged with the connection's number
(:class:`TapItem`), decoded on its own timeline and measured by its own VAD and windows in the
daemon (:attr:`AudioFrame.stream`), so clients streaming at once are all measured;
``audio-stop`` ends the speaker's turn (:attr:`AudioFrame.utterance_end`), the connection's end
ends its stream (:attr:`AudioFrame.stream_end`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event

from monitor.audio.frames import AudioFrame, Sleep, SourceStats, StreamKey, check_frame_ms
from monitor.wyoming.channel import Uplink, receive
from monitor.wyoming.relay import (
    SCHEME,
    VIA,
    ProxyEndpoint,
    ProxyServer,
    TransformFactory,
    annotate_info,
    parse_proxy,
)
from monitor.wyoming.source import FrameDecoder
from monitor.wyoming.wire import audio_seconds

__all__ = [
    "SCHEME",
    "VIA",
    "ProxyEndpoint",
    "SideTap",
    "TapItem",
    "WyomingProxySource",
    "annotate_info",
    "parse_proxy",
]


class TapItem(NamedTuple):
    """One connection's audio event on its way to the measuring side."""

    connection: int
    """The connection's number (from 1, never reused while the source runs)."""
    event: Event | None
    """An audio event; None: the connection closed (its stream ends)."""
    gap: bool = False
    """Audio of this connection was dropped just before this item (the measuring side was
    behind): the speech on either side must not be joined into one turn."""


@dataclass
class _Tapped:
    number: int
    gap: bool = False


class SideTap:
    """The measuring side's inbox: the audio of every connection, tagged, never waited for.

    :meth:`offer` is called on the relay path after an event went on; it only ever calls
    ``put_nowait``. Each connection's audio is tagged with its number; what does not fit (the
    measuring side is behind) is dropped and counted in seconds of audio
    (``stats.dropped_seconds``), and that connection's next item says so (``gap``). A
    connection's end that does not fit goes in before any later audio.
    """

    def __init__(self, max_events: int = 512, stats: SourceStats | None = None) -> None:
        self.queue: asyncio.Queue[TapItem | None] = asyncio.Queue(max_events)
        self.stats = stats if stats is not None else SourceStats()  # the source's counters
        self._numbers = itertools.count(1)
        self._connections: dict[object, _Tapped] = {}  # connections that sent audio
        self._ends_owed: list[int] = []  # connections gone whose end is not in the queue yet

    def offer(self, who: object, event: Event, *, gap: bool = False) -> None:
        """``gap``: audio of ``who`` was lost before this event (the relay process could not
        hand it over), as if this tap had dropped it."""
        kind = event.type
        if not (AudioChunk.is_type(kind) or AudioStart.is_type(kind) or AudioStop.is_type(kind)):
            return
        while self._ends_owed and self._put(TapItem(self._ends_owed[0], None)):
            del self._ends_owed[0]
        tapped = self._connections.get(who)
        if tapped is None:
            tapped = self._connections[who] = _Tapped(next(self._numbers))
        tapped.gap = tapped.gap or gap
        if self._put(TapItem(tapped.number, event, tapped.gap)):
            tapped.gap = False
        else:
            self.stats.dropped_seconds += audio_seconds(event)
            tapped.gap = True

    def left(self, who: object) -> None:
        """A connection closed: its stream ends here."""
        tapped = self._connections.pop(who, None)
        if tapped is not None and not self._put(TapItem(tapped.number, None)):
            self._ends_owed.append(tapped.number)

    def _put(self, item: TapItem) -> bool:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            return False
        return True


class WyomingProxySource(ProxyServer):
    """Frames of the audio relayed through a Wyoming proxy (see the module docstring); with
    ``channel`` (the relay process's socket) the relay is not served here but subscribed to.
    ``transform``: makes what the in-process relay does to each connection's events upstream
    (:data:`~monitor.wyoming.relay.TransformFactory`; the relay process takes its own)."""

    relays = True
    """A failure of the measuring side must not end the daemon, and with it the relay
    (:mod:`monitor.daemon.measuring` restarts the measuring stages instead)."""

    def __init__(
        self,
        endpoint: ProxyEndpoint,
        *,
        frame_ms: int = 30,
        backoff_initial_seconds: float = 0.5,
        backoff_max_seconds: float = 30.0,
        tap_events: int = 512,
        zeroconf: bool = False,
        channel: Path | None = None,
        transform: TransformFactory | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        stats = SourceStats()
        super().__init__(
            endpoint,
            SideTap(tap_events, stats),
            stats=stats,
            backoff_initial_seconds=backoff_initial_seconds,
            backoff_max_seconds=backoff_max_seconds,
            zeroconf=zeroconf,
            transform=transform,
            sleep=sleep,
            rng=rng,
        )
        self.stats: SourceStats = stats
        self.tap: SideTap = self.tap  # type: ignore[assignment]  # narrowed: the queue is read
        self.frame_ms = check_frame_ms(frame_ms)
        self.channel = channel
        self.relay_connected = False  # with a channel: subscribed to the relay process now
        self.uplink = Uplink()  # with a channel: what the relay process is told of this source
        self._clock = clock
        self._closed: asyncio.Event | None = None

    @property
    def dropped_seconds(self) -> float:
        """Audio relayed but not measured (the measuring side was behind), in seconds."""
        return self.stats.dropped_seconds

    def close(self) -> None:
        if self._closed is not None:
            self._closed.set()
        queue = self.tap.queue
        while not queue.empty():  # stopping: what was not measured yet never will be
            queue.get_nowait()
        queue.put_nowait(None)

    async def frames(self) -> AsyncIterator[AudioFrame]:
        """Every connection's audio as frames of its own stream, in the order it was relayed."""
        self._closed = asyncio.Event()
        feeding = self.serving() if self.channel is None else self.subscribed(self.channel)
        async with feeding:
            decoders: dict[int, FrameDecoder] = {}
            async for item in self._measured():
                decoder = decoders.get(item.connection)
                if decoder is None:
                    if item.event is None:
                        continue
                    stream = StreamKey("", item.connection)
                    decoder = FrameDecoder(
                        self.frame_ms, self.stats, self.name, turns=True, stream=stream
                    )
                    decoders[item.connection] = decoder
                if item.event is None:
                    del decoders[item.connection]
                    frames = decoder.end()
                else:  # after a gap, the turn before it ends there
                    frames = decoder.process(None) if item.gap else []
                    frames += decoder.process(item.event)
                for frame in frames:
                    yield frame

    async def _measured(self) -> AsyncIterator[TapItem]:
        assert self._closed is not None
        while not self._closed.is_set():
            item = await self.tap.queue.get()
            if item is not None and not self._closed.is_set():
                yield item

    @contextlib.asynccontextmanager
    async def subscribed(self, channel: Path) -> AsyncIterator[None]:
        """For the block, the tap is fed from the relay process over ``channel``; the seconds
        the relay could not hand over count as dropped."""

        def unmeasured(seconds: float) -> None:
            self.stats.dropped_seconds += seconds

        def connected(now: bool) -> None:
            self.relay_connected = now

        task = asyncio.get_running_loop().create_task(
            receive(
                channel,
                str(self.endpoint),
                self.tap,
                unmeasured,
                on_connected=connected,
                uplink=self.uplink,
            ),
            name="voxmeter.relay-channel",
        )
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
