"""Live capture from a sound device (PortAudio), surviving device loss (random capped backoff)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import numpy as np

from monitor.audio.frames import (
    AudioFrame,
    Clock,
    Resampler,
    Sleep,
    SourceStats,
    backoff_seconds,
)
from monitor.errors import AudioDeviceError

logger = logging.getLogger(__name__)


class InputStreamHandle(Protocol):
    """An open capture stream, as :class:`MicrophoneSource` needs it."""

    rate_hz: int

    def active(self) -> bool: ...

    def close(self) -> None: ...


#: Called from the audio thread with a copy of each block and whether the driver overflowed.
BlockCallback = Callable[[np.ndarray, bool], None]


class InputBackend(Protocol):
    """Opens capture streams on a device; a fake in tests, PortAudio in production."""

    def open(self, device: str | int | None, callback: BlockCallback) -> InputStreamHandle:
        """Start capturing; raise :class:`AudioDeviceError` if the device is missing or fails."""
        ...

    def reinitialise(self) -> None:
        """Forget cached devices so that one which appeared since can be found."""
        ...


class _SoundDeviceStream:
    def __init__(self, stream: Any, rate_hz: int) -> None:
        self._stream = stream
        self.rate_hz = rate_hz

    def active(self) -> bool:
        return bool(self._stream.active)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a dead device may refuse even to close
            self._stream.close(ignore_errors=True)


class SoundDeviceBackend:
    """PortAudio through sounddevice, at the device's own rate (``rate_hz`` overrides it), in
    blocks of ``block_ms``: each block wakes the event loop and is resampled there, so blocks
    of 120 ms cost a quarter of 30 ms ones (the VAD splits them into its own frames)."""

    def __init__(self, *, rate_hz: int | None = None, block_ms: int = 120) -> None:
        self.rate_hz = rate_hz
        self.block_ms = block_ms

    def open(self, device: str | int | None, callback: BlockCallback) -> InputStreamHandle:
        import sounddevice as sd

        label = "default input" if device is None else f"audio device {device!r}"
        try:
            info = sd.query_devices(device, "input")
        except (ValueError, sd.PortAudioError) as exc:
            names = [d["name"] for d in sd.query_devices() if d["max_input_channels"] > 0]
            raise AudioDeviceError(
                f"{label}: not found (inputs: {', '.join(names) or 'none'})"
            ) from exc
        rate = self.rate_hz or int(info["default_samplerate"])

        def on_block(indata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
            callback(indata.copy(), bool(status.input_overflow))

        try:
            stream = sd.InputStream(
                device=device,
                samplerate=rate,
                channels=1,
                dtype="int16",
                blocksize=rate * self.block_ms // 1000,
                callback=on_block,
            )
            stream.start()
        except sd.PortAudioError as exc:
            raise AudioDeviceError(f"{label}: cannot capture at {rate} Hz mono ({exc})") from exc
        return _SoundDeviceStream(stream, rate)

    def reinitialise(self) -> None:
        import sounddevice as sd

        # PortAudio enumerates devices once, at initialisation; a device (or a PulseAudio
        # server) that appeared later is only seen after this.
        sd._terminate()
        sd._initialize()


class MicrophoneSource:
    """Live capture: device blocks → 16 kHz frames in a bounded queue, surviving device loss.

    The audio thread only copies the block and schedules it on the event loop
    (``call_soon_threadsafe``); resampling and queueing happen on the loop. When the queue is
    full the oldest frame is dropped and counted. A device that fails to open, disappears
    (stream no longer active) or stalls (no block for ``stall_seconds``) is counted in
    ``stats.device_errors`` and retried after a random capped exponential backoff, with
    PortAudio re-initialised so that a device which appears later is found.
    ``max_retries=None`` retries for ever (the daemon); after ``max_retries`` consecutive
    failures :meth:`frames` raises :class:`AudioDeviceError`. With ``wait_for_device=False`` a
    device that cannot be opened at the very start is an error at once (a typo in the device
    name should not look like an outage); once capture has begun, losses are always retried.
    """

    def __init__(
        self,
        device: str | int | None = None,
        *,
        backend: InputBackend | None = None,
        queue_frames: int = 200,
        stall_seconds: float = 5.0,
        backoff_initial_seconds: float = 0.5,
        backoff_max_seconds: float = 30.0,
        max_retries: int | None = None,
        wait_for_device: bool = True,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if queue_frames < 1:
            raise ValueError(f"queue_frames must be ≥ 1, got {queue_frames}")
        self.device = device
        self.stats = SourceStats()
        self.stall_seconds = stall_seconds
        self.backoff_initial_seconds = backoff_initial_seconds
        self.backoff_max_seconds = backoff_max_seconds
        self.max_retries = max_retries
        self.wait_for_device = wait_for_device
        self._captured = False  # whether the device ever opened
        self._backend: InputBackend = backend if backend is not None else SoundDeviceBackend()
        self._clock = clock
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()
        self._queue: deque[AudioFrame] = deque()
        self._queue_frames = queue_frames
        self._wake = asyncio.Event()
        self._closed = False
        self._started = 0.0
        self._generation = 0
        self._resample: Resampler | None = None
        self._early: list[tuple[np.ndarray, bool]] = []
        self._early_dropped_samples = 0
        self._next_start = 0.0
        self._last_block = 0.0

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    def probe(self) -> None:
        """Open and close the device now: :class:`AudioDeviceError` if it is missing, so that
        the daemon can refuse to start before it prints or serves anything."""
        self._backend.open(self.device, lambda block, overflowed: None).close()

    def backoff_seconds(self, attempt: int) -> float:
        """Delay before retry ``attempt`` (1-based), as every source waits."""
        return backoff_seconds(
            self._rng, attempt, self.backoff_initial_seconds, self.backoff_max_seconds
        )

    def _on_block(self, generation: int, block: np.ndarray, overflowed: bool) -> None:
        """Runs on the event loop: resample, stamp, queue (dropping the oldest when full)."""
        if generation != self._generation:
            return  # a late block from a stream already closed
        if self._resample is None:  # the stream started before open() returned
            if len(self._early) >= self._queue_frames:
                lost, _ = self._early.pop(0)
                self._early_dropped_samples += lost.shape[0]  # seconds once the rate is known
            self._early.append((block, overflowed))
            return
        self._last_block = self._clock()
        if overflowed:
            self.stats.overflows += 1
        samples = self._resample(block)
        if samples.shape[0] == 0:
            return
        frame = AudioFrame(samples, self._next_start, source_rate_hz=self._resample.rate_hz)
        self._next_start += frame.duration_seconds
        if len(self._queue) >= self._queue_frames:
            self.stats.dropped_seconds += self._queue.popleft().duration_seconds
        self._queue.append(frame)
        self._wake.set()

    def _open(self, loop: asyncio.AbstractEventLoop) -> InputStreamHandle:
        generation = self._generation

        def callback(block: np.ndarray, overflowed: bool) -> None:
            with contextlib.suppress(RuntimeError):  # loop closed while the driver still calls
                loop.call_soon_threadsafe(self._on_block, generation, block, overflowed)

        return self._backend.open(self.device, callback)

    def _start_capture(self, handle: InputStreamHandle) -> None:
        """A device opened: resample from its rate, count what arrived before it was ready,
        carry the stream's time on, and hand on the blocks that came early."""
        self._captured = True
        self._resample = Resampler(handle.rate_hz, self.stats, f"audio device {self.device!r}")
        self.stats.dropped_seconds += self._early_dropped_samples / handle.rate_hz
        self._early_dropped_samples = 0
        # Time goes on from the wall clock across an outage, and never backwards.
        self._next_start = max(self._next_start, self._clock() - self._started)
        self._last_block = self._clock()
        early, self._early = self._early, []
        for block, overflowed in early:
            self._on_block(self._generation, block, overflowed)
        logger.info("capturing from %s at %d Hz", self.device or "default", handle.rate_hz)

    async def frames(self) -> AsyncIterator[AudioFrame]:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()  # bound to this loop
        self._started = self._clock()
        self._next_start = 0.0
        failures = 0
        while not self._closed:
            self._generation += 1
            try:
                handle = await asyncio.to_thread(self._open, loop)
            except AudioDeviceError as exc:
                failures += 1
                self.stats.device_errors += 1
                if not (self._captured or self.wait_for_device):
                    raise
                if self.max_retries is not None and failures > self.max_retries:
                    raise
                delay = self.backoff_seconds(failures)
                logger.warning("%s; retry %d in %.1f s", exc, failures, delay)
                await self._sleep(delay)
                await asyncio.to_thread(self._backend.reinitialise)
                continue
            self._start_capture(handle)
            try:
                lost = False
                while not self._closed:
                    while self._queue:
                        failures = 0
                        self.stats.frames_total += 1
                        yield self._queue.popleft()
                    if not handle.active() or self._clock() - self._last_block > self.stall_seconds:
                        await asyncio.sleep(0)  # let blocks sent before the loss arrive
                        if self._queue:
                            continue
                        lost = True
                        break
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):  # a timer, not a task, per block
                        async with asyncio.timeout(0.25):
                            await self._wake.wait()
            finally:
                self._generation += 1
                self._resample = None
                self._early = []
                await asyncio.to_thread(handle.close)
            if lost:
                failures += 1
                self.stats.device_errors += 1
                if self.max_retries is not None and failures > self.max_retries:
                    raise AudioDeviceError(f"audio device {self.device!r}: capture stopped")
                delay = self.backoff_seconds(failures)
                logger.warning(
                    "audio device %r lost; retry %d in %.1f s", self.device, failures, delay
                )
                await self._sleep(delay)
                await asyncio.to_thread(self._backend.reinitialise)
