"""Raw PCM from standard input (or any byte stream) as frames."""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import threading
from collections.abc import AsyncIterator, Callable
from typing import BinaryIO

import numpy as np

from monitor.audio.frames import (
    RATE_HZ,
    AudioFrame,
    Resampler,
    SourceStats,
    check_frame_ms,
    check_rate,
)
from monitor.errors import InputError


class StdinSource:
    """Raw signed 16-bit little-endian PCM from a byte stream (default: standard input).

    ``rate_hz`` and ``channels`` describe the stream; it is averaged to mono and resampled.
    Reads run in a worker thread so a quiet pipe never blocks the event loop.
    """

    def __init__(
        self,
        rate_hz: int = RATE_HZ,
        stream: BinaryIO | None = None,
        *,
        channels: int = 1,
        frame_ms: int = 30,
    ) -> None:
        self.name = "stdin" if stream is None else getattr(stream, "name", "stream")
        self.rate_hz = check_rate(str(self.name), rate_hz)
        if not 1 <= channels <= 64:
            raise InputError(str(self.name), f"unsupported channel count {channels} (1..64)")
        self.channels = channels
        self.frame_ms = check_frame_ms(frame_ms)
        self.stats = SourceStats()
        self._stream = stream
        self._closed = False

    def close(self) -> None:
        self._closed = True

    async def frames(self) -> AsyncIterator[AudioFrame]:
        if self._stream is not None:
            read_bytes: Callable[[int], bytes] = self._stream.read
        else:
            # The descriptor itself, not sys.stdin.buffer: a thread blocked inside the buffered
            # reader holds its lock, and the interpreter aborts on it at exit.
            fd = sys.stdin.fileno()
            read_bytes = functools.partial(os.read, fd)
        resample = Resampler(self.rate_hz, self.stats, str(self.name))
        bytes_per_frame = 2 * self.channels
        want = max(1, self.rate_hz * self.frame_ms // 1000) * bytes_per_frame
        chunks = self._start_reader(read_bytes, want)
        pending = b""
        emitted = 0
        try:
            while not self._closed:
                chunk, room = await chunks.get()
                room.release()
                if isinstance(chunk, Exception):
                    raise InputError(self.name, f"read failed ({chunk})") from chunk
                data = pending + chunk
                usable = len(data) - len(data) % bytes_per_frame
                pending = data[usable:]
                last = not chunk
                pcm = np.frombuffer(data[:usable], dtype="<i2").reshape(-1, self.channels)
                samples = resample(pcm, last=last)
                if samples.shape[0]:
                    self.stats.frames_total += 1
                    yield AudioFrame(samples, emitted / RATE_HZ, source_rate_hz=self.rate_hz)
                    emitted += samples.shape[0]
                if last:
                    break
        finally:
            self._closed = True

    def _start_reader(
        self, read_bytes: Callable[[int], bytes], want: int
    ) -> asyncio.Queue[tuple[bytes | Exception, threading.Semaphore]]:
        """Read in a daemon thread: a pipe that stays open and quiet can never hold up exit
        (a default-executor thread would keep ``asyncio.run`` waiting at shutdown)."""
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[tuple[bytes | Exception, threading.Semaphore]] = asyncio.Queue()
        room = threading.Semaphore(8)  # at most 8 reads ahead of the consumer

        def read() -> None:
            while not self._closed:
                room.acquire()
                try:
                    chunk: bytes | Exception = read_bytes(want) or b""
                except (OSError, ValueError) as exc:
                    chunk = exc
                try:
                    loop.call_soon_threadsafe(chunks.put_nowait, (chunk, room))
                except RuntimeError:  # the loop is gone
                    return
                if not chunk or isinstance(chunk, Exception):
                    return

        threading.Thread(target=read, name="voxmeter.stdin", daemon=True).start()
        return chunks
