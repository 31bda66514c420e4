"""Audio sources: microphone, file and stdin behind one async interface, plus offline reading.

Every source yields :class:`AudioFrame` s of 16 kHz mono int16 samples stamped with the time of
their first sample, whatever the device, file or stream delivers: the rest of the pipeline
(VAD, windows, features) sees one format only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import re
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal, Protocol

import numpy as np
import soundfile as sf
import soxr

from monitor.errors import AudioDeviceError, InputError

logger = logging.getLogger(__name__)

#: The one rate every stage after the source works at (Hertz).
RATE_HZ = 16000
#: Rates outside this range are refused: below it nothing of speech survives, above it the
#: value is a typo or a wrong header.
MIN_RATE_HZ = 4000
MAX_RATE_HZ = 384000


def check_rate(source: str, rate_hz: int) -> int:
    """Return ``rate_hz`` if a sane sample rate, else raise InputError naming ``source``."""
    if not MIN_RATE_HZ <= rate_hz <= MAX_RATE_HZ:
        raise InputError(
            source,
            f"unsupported sample rate {rate_hz} Hz (expected {MIN_RATE_HZ}..{MAX_RATE_HZ} Hz)",
        )
    return rate_hz


def read_audio(path: str | os.PathLike[str]) -> tuple[np.ndarray, float]:
    """Read a whole audio file as float32 mono 16 kHz in [-1, 1], and its duration in seconds.

    For offline work (feature extraction, calibration): any format soundfile reads (WAV, FLAC,
    Ogg), any rate and channel count; channels are averaged, the rate converted with soxr (HQ).
    A missing, empty, truncated or non-audio file raises :class:`InputError` naming the file.

    Returns ``(samples (n,), duration_seconds)`` where the duration is the file's own.
    """
    name = str(path)
    with _open_soundfile(name) as handle:
        rate = int(handle.samplerate)
        declared = int(handle.frames)
        try:
            data = handle.read(dtype="float32", always_2d=True)
        except sf.LibsndfileError as exc:
            raise InputError(name, f"not readable as audio ({exc.error_string})") from exc
    if data.shape[0] < declared:
        raise InputError(name, f"truncated: header says {declared} samples, {data.shape[0]} read")
    if not np.isfinite(data).all():
        raise InputError(name, "audio contains NaN or infinite samples")
    mono = data.mean(axis=1, dtype=np.float32)
    duration = data.shape[0] / rate
    if rate != RATE_HZ:
        mono = soxr.resample(mono, rate, RATE_HZ, quality="HQ").astype(np.float32, copy=False)
    np.clip(mono, -1.0, 1.0, out=mono)
    return mono, duration


def audio_length_seconds(path: str | os.PathLike[str]) -> float:
    """Duration of an audio file from its header (the same checks as :func:`read_audio`)."""
    with _open_soundfile(str(path)) as handle:
        return int(handle.frames) / int(handle.samplerate)


def read_audio_blocks(path: str | os.PathLike[str], block_seconds: float) -> Iterator[np.ndarray]:
    """:func:`read_audio` in consecutive blocks of about ``block_seconds`` (float32 mono 16 kHz),
    so a file of any length is read in bounded memory. The blocks joined are the same samples
    as :func:`read_audio` up to soxr's streaming edges; the same files are refused."""
    name = str(path)
    with _open_soundfile(name) as handle:
        rate = int(handle.samplerate)
        declared = int(handle.frames)
        stream = None if rate == RATE_HZ else soxr.ResampleStream(rate, RATE_HZ, 1, "float32", "HQ")
        size = max(1, int(block_seconds * rate))
        read = 0
        while read < declared:
            try:
                data = handle.read(min(size, declared - read), dtype="float32", always_2d=True)
            except sf.LibsndfileError as exc:
                raise InputError(name, f"not readable as audio ({exc.error_string})") from exc
            if data.shape[0] == 0:
                raise InputError(name, f"truncated: header says {declared} samples, {read} read")
            read += data.shape[0]
            if not np.isfinite(data).all():
                raise InputError(name, "audio contains NaN or infinite samples")
            mono = data.mean(axis=1, dtype=np.float32)
            if stream is not None:
                mono = stream.resample_chunk(mono, last=read >= declared)
            yield np.clip(mono, -1.0, 1.0)


