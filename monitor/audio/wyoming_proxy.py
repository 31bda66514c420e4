"""A Wyoming proxy: voxmeter inside the assistant's voice pipeline, measuring what it hears.

``wyoming-proxy://HOST:PORT?upstream=tcp://UHOST:UPORT``: the relay itself (the server, the
upstream's state, the byte-for-byte pumps, ``info`` renamed ``… via voxmeter``) is
:mod:`monitor.audio.wyoming_relay`, which imports nothing that measures. This module is the
measuring side's source: the relayed audio as :class:`AudioFrame` s.

Two layouts. In-process (``relay.socket`` unset): the relay runs on this process's event loop,
and after an event is passed on, a copy of its audio is offered to a bounded queue
(:class:`SideTap`) with ``put_nowait``. Separate (``relay.socket`` set): ``voxmeter relay``
relays in a small process of its own and hands the copies over the local channel
(:mod:`monitor.audio.channel`); this source subscribes there and feeds the same tap, so a
SIGKILL, segfault or OOM kill of the measuring process never reaches the assistant.

Either way, when the measuring side is behind (a slow extractor, a stalled or crashed pipeline)
the copy is dropped and its seconds counted, and the relay never waits. The measured stream
follows one utterance at a time (another client's overlapping utterance is not measured, and
counted as dropped); ``audio-stop`` ends the speaker's turn (:attr:`AudioFrame.utterance_end`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event

from monitor.audio.channel import receive
from monitor.audio.frames import AudioFrame, Sleep, SourceStats, check_frame_ms
from monitor.audio.wyoming import decode_frames
from monitor.audio.wyoming_relay import (
    SCHEME,
    VIA,
    ProxyEndpoint,
    ProxyServer,
    annotate_info,
    parse_proxy,
)
from monitor.audio.wyoming_wire import audio_seconds

__all__ = [
    "SCHEME",
    "VIA",
    "ProxyEndpoint",
    "SideTap",
    "WyomingProxySource",
    "annotate_info",
    "parse_proxy",
]


class SideTap:
    """The measuring side's inbox: the audio of one utterance at a time, never waited for.

    :meth:`offer` is called on the relay path after an event went on; it only ever calls
    ``put_nowait``. What does not fit is dropped, counted in seconds of audio
    (``stats.dropped_seconds``), and the rest of that utterance is not measured either: a cut
    utterance ends at its ``audio-stop`` (or, if even that found the queue full, before the
    next utterance starts), so the daemon still closes its window there.
    """

    def __init__(self, max_events: int = 512, stats: SourceStats | None = None) -> None:
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue(max_events)
        self.stats = stats if stats is not None else SourceStats()  # the source's counters
        self._owner: object | None = None  # the connection whose utterance is measured
        self._broken = False  # a drop inside the current utterance: the rest is not measured
        self._end_owed = False  # a cut utterance's end is not in the queue yet

    def offer(self, who: object, event: Event) -> None:
        start, stop = AudioStart.is_type(event.type), AudioStop.is_type(event.type)
        if not (start or stop or AudioChunk.is_type(event.type)):
            return
        if start and self._owner in (None, who):
            if self._end_owed and self._put(None):
                self._end_owed = False
            self._owner, self._broken = who, self._end_owed
        if self._owner is not who:
            self._drop(event)
            return
        if (self._broken and not stop) or not self._put(event):
            self._drop(event)
            self._broken = True
            self._end_owed = self._end_owed or stop
        if stop:
            self._owner = None

    def left(self, who: object) -> None:
        """A connection closed: its open utterance (if measured) ends here."""
        if self._owner is who:
            self._owner = None
            self._end_owed = not self._put(None)

    def _drop(self, event: Event) -> None:
        self.stats.dropped_seconds += audio_seconds(event)

    def _put(self, item: Event | None) -> bool:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            return False
        return True


class WyomingProxySource(ProxyServer):
    """Frames of the audio relayed through a Wyoming proxy (see the module docstring); with
    ``channel`` (the relay process's socket) the relay is not served here but subscribed to."""

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
            sleep=sleep,
            rng=rng,
        )
        self.stats: SourceStats = stats
        self.tap: SideTap = self.tap  # type: ignore[assignment]  # narrowed: the queue is read
        self.frame_ms = check_frame_ms(frame_ms)
        self.channel = channel
        self.relay_connected = False  # with a channel: subscribed to the relay process now
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
        self._closed = asyncio.Event()
        feeding = self.serving() if self.channel is None else self.subscribed(self.channel)
        async with feeding:
            async for frame in decode_frames(
                self._measured(), self.frame_ms, self.stats, self.name, turns=True
            ):
                yield frame

    async def _measured(self) -> AsyncIterator[Event | None]:
        assert self._closed is not None
        while not self._closed.is_set():
            item = await self.tap.queue.get()
            if not self._closed.is_set():
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
            receive(channel, self.name, self.tap, unmeasured, on_connected=connected),
            name="voxmeter.relay-channel",
        )
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
