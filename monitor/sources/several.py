"""Several named sources read at once, as one :class:`AudioSource` (``audio.sources``).

A household runs several satellites and services: a wake-word proxy and a speech-to-text proxy,
a microphone, a file. The daemon reads them all through one :class:`SourceSet`: each source runs
in a task of its own and hands its frames, tagged with its name (:attr:`AudioFrame.stream`), to
one bounded queue in the order they come; a source that ends ends its stream
(``stream_end``), and the set ends when every source has. A source's failure (a microphone gone
for good) ends the set with that error, as it would end a daemon of one source.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Mapping

import numpy as np

from monitor.audio.frames import AudioFrame, AudioSource, SourceStats, StreamKey

QUEUE_FRAMES = 64
"""Frames waiting between the sources and the daemon (a source that must not wait keeps its
own bounded queue: the microphone's, the proxy's side tap)."""


class SourceSet:
    """``named`` sources (name → source) read at once (see module docstring)."""

    def __init__(self, named: Mapping[str, AudioSource], *, queue_frames: int = QUEUE_FRAMES):
        if len(named) < 2:
            raise ValueError(f"a SourceSet needs at least two sources, got {len(named)}")
        self.named = dict(named)
        self.queue_frames = queue_frames
        #: a failure of the measuring side must not end the daemon if any source relays
        self.relays = any(getattr(source, "relays", False) for source in named.values())

    @property
    def stats(self) -> SourceStats:
        """Every source's counters added up (each source's own are in :attr:`named`)."""
        total = SourceStats()
        for source in self.named.values():
            for field in dataclasses.fields(SourceStats):
                name = field.name
                setattr(total, name, getattr(total, name) + getattr(source.stats, name))
        return total

    async def frames(self) -> AsyncIterator[AudioFrame]:
        queue: asyncio.Queue[AudioFrame | BaseException | None] = asyncio.Queue(self.queue_frames)
        loop = asyncio.get_running_loop()
        tasks = [
            loop.create_task(self._pump(name, source, queue), name=f"voxmeter.source.{name}")
            for name, source in self.named.items()
        ]
        running = len(tasks)
        try:
            while running:
                item = await queue.get()
                if item is None:
                    running -= 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    @staticmethod
    async def _pump(
        name: str,
        source: AudioSource,
        queue: asyncio.Queue[AudioFrame | BaseException | None],
    ) -> None:
        """One source's frames, renamed, into ``queue``; then the end of its stream (a source
        of one stream: a file that ended), or its error."""
        end = 0.0
        try:
            async for frame in source.frames():
                end = frame.end_seconds
                stream = frame.stream._replace(source=name)
                await queue.put(dataclasses.replace(frame, stream=stream))
        except Exception as error:
            await queue.put(error)
            return
        empty = np.zeros(0, dtype=np.int16)
        await queue.put(AudioFrame(empty, end, stream=StreamKey(name), stream_end=True))
        await queue.put(None)

    def close(self) -> None:
        for source in self.named.values():
            source.close()
