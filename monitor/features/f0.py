"""F0 as paper 000 uses it: a histogram of YIN pitch lags at 8 kHz.

Our own YIN (de Cheveigné & Kawahara 2002), vectorised over frames: the difference function
comes from an FFT cross-correlation of every frame at once, then the cumulative mean normalised
difference, then the first lag whose value dips under the absolute threshold (followed down to
the bottom of that dip). Lags are integers 17..123 at 8 kHz (F0 = 8000 / lag, 65..450 Hz), so
the histogram has exactly 107 bins keyed on the lag, and no parabolic refinement is needed.
Frames that never dip under the threshold, or are too quiet, are unvoiced and dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import soxr

from monitor.features.base import HistogramFeature, Observation

RATE_HZ = 8000
"""YIN runs at 8 kHz, the rate of paper 000's telephone corpus."""
F0_MIN_HZ = 65.0
F0_MAX_HZ = 450.0
LAG_MIN = int(np.floor(RATE_HZ / F0_MAX_HZ))  # 17
LAG_MAX = int(np.floor(RATE_HZ / F0_MIN_HZ))  # 123
N_LAGS = LAG_MAX - LAG_MIN + 1  # 107
HOP = RATE_HZ // 100  # 10 ms
FRAME = 2 * LAG_MAX  # torch-yin's frame length; the integration window is its first half
WINDOW = FRAME - LAG_MAX
_FFT_SIZE = 256  # >= FRAME, so circular correlation equals linear for lags <= LAG_MAX

LAGS = np.arange(LAG_MIN, LAG_MAX + 1)
"""(107,) the lag of every histogram bin, in samples at 8 kHz."""


@dataclass(frozen=True)
class YinTrack:
    """Per-frame YIN output: lag in samples (0 where unvoiced) and the voiced mask, (frames,)."""

    lags: np.ndarray
    voiced: np.ndarray


def _frames(signal: np.ndarray) -> np.ndarray:
    """(n_frames, FRAME) view of ``signal`` at a 10 ms hop; no padding (partial frames dropped)."""
    if signal.shape[0] < FRAME:
        return np.empty((0, FRAME), dtype=signal.dtype)
    return np.lib.stride_tricks.sliding_window_view(signal, FRAME)[::HOP]


def cmnd(frames: np.ndarray) -> np.ndarray:
    """Cumulative mean normalised difference d'(tau), tau = 0..LAG_MAX: (F, FRAME) -> (F, 124).

    d(tau) = sum_j (x_j - x_{j+tau})^2 over the first WINDOW samples of each frame, computed as
    e(0) + e(tau) - 2 r(tau) with r the cross-correlation (one batched FFT) and e the sliding
    window energies (one cumulative sum).
    """
    x = frames.astype(np.float64)
    spectrum = np.fft.rfft(x, _FFT_SIZE, axis=1)
    head = np.fft.rfft(x[:, :WINDOW], _FFT_SIZE, axis=1)
    r = np.fft.irfft(np.conj(head) * spectrum, _FFT_SIZE, axis=1)[:, : LAG_MAX + 1]
    csum = np.concatenate([np.zeros((x.shape[0], 1)), np.cumsum(x * x, axis=1)], axis=1)
    taus = np.arange(LAG_MAX + 1)
    energy = csum[:, taus + WINDOW] - csum[:, taus]  # e(tau), (F, 124)
    d = np.maximum(energy[:, :1] + energy - 2.0 * r, 0.0)
    d[:, 0] = 0.0
    running = np.cumsum(d[:, 1:], axis=1)
    out = np.ones_like(d)
    with np.errstate(divide="ignore", invalid="ignore"):
        out[:, 1:] = np.where(running > 0, d[:, 1:] * taus[1:] / running, 1.0)
    return out


def yin(
    audio_8k: np.ndarray,
    *,
    threshold: float = 0.1,
    floor_dbfs: float = -50.0,
    relative_db: float = -35.0,
) -> YinTrack:
    """YIN lags of every 10 ms frame of 8 kHz audio.

    A frame is voiced when d' dips under ``threshold`` at some lag in 17..123 (the lag is the
    bottom of the first such dip) and its RMS is above both ``floor_dbfs`` and ``relative_db``
    below the loudest frames (99th percentile), so breath and room noise left by the VAD do not
    add spurious lags.
    """
    stats = _frame_stats(_frames(np.asarray(audio_8k, dtype=np.float32)), threshold)
    return _gated(*stats, floor_dbfs=floor_dbfs, relative_db=relative_db)


