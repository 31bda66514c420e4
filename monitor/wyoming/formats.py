"""The Wyoming audio formats voxmeter accepts from a peer: one table, checked where an event
enters (the proxy's and the relay process's client connections, the ``wyoming-listen`` server,
a ``wyoming://`` microphone service), before anything is allocated for it.

A peer's ``audio-start`` or ``audio-chunk`` names its format in three fields; each is bounded
here, and so is a chunk's payload, before its bytes are read: the measuring side's resampler
and the anonymiser size their buffers by the rate (a rate of 10⁹ once made the anonymiser ask
for gigabytes), and their work per chunk grows with its samples, all of it on the event loop
the assistant's audio goes through. What is outside the table is refused with one line
(:func:`audio_problem`); the relay answers that client a Wyoming ``error`` and lets it go.

The anonymiser handles a subset (:func:`anonymisable`): 16-bit mono at 8–48 kHz; other accepted
audio passes clear with one warning. Its work per chunk is bounded by :data:`MAX_CHUNK_BYTES`.

Numpy-free: the relay process imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MIN_RATE_HZ = 4000
"""Lowest sample rate accepted: below it nothing of speech survives."""
MAX_RATE_HZ = 384000
"""Highest sample rate accepted: above it the value is a typo or an attack."""
WIDTHS = (1, 2, 3, 4)
"""Sample widths in bytes: signed little-endian PCM, as the ``wyoming`` package reads it."""
MAX_CHANNELS = 64
"""Most channels accepted in one stream."""
MAX_CHUNK_BYTES = 16 << 10
"""Largest ``audio-chunk`` payload: 0.5 s of 16 kHz 16-bit mono, or 1024 samples of four
32-bit channels; satellites and Home Assistant send 1024 samples of 16-bit mono (2 KiB) or
less. It bounds the work of every chunk on the relay's event loop (decoding, resampling,
anonymising: at most 8192 samples, 1 s at 8 kHz, about 100 LPC frames, 7 ms of CPU on a 2020
laptop core)."""
ANONYMISABLE_RATES_HZ = (8000, 48000)
"""Sample rates (inclusive) the anonymiser works at; it takes 16-bit mono only."""

_FIELDS = ("rate", "width", "channels")
_FORMATTED = ("audio-start", "audio-chunk")


@dataclass(frozen=True)
class AudioFormat:
    """One stream's format, from an event's fields once they passed :func:`audio_problem`."""

    rate_hz: int
    width_bytes: int
    channels: int

    @property
    def bytes_per_second(self) -> int:
        return self.rate_hz * self.width_bytes * self.channels


def _whole(value: object) -> int | None:
    """``value`` as an int if it is a whole number (16000 or 16000.0, never True), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _field_problem(key: str, value: object) -> str | None:
    number = _whole(value)
    if number is None:
        return f"{key} {value!r} is not a whole number"
    if key == "rate" and not MIN_RATE_HZ <= number <= MAX_RATE_HZ:
        return f"rate {number} Hz is outside {MIN_RATE_HZ}..{MAX_RATE_HZ}"
    if key == "width" and number not in WIDTHS:
        return f"width {number} bytes is not one of {', '.join(map(str, WIDTHS))}"
    if key == "channels" and not 1 <= number <= MAX_CHANNELS:
        return f"channels {number} is outside 1..{MAX_CHANNELS}"
    return None


def audio_problem(kind: str, data: dict[str, Any], payload_bytes: int) -> str | None:
    """Why an event of type ``kind`` with ``data`` and a payload of ``payload_bytes`` is refused
    (one line naming the field and its value), or None when it is accepted or not audio."""
    if kind not in _FORMATTED:
        return None
    for key in _FIELDS:
        if key not in data:
            return f"{kind} without {key}"
        problem = _field_problem(key, data[key])
        if problem is not None:
            return f"{kind} {problem}"
    if kind == "audio-chunk" and payload_bytes > MAX_CHUNK_BYTES:
        return f"audio-chunk of {payload_bytes} bytes is over {MAX_CHUNK_BYTES}"
    return None


def audio_format(data: dict[str, Any]) -> AudioFormat:
    """The format of an event :func:`audio_problem` accepted; ValueError naming the field
    otherwise."""
    values = [_whole(data.get(key)) for key in _FIELDS]
    rate, width, channels = values
    if rate is None or width is None or channels is None:
        raise ValueError(f"not an audio format: {[data.get(key) for key in _FIELDS]!r}")
    return AudioFormat(rate, width, channels)


def anonymisable(fmt: AudioFormat) -> bool:
    """Whether the anonymiser works on audio of ``fmt`` (16-bit mono at 8–48 kHz)."""
    low, high = ANONYMISABLE_RATES_HZ
    return fmt.width_bytes == 2 and fmt.channels == 1 and low <= fmt.rate_hz <= high
