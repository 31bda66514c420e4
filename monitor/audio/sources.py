"""Audio sources: microphone, file and stdin behind one async interface, plus offline reading.

Every source yields :class:`AudioFrame` s of 16 kHz mono int16 samples stamped with the time of
their first sample, whatever the device, file or stream delivers: the rest of the pipeline
(VAD, windows, features) sees one format only.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from monitor.errors import InputError

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
    file = Path(path)
    if not file.is_file():
        raise InputError(name, "no such file")
    if file.stat().st_size == 0:
        raise InputError(name, "empty file (0 bytes)")
    try:
        with sf.SoundFile(file) as handle:
            rate = int(handle.samplerate)
            declared = int(handle.frames)
            data = handle.read(dtype="float32", always_2d=True)
    except sf.LibsndfileError as exc:
        raise InputError(name, f"not readable as audio ({exc.error_string})") from exc
    except (RuntimeError, ValueError) as exc:
        raise InputError(name, f"not readable as audio ({exc})") from exc
    check_rate(name, rate)
    if data.shape[0] == 0:
        raise InputError(name, "no audio samples")
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
