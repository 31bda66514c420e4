"""Our YIN on synthetic signals: the lag of a known pitch, the slow reference, voicing gates."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.features import f0
from monitor.features.base import Observation, TemplateBatch


def harmonic_tone(hz: float, seconds: float = 1.0, rate: int = 16000) -> np.ndarray:
    """A pitched tone with four harmonics (falling amplitude), like a sustained vowel."""
    t = np.arange(int(seconds * rate)) / rate
    tone = sum(np.sin(2 * np.pi * hz * k * t + k) / k for k in range(1, 5))
    return (0.3 * tone / np.max(np.abs(tone))).astype(np.float32)


def test_bins_are_the_107_integer_lags_of_65_to_450_hz() -> None:
    assert (f0.LAG_MIN, f0.LAG_MAX, f0.N_LAGS) == (17, 123, 107)
    assert f0.FRAME == 246
    assert f0.HOP == 80


def test_200_hz_harmonic_tone_is_lag_40_in_every_frame() -> None:
    histogram = f0.lag_histogram(harmonic_tone(200.0), 16000)
    frames = (8000 - f0.FRAME) // f0.HOP + 1
    assert histogram[40 - f0.LAG_MIN] == frames
    assert histogram.sum() == frames
    assert f0.median_hz(histogram) == 200.0


@pytest.mark.parametrize("lag", [17, 25, 40, 57, 80, 100, 123])
def test_tones_across_the_range_land_on_their_lag(lag: int) -> None:
    track = f0.yin(f0.to_8k(harmonic_tone(8000 / lag), 16000))
    assert track.voiced.mean() > 0.95
    assert np.all(track.lags[track.voiced] == lag)


def test_cmnd_matches_the_textbook_loop(rng: np.random.Generator) -> None:
    frames = rng.standard_normal((4, f0.FRAME))
    fast = f0.cmnd(frames)
    for row, x in zip(fast, frames, strict=True):
        w = f0.WINDOW
        d = np.array([np.sum((x[:w] - x[tau : tau + w]) ** 2) for tau in range(f0.LAG_MAX + 1)])
        slow = np.ones_like(d)
        slow[1:] = d[1:] * np.arange(1, d.size) / np.cumsum(d[1:])
        assert np.allclose(row, slow)


def test_noise_and_silence_are_unvoiced(rng: np.random.Generator) -> None:
    noise = (0.1 * rng.standard_normal(16000)).astype(np.float32)
    assert f0.lag_histogram(noise, 16000).sum() < 5  # white noise never dips under 0.1
    silence = np.zeros(16000, dtype=np.float32)
    assert f0.lag_histogram(silence, 16000).sum() == 0
    quiet = harmonic_tone(200.0) * 10 ** (-70 / 20)  # far under the -50 dBFS energy gate
    assert f0.lag_histogram(quiet, 16000).sum() == 0


def test_quiet_frames_next_to_loud_ones_are_gated() -> None:
    loud = harmonic_tone(200.0, 0.5)
    faint = harmonic_tone(100.0, 0.5) * 10 ** (-45 / 20)  # -45 dB relative: under the gate
    histogram = f0.lag_histogram(np.concatenate([loud, faint]), 16000)
    assert histogram[80 - f0.LAG_MIN] <= 2  # only frames straddling the boundary
    assert histogram[40 - f0.LAG_MIN] >= 45


def test_short_and_empty_audio_give_empty_histograms() -> None:
    assert f0.lag_histogram(np.zeros(0, dtype=np.float32), 16000).sum() == 0
    assert f0.lag_histogram(harmonic_tone(200.0, 0.02), 16000).sum() == 0  # < one frame
    assert np.isnan(f0.median_hz(np.zeros(f0.N_LAGS)))


def test_feature_observes_pools_and_scores() -> None:
    feature = f0.F0Feature()
    low = feature.observe(harmonic_tone(100.0), 16000)
    high = feature.observe(harmonic_tone(250.0), 16000)
    assert low.seconds == pytest.approx(1.0)
    both = feature.pool([low, high])
    assert np.array_equal(both.values, low.values + high.values)
    assert both.seconds == pytest.approx(2.0)
    batch = TemplateBatch.from_observations([low, high])
    scores = feature.similarity(feature.observe(harmonic_tone(250.0, 0.6), 16000), batch)
    assert scores.shape == (2,)
    assert scores[1] == pytest.approx(0.0) and scores[0] == pytest.approx(-1.0)
    described = feature.describe(low)
    assert described["lags"] == 17 and len(described["histogram"]) == 107
    assert described["median_hz"] == 100.0
    with pytest.raises(ValueError, match="phone"):
        feature.pool([low, Observation("phone", np.zeros(39), 1.0)])
