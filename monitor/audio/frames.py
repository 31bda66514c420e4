"""Frames, rates and the resampler every audio source shares.

Every source yields :class:`AudioFrame` s of 16 kHz mono int16 samples stamped with the time of
their first sample, whatever the device, file or stream delivers: the rest of the pipeline
(VAD, windows, features) sees one format only. Each source converts with one
:class:`Resampler` and checks its rate and frame length with the functions here.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np
import soxr

from monitor.audio.retry import backoff_seconds as backoff_seconds  # re-exported: sources use it
from monitor.errors import InputError

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


class StreamKey(NamedTuple):
    """Which stream a frame belongs to: the source's name and, for a source that serves several
    clients at once (the Wyoming proxy: one stream per satellite connection), the connection.
    The daemon keeps a VAD, a windower and feature streams per key (monitor/daemon/streams.py)."""

    source: str = ""
    """The source's name (``kitchen=wyoming-proxy://…``); "" = the daemon's only source."""
    connection: int = 0
    """The connection's number within its source, never reused while the source runs; 0 for a
    source with one stream (microphone, file, stdin, Wyoming client)."""


ONE_STREAM = StreamKey()
"""The key of a source's only stream (a name is added where the daemon has several sources)."""


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
    stream: StreamKey = ONE_STREAM
    """The stream this frame continues; each stream has its own timeline (``start_seconds``)."""
    stream_end: bool = False
    """The stream ends after this frame (its connection closed): the daemon closes its turn and
    forgets its state. May be empty."""
    protect_alpha: float | None = None
    """The relay sent this frame's utterance upstream anonymised by McAdams with this α (the
    Wyoming ``audio-start``'s ``voxmeter_protect``); None: passed clear, or not a relay."""
    source_rate_hz: int = RATE_HZ
    """The rate the source delivered before resampling: at most 8 kHz is a narrow-band device
    (:mod:`monitor.audio.band`), tracked and scored against the narrow-band templates."""

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
    dropped_seconds: float = 0.0
    """Audio discarded before the VAD, in seconds: the consumer fell behind (the oldest goes
    first), a chunk that could not be decoded, a second client's audio, a measuring side that
    was behind. Seconds, the one unit of dropped audio everywhere (stats, metrics, logs)."""
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


class Resampler:
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
            self.stats.dropped_seconds += data.shape[0] / self.rate_hz  # silence stands in
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


def check_frame_ms(frame_ms: int) -> int:
    if not 1 <= frame_ms <= 1000:
        raise ValueError(f"frame_ms must be 1..1000, got {frame_ms}")
    return frame_ms