# --------------------------------------------------------------------------- streaming sources
@dataclass(frozen=True)
class AudioFrame:
    """A run of 16 kHz mono samples and the stream time of its first sample."""

    samples: np.ndarray
    """int16, shape (n,)."""
    start_seconds: float
    """Seconds since the source started (gaps after a device loss or drop are kept)."""
    rate_hz: int = RATE_HZ
    utterance_end: bool = False
    """The speaker's turn ends after this frame (a Wyoming ``audio-stop`` through the proxy):
    the daemon closes the window there instead of waiting for more speech. May be empty."""

    @property
    def duration_seconds(self) -> float:
        return self.samples.shape[0] / self.rate_hz

    @property
    def end_seconds(self) -> float:
        return self.start_seconds + self.duration_seconds


@dataclass
class SourceStats:
    """Counters a source keeps; the daemon exports them (``voxmeter_frames_total`` etc.)."""

    frames_total: int = 0
    """Frames yielded to the consumer."""
    dropped: int = 0
    """Frames discarded because the consumer fell behind (the oldest goes first)."""
    overflows: int = 0
    """Device blocks the audio driver reported as overflowed (samples lost before us)."""
    device_errors: int = 0
    """Device failures: open refused, device missing, stream lost or stalled."""
    non_finite: int = 0
    """Blocks holding NaN or ±inf samples (a float device or driver fault): replaced by silence,
    so they never reach the features, and logged."""


class AudioSource(Protocol):
    """What the pipeline reads audio from."""

    stats: SourceStats

    def frames(self) -> AsyncIterator[AudioFrame]:
        """Yield frames until the source ends (file, stdin) or :meth:`close` (microphone)."""
        ...

    def close(self) -> None:
        """Ask :meth:`frames` to finish; safe to call from the event loop at any time."""
        ...


Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class _Resampler:
    """Streaming mono conversion to 16 kHz int16 with soxr, keeping sample-exact timing.

    A float block holding NaN or ±inf becomes silence of the same length (timing kept), counted
    in ``stats.non_finite`` and logged: zeros would otherwise stand for NaN and full scale for
    inf, which the features would take for speech.
    """

    def __init__(self, rate_hz: int, stats: SourceStats | None = None, name: str = "audio") -> None:
        self.rate_hz = rate_hz
        self.stats = stats if stats is not None else SourceStats()
        self.name = name
        self._stream = (
            None
            if rate_hz == RATE_HZ
            else soxr.ResampleStream(rate_hz, RATE_HZ, 1, dtype="float32", quality="HQ")
        )

    def __call__(self, block: np.ndarray, *, last: bool = False) -> np.ndarray:
        """``block``: (n,) or (n, channels), int16 or float in [-1, 1] → int16 (m,) at 16 kHz."""
        data = np.asarray(block)
        if data.dtype == np.int16:
            data = data.astype(np.float32) / 32768.0
        elif not np.isfinite(data).all():
            data = np.zeros_like(data, dtype=np.float32)
            self._non_finite()
        if data.ndim == 2:
            data = data.mean(axis=1, dtype=np.float32)
        data = np.ascontiguousarray(data, dtype=np.float32)
        if self._stream is not None:
            data = self._stream.resample_chunk(data, last=last)
        return np.clip(np.rint(data * 32768.0), -32768, 32767).astype(np.int16)

    def _non_finite(self) -> None:
        self.stats.non_finite += 1
        count = self.stats.non_finite
        if count == 1 or count % 100 == 0:  # a broken device would fill the log otherwise
            logger.warning(
                "%s: a block of NaN or infinite samples replaced by silence (%d so far)",
                self.name,
                count,
            )


def _check_frame_ms(frame_ms: int) -> int:
    if not 1 <= frame_ms <= 1000:
        raise ValueError(f"frame_ms must be 1..1000, got {frame_ms}")
    return frame_ms


#: libsndfile's header log line for a WAV/AIFF/CAF audio chunk whose declared length is not
#: what the file holds: "data : 32000 (should be 15978)".
_CHUNK_LENGTH = re.compile(r"^\s*(data|SSND)\s*:\s*(\d+)\s*\(should be (\d+)\)", re.M)
#: Declared lengths at or above this are "unknown" placeholders of streamed files, not sizes.
_STREAMED_LENGTH = 0x7FFFFFFF


def _check_not_truncated(path: str, handle: sf.SoundFile) -> None:
    """libsndfile quietly shortens a WAV whose data chunk was cut off; refuse it instead, since
    a partial download or a full disk is not the recording the user meant."""
    match = _CHUNK_LENGTH.search(handle.extra_info)
    if match is None:
        return
    declared, present = int(match.group(2)), int(match.group(3))
    if present < declared < _STREAMED_LENGTH:
        raise InputError(
            path, f"truncated: header declares {declared} bytes of audio, file holds {present}"
        )


