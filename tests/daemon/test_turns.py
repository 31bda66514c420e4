"""The turn splitter cuts a window where its parts stop sounding alike (a real spectral
embedding of synthetic voices: two harmonic tones an octave apart)."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.audio.frames import RATE_HZ
from monitor.audio.windows import SpeechWindow
from monitor.daemon.turns import EarlyParts, TurnSplitter


def voice(f0: float, seconds: float, rng: np.random.Generator) -> np.ndarray:
    """A harmonic tone with a little noise: a stand-in for one voice."""
    t = np.arange(round(seconds * RATE_HZ)) / RATE_HZ
    tone = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 6))
    return (0.2 * tone + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


def spectrum(samples: np.ndarray) -> np.ndarray:
    """Log power in 64 bands up to 4 kHz, mean-removed: close for the same tone."""
    power = np.abs(np.fft.rfft(samples, n=RATE_HZ)) ** 2
    bands = np.log(power[:4096].reshape(64, -1).sum(axis=1) + 1e-9)
    return bands - bands.mean()


def window(samples: np.ndarray, start: float = 10.0) -> SpeechWindow:
    seconds = samples.shape[0] / RATE_HZ
    return SpeechWindow(samples, start, start + seconds, seconds)


def test_one_voice_stays_whole(rng: np.random.Generator) -> None:
    splitter = TurnSplitter(spectrum, change_cosine=0.5)
    w = window(voice(150.0, 3.0, rng))
    assert splitter.cosines(w).min() > 0.9
    assert splitter.split(w) == [w] and splitter.changes == 0


def test_a_change_on_a_part_boundary_is_cut_there(rng: np.random.Generator) -> None:
    splitter = TurnSplitter(spectrum, change_cosine=0.5)
    w = window(np.concatenate([voice(150.0, 2.0, rng), voice(310.0, 1.0, rng)]))
    first, second = splitter.split(w)
    assert (first.speech_seconds, second.speech_seconds) == (2.0, 1.0)
    assert (first.start_seconds, first.end_seconds) == (10.0, pytest.approx(12.0))
    assert second.end_seconds == pytest.approx(13.0)
    assert not first.mixed and not second.mixed and splitter.changes == 1
    assert np.array_equal(np.concatenate([first.samples, second.samples]), w.samples)


def test_a_part_between_two_changes_is_marked_mixed(rng: np.random.Generator) -> None:
    splitter = TurnSplitter(spectrum, change_cosine=0.5)
    samples = np.concatenate(
        [voice(150.0, 1.0, rng), voice(310.0, 1.0, rng), voice(150.0, 1.0, rng)]
    )
    pieces = splitter.split(window(samples))
    assert [p.mixed for p in pieces] == [False, True, False]


def test_too_short_to_compare_and_a_bad_threshold() -> None:
    splitter = TurnSplitter(spectrum, change_cosine=0.5)
    short = window(np.zeros(RATE_HZ + 100, dtype=np.float32))
    assert splitter.cosines(short).size == 0 and splitter.split(short) == [short]
    with pytest.raises(ValueError, match="change_cosine"):
        TurnSplitter(spectrum, change_cosine=1.5)


@pytest.mark.parametrize("seconds", [3.0, 2.5, 4.0, 1.5])
def test_parts_embedded_while_the_window_fills_cut_as_at_its_end(
    rng: np.random.Generator, seconds: float
) -> None:
    """Parts embedded early (as chunks arrive) are the parts' own embeddings: the same cuts as
    embedding every part at the window's end; only the last one or two are left for the end."""
    samples = np.concatenate([voice(150.0, 2.0, rng), voice(310.0, 2.0, rng)])
    samples = samples[: round(seconds * RATE_HZ)]
    w = window(samples)
    late = TurnSplitter(spectrum, change_cosine=0.5)
    early = TurnSplitter(spectrum, change_cosine=0.5)
    parts = EarlyParts(early)
    fed: list[np.ndarray] = []
    for i in range(0, samples.shape[0], 4321):  # chunks straddle part edges
        fed.append(samples[i : i + 4321])
        parts.advance(fed, sum(c.shape[0] for c in fed))
    vectors = parts.of(samples, np.concatenate(fed))
    assert np.array_equal(vectors, late.vectors(samples))
    assert parts.early == max(0, int(seconds) - 1)  # all but the last part, when it is whole
    assert parts.late == len(vectors) - parts.early
    got, expected = early.split(w, vectors), late.split(w)
    assert [(p.start_seconds, p.end_seconds, p.mixed) for p in got] == [
        (p.start_seconds, p.end_seconds, p.mixed) for p in expected
    ]
    assert early.changes == late.changes
    if seconds >= 3.0:  # whole parts on each side of the change at 2 s
        assert early.changes == 1


def test_parts_of_another_windows_speech_are_not_reused(rng: np.random.Generator) -> None:
    splitter = TurnSplitter(spectrum, change_cosine=0.5)
    parts = EarlyParts(splitter)
    other = voice(310.0, 3.0, rng)
    parts.advance([other], other.shape[0])
    assert parts.early == 2
    samples = voice(150.0, 3.0, rng)
    assert np.array_equal(parts.of(samples, other), splitter.vectors(samples))
    assert parts.late == 3