def _frame_stats(
    frames: np.ndarray, threshold: float = 0.1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per frame, what YIN needs from its samples alone: (has a dip, lag index of its bottom,
    RMS of the integration window), each (F,). Only the voicing gate needs the whole window."""
    if frames.shape[0] == 0:
        return np.zeros(0, bool), np.zeros(0, np.int64), np.zeros(0)
    dprime = cmnd(frames)[:, LAG_MIN:]  # (F, 107), column k is lag LAG_MIN + k
    below = dprime < threshold
    has_dip = below.any(axis=1)
    first = np.argmax(below, axis=1)
    # follow the dip down: the first lag >= first whose successor is not lower
    stops = np.ones_like(below)
    stops[:, :-1] = dprime[:, 1:] >= dprime[:, :-1]
    stops &= np.arange(N_LAGS)[None, :] >= first[:, None]
    bottom = np.argmax(stops, axis=1)
    rms = np.sqrt(np.mean(frames[:, :WINDOW].astype(np.float64) ** 2, axis=1))
    return has_dip, bottom, rms


def _gated(
    has_dip: np.ndarray,
    bottom: np.ndarray,
    rms: np.ndarray,
    *,
    floor_dbfs: float = -50.0,
    relative_db: float = -35.0,
) -> YinTrack:
    """The track once every frame of the window is known: the loudness gate is relative to the
    window's loudest frames (99th percentile of RMS)."""
    if rms.shape[0] == 0:
        return YinTrack(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool))
    loud = np.percentile(rms, 99)
    gate = max(10.0 ** (floor_dbfs / 20.0), loud * 10.0 ** (relative_db / 20.0))
    voiced = has_dip & (rms >= gate)
    lags = np.where(voiced, bottom + LAG_MIN, 0)
    return YinTrack(lags.astype(np.int64), voiced)


def to_8k(audio: np.ndarray, rate: int) -> np.ndarray:
    """float32 mono audio resampled to 8 kHz with soxr."""
    signal = np.asarray(audio, dtype=np.float32)
    if signal.ndim != 1:
        raise ValueError(f"audio must be mono (n,), got shape {signal.shape}")
    if rate == RATE_HZ:
        return signal
    return soxr.resample(signal, rate, RATE_HZ).astype(np.float32, copy=False)


def lag_histogram(audio: np.ndarray, rate: int) -> np.ndarray:
    """(107,) counts of voiced frames per integer lag 17..123."""
    return _histogram(yin(to_8k(audio, rate)))


def _histogram(track: YinTrack) -> np.ndarray:
    return np.bincount(track.lags[track.voiced] - LAG_MIN, minlength=N_LAGS).astype(np.float64)


class F0Stream:
    """One window's lag histogram as audio arrives: resampled by a soxr stream (the same
    samples as resampling the whole window) and each 10 ms frame analysed once its 31 ms are
    in; the voicing gate and the counting wait for the window's end."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._resampler = soxr.ResampleStream(rate, RATE_HZ, 1, dtype="float32")
        self._tail = np.zeros(0, np.float32)  # 8 kHz samples from the next frame's start
        self._stats: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.samples = 0

    def feed(self, audio: np.ndarray) -> None:
        block = np.asarray(audio, dtype=np.float32)
        self.samples += block.shape[0]
        self._analyse(self._resampler.resample_chunk(block, last=False))

    def _analyse(self, resampled: np.ndarray) -> None:
        self._tail = np.concatenate([self._tail, resampled])
        frames = _frames(self._tail)
        if frames.shape[0]:
            self._stats.append(_frame_stats(frames))
            self._tail = self._tail[frames.shape[0] * HOP :]

    def finish(self) -> Observation:
        self._analyse(self._resampler.resample_chunk(np.zeros(0, np.float32), last=True))
        stats = self._stats or [_frame_stats(np.zeros((0, FRAME), np.float32))]
        has_dip, bottom, rms = (np.concatenate(column) for column in zip(*stats, strict=True))
        track = _gated(has_dip, bottom, rms)
        return Observation("f0", _histogram(track), self.samples / self.rate)


def median_hz(histogram: np.ndarray) -> float:
    """Median F0 (Hz) of the voiced frames a lag histogram counts; NaN if it counts none."""
    counts = np.asarray(histogram, dtype=np.float64)
    total = counts.sum()
    if total <= 0:
        return float("nan")
    # F0 falls as the lag grows, so the median lag gives the median F0
    index = int(np.searchsorted(np.cumsum(counts), total / 2.0))
    return float(RATE_HZ / LAGS[index])


class F0Feature(HistogramFeature):
    """``f0``: 107-bin histogram of YIN lags (counts); pooled by adding; scored by -JS bits."""

    name = "f0"
    dimension = N_LAGS
    version = "yin8k-1"

    def counts(self, audio: np.ndarray, rate: int) -> np.ndarray:
        return lag_histogram(audio, rate)

    def stream(self, rate: int) -> F0Stream | None:
        """Frames analysed while the window fills (soxr resamples any rate but 8 kHz)."""
        return F0Stream(rate) if rate != RATE_HZ else None

    def describe(self, observation: Observation) -> dict[str, Any]:
        counts = observation.values
        median = median_hz(counts)
        return {
            "median_hz": None if np.isnan(median) else median,  # None: no voiced frame
            "voiced_frames": int(counts.sum()),
            "lags": LAG_MIN,
            "histogram": [int(c) for c in counts],
        }
