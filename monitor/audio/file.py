"""Audio files: opened with checks (cut, empty, non-audio, NaN), read whole or in blocks for
offline work, or streamed as frames by :class:`FileSource`.

A missing, empty, truncated or non-audio file raises :class:`InputError` naming the file, before
anything downstream starts.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from monitor.audio.frames import (
    RATE_HZ,
    AudioFrame,
    Clock,
    Resampler,
    Sleep,
    SourceStats,
    check_frame_ms,
    check_rate,
)
from monitor.errors import InputError


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

    ``realtime=True`` paces frames to the wall clock as a microphone would (demos, soak tests),
    released in groups of ``pace_ms`` (whole frames, each left no earlier than its start): the
    event loop wakes once per group, not once per 30 ms frame, since each wake-up (cold
    caches, the queue hand-over) costs more than the frame's VAD work;
    ``realtime=False`` reads as fast as the consumer takes them (batch scoring, tests).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        realtime: bool = True,
        frame_ms: int = 30,
        pace_ms: int = 120,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.path = str(path)
        self.realtime = realtime
        self.frame_ms = check_frame_ms(frame_ms)
        self.group_frames = max(1, pace_ms // self.frame_ms)  # frames released per wake-up
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
            resample = Resampler(rate, self.stats, self.path)
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
                    if ahead > 1e-9:  # until this frame and the rest of its group are due
                        await self._sleep(ahead + (self.group_frames - 1) * frame / RATE_HZ)
                emitted += samples.shape[0]
                self.stats.frames_total += 1
                yield AudioFrame(samples, start, source_rate_hz=rate)
