"""Narrow band: what an 8 kHz device delivers, and how a stream's band is named.

A device that records at 8 kHz keeps nothing above 4 kHz. Its audio, resampled to the 16 kHz
every stage works at, meets members' profiles enrolled from 16 kHz files far below their
thresholds (28.5 % of member windows to the right member). Enrolment therefore keeps
a *narrow-band* copy of each template, made from the same files band-limited as such a device
would deliver them (:func:`band_limit`), and the daemon scores a stream whose source rate is
at most :data:`NARROW_RATE_HZ` against those copies (:func:`band_of`).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import numpy.typing as npt

from monitor.audio.frames import RATE_HZ

Band = Literal["wide", "narrow"]
BANDS: tuple[Band, ...] = ("wide", "narrow")

NARROW_RATE_HZ = 8000
"""A source delivering at most this rate is narrow band (telephone, 8 kHz satellites)."""


def band_of(source_rate_hz: int) -> Band:
    """The band of a stream from the rate its source delivered (before resampling to 16 kHz)."""
    return "narrow" if source_rate_hz <= NARROW_RATE_HZ else "wide"


def band_limit(
    audio: npt.NDArray[np.floating], rate_hz: int = RATE_HZ, device_rate_hz: int = NARROW_RATE_HZ
) -> npt.NDArray[np.float64]:
    """``audio`` at ``rate_hz`` as a ``device_rate_hz`` device would deliver it, back at
    ``rate_hz``: down then up with scipy's polyphase filter (its anti-aliasing FIR removes what
    lies above the device's Nyquist frequency), the length kept."""
    from scipy.signal import resample_poly

    samples = np.asarray(audio, dtype=np.float64)
    if device_rate_hz >= rate_hz:
        return samples
    divisor = math.gcd(rate_hz, device_rate_hz)
    up, down = device_rate_hz // divisor, rate_hz // divisor
    narrow = resample_poly(resample_poly(samples, up, down), down, up)
    out = np.zeros_like(samples)
    out[: min(samples.shape[0], narrow.shape[0])] = narrow[: samples.shape[0]]
    return out