def _check_last_sample(path: str, handle: sf.SoundFile) -> None:
    """Decode the last declared sample: a cut FLAC/Ogg fails here (one seek, milliseconds)
    instead of after minutes of paced streaming. Leaves the handle at the start."""
    if not handle.seekable() or handle.frames <= 0:
        return
    try:
        handle.seek(handle.frames - 1)
        tail = handle.read(1, dtype="float32", always_2d=True)
    except sf.LibsndfileError as exc:
        raise InputError(
            path, f"truncated: header says {handle.frames} samples ({exc.error_string})"
        ) from exc
    if tail.shape[0] != 1:
        raise InputError(path, f"truncated: header says {handle.frames} samples")
    handle.seek(0)


#: An Ogg page header: capture pattern, version 0, then the header-type flags (RFC 3533 §6).
_OGG_PAGE = b"OggS\x00"
_OGG_END_OF_STREAM = 0x04
_OGG_TAIL_BYTES = 1 << 16  # a page is at most 27 + 255 + 255·255 = 65,307 bytes


def _ogg_cut(tail: bytes, at_end: int) -> str | None:
    """Why the Ogg stream ending in ``tail`` is cut, or None when its last page is complete and
    flags the end of the stream. ``at_end`` is the length of ``tail`` (the file's last bytes)."""
    start = tail.rfind(_OGG_PAGE)
    if start < 0 or start + 27 > at_end:
        return "its last Ogg page is cut"
    segments = tail[start + 26]
    table = tail[start + 27 : start + 27 + segments]
    if len(table) < segments or start + 27 + segments + sum(table) != at_end:
        return "its last Ogg page is cut"
    if not tail[start + 5] & _OGG_END_OF_STREAM:
        return "the Ogg stream has no end-of-stream page"
    return None


def _check_ogg_complete(path: str, handle: sf.SoundFile) -> None:
    """libsndfile takes an Ogg file's length from its last page, so a cut Ogg reads as a shorter,
    valid file; its last page is either partial or lacks the end-of-stream flag. Refuse it, as a
    cut WAV or FLAC is refused."""
    if handle.format != "OGG":
        return
    with open(path, "rb") as stream:
        size = stream.seek(0, 2)
        stream.seek(max(0, size - _OGG_TAIL_BYTES))
        tail = stream.read()
    problem = _ogg_cut(tail, len(tail))
    if problem is not None:
        raise InputError(path, f"truncated: {problem}")


def _check_finite(path: str, handle: sf.SoundFile) -> None:
    """Refuse a float file holding NaN or ±inf, as :func:`read_audio` (``voxmeter features``)
    does. Integer PCM cannot hold them; float files are scanned block by block (flat memory)."""
    if handle.subtype not in ("FLOAT", "DOUBLE"):
        return
    for block in handle.blocks(blocksize=1 << 16, dtype="float64", always_2d=True):
        if not np.isfinite(block).all():
            raise InputError(path, "audio contains NaN or infinite samples")
    handle.seek(0)


def _open_soundfile(path: str) -> sf.SoundFile:
    file = Path(path)
    if file.is_dir():
        raise InputError(path, "is a directory, not an audio file")
    if not file.exists():
        raise InputError(path, "no such file")
    if not file.is_file():
        raise InputError(path, "not a regular file (a device, pipe or socket)")
    if file.stat().st_size == 0:
        raise InputError(path, "empty file (0 bytes)")
    try:
        handle = sf.SoundFile(file)
    except sf.LibsndfileError as exc:
        raise InputError(path, f"not readable as audio ({exc.error_string})") from exc
    except (RuntimeError, ValueError) as exc:
        raise InputError(path, f"not readable as audio ({exc})") from exc
    try:
        check_rate(path, int(handle.samplerate))
        _check_not_truncated(path, handle)
        _check_ogg_complete(path, handle)
        if handle.frames == 0:
            raise InputError(path, "no audio samples")
        _check_last_sample(path, handle)
    except InputError:
        handle.close()
        raise
    return handle


