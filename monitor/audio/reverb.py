"""Synthetic room responses for the far-field copy of a member's profile.

A member enrols from clean close-talk files; across a living room their windows score below
the clean profile's threshold. Enrolment therefore also keeps the template of the same files
heard in rooms: each file convolved with a response of exponentially decaying noise (the
statistical model of a diffuse late field, Schroeder/Polack), RT60 drawn in
:data:`RT60_SECONDS`, a direct path :data:`DRR_DB` dB above or below the reverberation (near
and far seats), seeded per file so the same files give the same copy.

Deliberately not pyroomacoustics' image-source method: the benchmark's rooms are made with it
(bench/rooms.py), and a copy made the same way would be judged on its own model.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from monitor.audio.frames import RATE_HZ

RT60_SECONDS = (0.3, 0.8)
"""Reverberation times drawn (uniform): a furnished living room to a bare one."""
DRR_DB = (-6.0, 3.0)
"""Direct-to-reverberant ratios drawn (uniform): 4 m away to 1 m away in such rooms."""
PREDELAY_SECONDS = 0.003
"""The first reflections arrive after the direct path (a few ms in a living room)."""
ROOM_SEED = 2029


def synthetic_rir(
    rng: np.random.Generator, rt60_seconds: float, drr_db: float, rate_hz: int = RATE_HZ
) -> npt.NDArray[np.float64]:
    """A unit direct path, then Gaussian noise decaying 60 dB in ``rt60_seconds``, scaled so
    the direct path's energy is ``drr_db`` above the tail's."""
    length = round(1.2 * rt60_seconds * rate_hz)  # to −72 dB
    t = np.arange(length) / rate_hz
    tail = rng.standard_normal(length) * np.exp(-np.log(1000.0) * t / rt60_seconds)
    tail[: round(PREDELAY_SECONDS * rate_hz)] = 0.0
    tail *= np.sqrt(10.0 ** (-drr_db / 10.0) / float(np.sum(tail**2)))
    tail[0] = 1.0
    return tail


def in_a_room(audio: npt.NDArray[np.floating], index: int, seed: int = ROOM_SEED) -> np.ndarray:
    """``audio`` (16 kHz) heard in the ``index``-th seeded room, its length and RMS kept."""
    from scipy.signal import fftconvolve

    rng = np.random.default_rng([seed, index])
    rt60, drr = rng.uniform(*RT60_SECONDS), rng.uniform(*DRR_DB)
    dry = np.asarray(audio, dtype=np.float64)
    wet = fftconvolve(dry, synthetic_rir(rng, rt60, drr))[: dry.shape[0]]
    level = float(np.sqrt(np.mean(wet**2))) if wet.size else 0.0
    if level > 0:
        wet *= float(np.sqrt(np.mean(dry**2))) / level
    return wet
