"""The rooms benchmark's acoustics: seeded living rooms (pyroomacoustics' image-source
responses), a television and pink noise, and a household stream rewritten as heard in one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import soundfile as sf
from scipy.signal import fftconvolve

from bench.household import RATE_HZ, Stream

RT60_SECONDS = (0.2, 0.8)
DISTANCE_M = (0.5, 4.0)
TV_BELOW_DB = 18.0
NOISE_BELOW_DB = 30.0
SPEECH_DBFS = -26.0  # the household's speech level in the recording


@dataclass(frozen=True)
class Room:
    """One simulated living room: its size, reverberation and everyone's place in it."""

    dims_m: tuple[float, float, float]
    rt60_seconds: float  # asked of pyroomacoustics (Sabine)
    measured_rt60_seconds: float  # of the first person's response (Schroeder)
    distances_m: tuple[float, ...]  # each source to the microphone (people, then the TV)
    responses: tuple[np.ndarray, ...]  # each source's impulse response at 16 kHz


def _place(rng: np.random.Generator, dims: np.ndarray, mic: np.ndarray) -> np.ndarray:
    """A point 0.5–4 m from the microphone inside the room (0.3 m from every wall)."""
    for _ in range(1000):
        distance = rng.uniform(*DISTANCE_M)
        azimuth = rng.uniform(0, 2 * np.pi)
        height = rng.uniform(1.0, 1.7)  # a child sitting to an adult standing
        dz = height - mic[2]
        flat = np.sqrt(max(distance**2 - dz**2, 0.01))
        point = mic + np.array([flat * np.cos(azimuth), flat * np.sin(azimuth), dz])
        if np.all(point[:2] > 0.3) and np.all(point[:2] < dims[:2] - 0.3):
            return point
    raise ValueError("no place in the room at that distance")


def make_room(rng: np.random.Generator, sources: int) -> Room:
    """A seeded room with ``sources`` sources and one microphone on a shelf near a wall."""
    import pyroomacoustics as pra

    dims = np.array([rng.uniform(3.5, 6.0), rng.uniform(3.0, 5.0), rng.uniform(2.4, 2.8)])
    rt60 = float(np.exp(rng.uniform(*np.log(RT60_SECONDS))))
    absorption, max_order = pra.inverse_sabine(rt60, dims.tolist())
    room = pra.ShoeBox(dims.tolist(), fs=RATE_HZ, materials=pra.Material(absorption),
                       max_order=max_order, use_rand_ism=False)  # fmt: skip
    mic = np.array([rng.uniform(0.3, dims[0] - 0.3), 0.25, 1.0])
    points = [_place(rng, dims, mic) for _ in range(sources)]
    for point in points:
        room.add_source(point.tolist())
    room.add_microphone(mic.tolist())
    room.compute_rir()
    responses = tuple(np.asarray(room.rir[0][k], dtype=np.float64) for k in range(sources))
    return Room(
        dims_m=(float(dims[0]), float(dims[1]), float(dims[2])),
        rt60_seconds=rt60,
        measured_rt60_seconds=float(pra.experimental.measure_rt60(responses[0], fs=RATE_HZ)),
        distances_m=tuple(float(np.linalg.norm(p - mic)) for p in points),
        responses=responses,
    )


def pink_noise(rng: np.random.Generator, samples: int) -> np.ndarray:
    """Seeded pink (1/f power) noise of unit RMS."""
    spectrum = np.fft.rfft(rng.standard_normal(samples))
    f = np.fft.rfftfreq(samples)
    f[0] = f[1]
    noise = np.fft.irfft(spectrum / np.sqrt(f), n=samples)
    return noise / np.sqrt(np.mean(noise**2))


def television(rng: np.random.Generator, speech: Sequence[Sequence[np.ndarray]], samples: int):
    """A programme: its speakers' utterances one after the other with short pauses."""
    out = np.zeros(samples)
    at = 0
    while at < samples:
        who = speech[int(rng.integers(len(speech)))]
        piece = who[int(rng.integers(len(who)))]
        take = piece[: samples - at]
        out[at : at + take.shape[0]] = take
        at += take.shape[0] + round(rng.uniform(0.1, 0.6) * RATE_HZ)
    return out


def _level(audio: np.ndarray, mask: np.ndarray) -> float:
    return float(np.sqrt(np.mean(audio[mask] ** 2)))


def in_room(
    stream: Stream,
    *,
    seed: int,
    index: int,
    tv_speech: Sequence[Sequence[np.ndarray]] | None,
) -> tuple[Stream, dict[str, Any]]:
    """``stream`` rewritten as heard in a room: each person's speech convolved with their own
    response; with ``tv_speech`` a television and pink noise too. The truth stays the dry
    segments. Returns the stream and what the room was."""
    rng = np.random.default_rng([seed, index, 29])
    dry, rate = sf.read(stream.path, dtype="float64")
    people = [*stream.household.members, *stream.household.strangers]
    room = make_room(rng, len(people) + (tv_speech is not None))
    n = dry.shape[0]
    wet = np.zeros(n)
    speaking = np.zeros(n, dtype=bool)
    for k, person in enumerate(people):
        own = np.zeros(n)
        for seg in stream.truth:
            if seg.speaker == person:
                a, b = round(seg.start * rate), min(round(seg.end * rate), n)
                own[a:b] = dry[a:b]
                speaking[a:b] = True
        wet += fftconvolve(own, room.responses[k])[:n]
    speech_level = _level(wet, speaking)
    facts: dict[str, Any] = {
        "dims_m": room.dims_m,
        "rt60_seconds": room.rt60_seconds,
        "measured_rt60_seconds": room.measured_rt60_seconds,
        "distances_m": room.distances_m,
    }
    if tv_speech is not None:
        programme = television(rng, tv_speech, n)
        tv = fftconvolve(programme, room.responses[-1])[:n]
        tv *= speech_level * 10 ** (-TV_BELOW_DB / 20) / _level(tv, np.abs(programme) > 0)
        noise = pink_noise(rng, n) * speech_level * 10 ** (-NOISE_BELOW_DB / 20)
        wet += tv + noise
        facts |= {"tv_below_db": TV_BELOW_DB, "noise_below_db": NOISE_BELOW_DB}
    wet *= 10 ** (SPEECH_DBFS / 20) / speech_level
    wet /= max(1.0, float(np.abs(wet).max()) / 0.99)
    sf.write(stream.path, wet.astype(np.float32), rate, subtype="PCM_16")
    return stream, facts