class FileSource:
    """Frames from an audio file (any soundfile format, rate, channels), paced or as fast as read.

    ``realtime=True`` paces frames to the wall clock as a microphone would (demos, soak tests);
    ``realtime=False`` reads as fast as the consumer takes them (batch scoring, tests).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        realtime: bool = True,
        frame_ms: int = 30,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.path = str(path)
        self.realtime = realtime
        self.frame_ms = _check_frame_ms(frame_ms)
        self.stats = SourceStats()
        self._clock = clock
        self._sleep = sleep
        self._closed = False
        with _open_soundfile(self.path) as handle:  # fail now, naming the file, not mid-pipeline
            _check_finite(self.path, handle)

    def close(self) -> None:
        self._closed = True

    async def frames(self) -> AsyncIterator[AudioFrame]:
        handle = _open_soundfile(self.path)
        frame = RATE_HZ * self.frame_ms // 1000
        with handle:
            rate = int(handle.samplerate)
            resample = _Resampler(rate, self.stats, self.path)
            emitted = 0
            pending = np.zeros(0, dtype=np.int16)
            started = self._clock()
            last = False
            while not self._closed and not (last and pending.shape[0] == 0):
                if pending.shape[0] < frame and not last:
                    # Decode about a second at a time: per-call overhead, not per-frame.
                    try:
                        data = handle.read(rate, dtype="float32", always_2d=True)
                    except sf.LibsndfileError as exc:
                        raise InputError(
                            self.path, f"unreadable audio ({exc.error_string})"
                        ) from exc
                    last = data.shape[0] < rate
                    pending = np.concatenate([pending, resample(data, last=last)])
                    continue
                samples, pending = pending[:frame], pending[frame:]
                start = emitted / RATE_HZ
                if self.realtime:
                    ahead = start - (self._clock() - started)
                    if ahead > 0:
                        await self._sleep(ahead)
                emitted += samples.shape[0]
                self.stats.frames_total += 1
                yield AudioFrame(samples, start)


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
        self.frame_ms = _check_frame_ms(frame_ms)
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
        resample = _Resampler(self.rate_hz, self.stats, str(self.name))
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
                    yield AudioFrame(samples, emitted / RATE_HZ)
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


# ------------------------------------------------------------------------------ microphone
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
    """PortAudio through sounddevice, at the device's own rate (``rate_hz`` overrides it)."""

    def __init__(self, *, rate_hz: int | None = None, block_ms: int = 30) -> None:
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
        self._resample: _Resampler | None = None
        self._early: list[tuple[np.ndarray, bool]] = []
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
        """Random delay before retry ``attempt`` (1-based): full jitter under a capped doubling."""
        cap = min(self.backoff_max_seconds, self.backoff_initial_seconds * 2 ** (attempt - 1))
        return self._rng.uniform(cap / 2, cap)

    def _on_block(self, generation: int, block: np.ndarray, overflowed: bool) -> None:
        """Runs on the event loop: resample, stamp, queue (dropping the oldest when full)."""
        if generation != self._generation:
            return  # a late block from a stream already closed
        if self._resample is None:  # the stream started before open() returned
            if len(self._early) >= self._queue_frames:
                self._early.pop(0)
                self.stats.dropped += 1
            self._early.append((block, overflowed))
            return
        self._last_block = self._clock()
        if overflowed:
            self.stats.overflows += 1
        samples = self._resample(block)
        if samples.shape[0] == 0:
            return
        frame = AudioFrame(samples, self._next_start)
        self._next_start += frame.duration_seconds
        if len(self._queue) >= self._queue_frames:
            self._queue.popleft()
            self.stats.dropped += 1
        self._queue.append(frame)
        self._wake.set()

    def _open(self, loop: asyncio.AbstractEventLoop) -> InputStreamHandle:
        generation = self._generation

        def callback(block: np.ndarray, overflowed: bool) -> None:
            with contextlib.suppress(RuntimeError):  # loop closed while the driver still calls
                loop.call_soon_threadsafe(self._on_block, generation, block, overflowed)

        return self._backend.open(self.device, callback)

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
            self._captured = True
            self._resample = _Resampler(handle.rate_hz, self.stats, f"audio device {self.device!r}")
            # Time goes on from the wall clock across an outage, and never backwards.
            self._next_start = max(self._next_start, self._clock() - self._started)
            self._last_block = self._clock()
            early, self._early = self._early, []
            for block, overflowed in early:
                self._on_block(self._generation, block, overflowed)
            logger.info("capturing from %s at %d Hz", self.device or "default", handle.rate_hz)
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
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), timeout=0.25)
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


# ---------------------------------------------------------------------------------- specs
SOURCE_SPELLINGS = (
    "mic, mic:DEVICE, file:PATH[?fast], stdin, stdin:RATE[:CHANNELS], "
    "wyoming://HOST:PORT, wyoming-listen://HOST:PORT or "
    "wyoming-proxy://HOST:PORT?upstream=tcp://HOST:PORT"
)


