"""Seeded household streams from held-out corpus speakers, with the truth of who spoke when.

A household talks in turns: three members (local profiles) and one or two strangers; turns of
1.5–20 s (log-uniform), mostly handing over to someone else, separated by pauses drawn from
what conversation analysis reports (most 0.2–1 s, some quicker, an occasional long silence).
A turn is the speaker's held-out utterances (never those behind a template or profile), each
trimmed of its leading and trailing silence, in a seeded order, cut to the turn's length, with
a breath of 0.15 s between utterances. The truth is one segment per utterance piece.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from monitor.audio.file import read_audio

RATE_HZ = 16000
TURN_SECONDS = (1.5, 20.0)
BREATH_SECONDS = 0.15


@dataclass(frozen=True)
class Segment:
    """Speech of one person in stream time (seconds)."""

    speaker: str
    start: float
    end: float


@dataclass(frozen=True)
class Household:
    """Who lives in a stream: members (with local profiles) and strangers."""

    members: tuple[str, ...]
    strangers: tuple[str, ...]


@dataclass(frozen=True)
class Stream:
    path: Path
    household: Household
    truth: tuple[Segment, ...]
    seconds: float
    rate_hz: int


def trimmed(path: Path) -> np.ndarray:
    """An utterance without its leading and trailing silence (50 ms frames 40 dB below peak)."""
    audio, _ = read_audio(path)
    frame = RATE_HZ // 20
    n = audio.shape[0] // frame
    if n == 0:
        return audio
    energy = np.sqrt(np.mean(audio[: n * frame].reshape(n, frame) ** 2, axis=1))
    loud = np.flatnonzero(energy > energy.max() * 10 ** (-40 / 20))
    return audio[loud[0] * frame : (loud[-1] + 1) * frame]


def _pause(rng: np.random.Generator) -> float:
    """Seconds between two turns: mostly 0.2–1 s, sometimes quicker, rarely a long silence."""
    draw = rng.random()
    if draw < 0.15:
        return float(rng.uniform(0.05, 0.2))  # a quick answer (the VAD's hangover hides it)
    if draw < 0.95:
        return float(rng.uniform(0.2, 1.2))
    return float(rng.uniform(3.0, 20.0))


def look_alikes(
    rng: np.random.Generator, pool: Sequence[str], groups: Mapping[str, str], strangers: int
) -> list[str]:
    """Three members and ``strangers`` strangers from ``pool``, every stranger of the same
    group (gender and age band) as a member: the strangers a household's own scores confuse
    most. Each stranger is drawn with a member of their group (a seeded order), the other
    members from anyone left."""
    order = [str(pool[k]) for k in rng.permutation(len(pool))]
    members: list[str] = []
    chosen: list[str] = []
    for _ in range(strangers):
        used = set(members + chosen)
        for name in order:
            alike = [n for n in order if n != name and groups[n] == groups[name]
                     and n not in used]  # fmt: skip
            if name not in used and alike:
                members.append(name)
                chosen.append(alike[0])
                break
    members += [n for n in order if n not in members + chosen][: 3 - len(members)]
    return members[:3] + chosen


def make_stream(
    index: int,
    *,
    speech: Mapping[str, Sequence[np.ndarray]],
    pool: Sequence[str],
    minutes: float,
    seed: int,
    folder: Path,
    rate_hz: int = RATE_HZ,
    strangers: int | None = None,
    groups: Mapping[str, str] | None = None,
) -> Stream:
    """Stream ``index`` of a seeded set: 3 members and 1–2 strangers drawn from ``pool``
    (``strangers``: that many; ``groups``: speaker → gender and age band, every stranger of a
    member's group, :func:`look_alikes`)."""
    rng = np.random.default_rng([seed, index])
    if groups is not None:
        people = look_alikes(rng, pool, groups, 2 if strangers is None else strangers)
        household = Household(tuple(people[:3]), tuple(people[3:]))
    else:
        people = list(rng.choice(list(pool), size=5, replace=False))
        drawn = int(rng.integers(1, 3))  # drawn either way: the streams after stay the same
        count = drawn if strangers is None else strangers
        household = Household(tuple(people[:3]), tuple(people[3 : 3 + count]))
    everyone = [*household.members, *household.strangers]
    weights = np.array([1.0] * 3 + [0.6] * len(household.strangers))
    cursor = {p: (int(rng.integers(len(speech[p]))), 0) for p in everyone}
    pieces: list[np.ndarray] = []
    truth: list[Segment] = []
    now = 0.5
    pieces.append(np.zeros(round(now * RATE_HZ), dtype=np.float32))
    current = None
    while now < minutes * 60.0:
        choices = [p for p in everyone if p != current] if rng.random() < 0.9 else everyone
        w = np.array([weights[everyone.index(p)] for p in choices])
        current = str(rng.choice(choices, p=w / w.sum()))
        left = float(np.exp(rng.uniform(*np.log(TURN_SECONDS))))
        while left > 0.3:
            utterance, offset = cursor[current]
            audio = speech[current][utterance][offset:]
            take = audio[: round(left * RATE_HZ)]
            pieces.append(take)
            truth.append(Segment(current, now, now + take.shape[0] / RATE_HZ))
            now += take.shape[0] / RATE_HZ
            left -= take.shape[0] / RATE_HZ
            if take.shape[0] < audio.shape[0]:
                cursor[current] = (utterance, offset + take.shape[0])
            else:
                cursor[current] = ((utterance + 1) % len(speech[current]), 0)
                if left > 0.3:
                    pieces.append(np.zeros(round(BREATH_SECONDS * RATE_HZ), dtype=np.float32))
                    now += BREATH_SECONDS
                    left -= BREATH_SECONDS
        gap = _pause(rng)
        pieces.append(np.zeros(round(gap * RATE_HZ), dtype=np.float32))
        now += gap
    audio = np.concatenate(pieces)
    if rate_hz != RATE_HZ:
        audio = soxr.resample(audio, RATE_HZ, rate_hz, quality="HQ")
    path = folder / f"stream-{index:03d}-{rate_hz // 1000}k.wav"
    sf.write(path, audio, rate_hz, subtype="PCM_16")
    return Stream(path, household, tuple(truth), audio.shape[0] / rate_hz, rate_hz)


def overlaps(truth: Sequence[Segment], start: float, end: float) -> dict[str, float]:
    """Seconds of each speaker's truth inside [start, end)."""
    out: dict[str, float] = {}
    for segment in truth:
        inside = min(end, segment.end) - max(start, segment.start)
        if inside > 0:
            out[segment.speaker] = out.get(segment.speaker, 0.0) + inside
    return out