@dataclass(frozen=True)
class SourceSpec:
    """A parsed source spelling (see :func:`parse_source`); only the fields of its kind matter."""

    kind: Literal["mic", "file", "stdin", "wyoming", "wyoming-proxy"]
    text: str  # as given
    device: str | int | None = None  # mic: name or index; None = default input
    path: str = ""  # file
    fast: bool = False  # file: ``?fast``, not paced in real time
    rate_hz: int = RATE_HZ  # stdin
    channels: int = 1  # stdin


@dataclass(frozen=True)
class Retry:
    """How a microphone or Wyoming source retries a missing or failing device."""

    initial_seconds: float
    max_seconds: float
    wait_for_device: bool  # False: a device missing at start is an error


def parse_source(spec: str) -> SourceSpec:
    """The one parser of a source's command-line and config spelling.

    ``mic`` (default input), ``mic:NAME`` or ``mic:INDEX``; ``file:PATH`` (paced in real time),
    ``file:PATH?fast`` (as fast as possible); ``stdin`` (16 kHz), ``stdin:RATE`` or
    ``stdin:RATE:CHANNELS`` (raw s16le PCM); ``wyoming://HOST:PORT`` (a Wyoming microphone
    service) or ``wyoming-listen://HOST:PORT`` (Wyoming clients stream to us), ``?once`` to end
    with the first connection (monitor/audio/wyoming.py);
    ``wyoming-proxy://HOST:PORT?upstream=tcp://HOST:PORT`` (we relay a Wyoming service and
    measure what passes, monitor/audio/wyoming_proxy.py). A bad one raises InputError.
    """
    kind, _, arg = spec.partition(":")
    if kind == "mic":
        device: str | int | None = (int(arg) if arg.isdigit() else arg) if arg else None
        return SourceSpec("mic", spec, device=device)
    if kind == "file" and arg:
        fast = arg.endswith("?fast")
        return SourceSpec("file", spec, path=arg.removesuffix("?fast"), fast=fast)
    if kind == "stdin":
        parts = arg.split(":") if arg else []
        if len(parts) <= 2 and all(p.isdigit() for p in parts):
            rate = int(parts[0]) if parts else RATE_HZ
            channels = int(parts[1]) if len(parts) == 2 else 1
            return SourceSpec("stdin", spec, rate_hz=rate, channels=channels)
        raise InputError("stdin", f"bad stream spec {spec!r} (expected stdin[:RATE[:CHANNELS]])")
    if kind in ("wyoming", "wyoming-listen"):
        # wyoming.py imports this module (frames, clocks): a top-level import would be circular
        from monitor.audio.wyoming import parse_endpoint

        parse_endpoint(spec)  # checked now; WyomingSource keeps the parsed endpoint
        return SourceSpec("wyoming", spec)
    if kind == "wyoming-proxy":
        from monitor.audio.wyoming_proxy import parse_proxy  # circular at the top, as above

        parse_proxy(spec)
        return SourceSpec("wyoming-proxy", spec)
    raise InputError("source", f"unknown audio source {spec!r} (must be {SOURCE_SPELLINGS})")


def open_source(
    spec: str | SourceSpec,
    *,
    fast: bool = False,
    retry: Retry | None = None,
    zeroconf: bool = False,
) -> AudioSource:
    """Build a source from its spelling; ``fast`` also unpaces files, ``retry`` (default: each
    source's own) sets a microphone's or Wyoming source's retries, ``zeroconf`` announces a
    Wyoming server of ours (``wyoming-listen``, ``wyoming-proxy``) on mDNS."""
    parsed = parse_source(spec) if isinstance(spec, str) else spec
    retries: dict[str, Any] = {}
    if retry is not None:
        retries = {
            "backoff_initial_seconds": retry.initial_seconds,
            "backoff_max_seconds": retry.max_seconds,
            "wait_for_device": retry.wait_for_device,
        }
    match parsed.kind:
        case "mic":
            return MicrophoneSource(parsed.device, **retries)
        case "file":
            return FileSource(parsed.path, realtime=not (parsed.fast or fast))
        case "stdin":
            return StdinSource(parsed.rate_hz, channels=parsed.channels)
        case "wyoming":
            # circular at the top (see parse_source)
            from monitor.audio.wyoming import WyomingSource, parse_endpoint

            endpoint = parse_endpoint(parsed.text)
            announce = zeroconf and endpoint.listen
            return WyomingSource(endpoint, zeroconf=announce, **retries)
        case "wyoming-proxy":
            from monitor.audio.wyoming_proxy import WyomingProxySource, parse_proxy

            retries.pop("wait_for_device", None)  # an upstream down at start is an outage too
            return WyomingProxySource(parse_proxy(parsed.text), zeroconf=zeroconf, **retries)
