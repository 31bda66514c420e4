"""Narrow-band sources: a window from a source of at most 8 kHz is tracked against
the members' narrow-band copies with the thresholds of band-limited audio; a database without
copies tracks it as before, with one warning saying how to add them."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

from monitor.audio.band import NARROW_RATE_HZ, band_limit, band_of
from monitor.features.base import Observation
from monitor.settings.tracker import TrackerSettings
from monitor.tracking.narrow import NarrowCopies
from monitor.tracking.tracker import SpeakerTracker
from tests.tracking.test_tracker import FakeClock, fitted, profile, unit, voices, window


def narrow_window(vector: np.ndarray, index: int = 0, rate: int = NARROW_RATE_HZ):
    return dataclasses.replace(window(vector, index), source_rate_hz=rate)


def test_band_of_a_source_rate() -> None:
    assert [band_of(r) for r in (8000, 11025, 16000, 48000)] == ["narrow", "wide", "wide", "wide"]
    assert band_of(6000) == "narrow"  # below 8 kHz: narrower still


def test_band_limit_keeps_speech_band_and_removes_the_rest() -> None:
    """A 1 kHz tone passes (within 1 %), a 6 kHz one (above an 8 kHz device's Nyquist
    frequency) is gone (< 1 % of its amplitude), and the length is kept."""
    t = np.arange(16000) / 16000
    low, high = np.sin(2 * np.pi * 1000 * t), np.sin(2 * np.pi * 6000 * t)
    out_low, out_high = band_limit(low), band_limit(high)
    assert out_low.shape == low.shape == out_high.shape
    middle = slice(1000, -1000)  # away from the filter's edges
    assert np.max(np.abs(out_low[middle] - low[middle])) < 0.01
    assert np.max(np.abs(out_high[middle])) < 0.01


def _tracker(narrow: NarrowCopies | None, wide_vector: np.ndarray) -> SpeakerTracker:
    return SpeakerTracker(
        [profile("home-1", "0001", wide_vector)],
        TrackerSettings(merge_seconds=6.0),
        thresholds=fitted(),
        narrow=narrow,
        clock=FakeClock(),
        wall_clock=FakeClock(),
    )


def test_a_narrow_band_window_meets_the_narrow_copy(rng: np.random.Generator) -> None:
    """The member's wide profile is v0, their narrow copy v1: an 8 kHz window near v1 is the
    member's, the same vector from a 16 kHz source is not; with the narrow copy's thresholds."""
    v = voices(rng, 3)
    copies = NarrowCopies(
        templates={"0001": Observation("embedding", unit(v[1]), 0.0)},
        thresholds=fitted(profile=(0.95, 0.95, 0.95)),
    )
    t = _tracker(copies, v[0])
    near_narrow = unit(unit(v[1]) * 0.96 + unit(v[2]) * 0.28)
    tracked, _ = t.process(narrow_window(near_narrow, 0))
    assert tracked is not None and (tracked.track, tracked.kind) == ("home-1", "local")
    assert tracked.similarity == pytest.approx(float(unit(v[1]) @ near_narrow))
    wide, _ = t.process(window(near_narrow, 1))
    assert wide is None or wide.track != "home-1"
    # 0.90 to the narrow copy: above the wide threshold (0.7 at 3 s), below the narrow one
    between = unit(unit(v[1]) * 0.9 + unit(v[2]) * np.sqrt(1 - 0.81))
    missed, _ = t.process(narrow_window(between, 2))
    assert missed is None or missed.track != "home-1"
    assert not copies.missing and not copies.warned


def test_each_band_adapts_its_own_copy(rng: np.random.Generator) -> None:
    """Narrow-band windows teach the narrow copy's adapted profile, never the wide one."""
    v = voices(rng, 3)
    copies = NarrowCopies(templates={"0001": Observation("embedding", unit(v[1]), 0.0)})
    t = _tracker(copies, v[0])
    for i in range(20):
        t.process(narrow_window(unit(unit(v[1]) * 0.9 + unit(v[2]) * 0.44), i))
    assert t.bands["narrow"].profiles.seconds[0] > 0
    assert t.profiles.seconds[0] == 0.0  # the wide band's
    np.testing.assert_array_equal(t.profiles.adapted, t.profiles.enrolled)


def test_without_narrow_copies_a_narrow_window_is_tracked_wide_and_warned_once(
    rng: np.random.Generator, caplog: pytest.LogCaptureFixture
) -> None:
    """An old database: the narrow-band window meets the wide profile with the wide thresholds,
    exactly as before, and one warning (not one per window) names the fix."""
    v = voices(rng, 2)
    copies = NarrowCopies(thresholds=fitted(profile=(0.99, 0.99, 0.99)))
    t = _tracker(copies, v[0])
    assert t.bands["narrow"] is t.bands["wide"]
    with caplog.at_level(logging.WARNING, logger="monitor.daemon.pipeline"):
        for i in range(3):
            tracked, _ = t.process(narrow_window(v[0], i))
            assert tracked is not None and tracked.track == "home-1"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "8000 Hz" in warnings[0] and "re-enrol" in warnings[0]
    assert "members' profiles" in warnings[0] and "narrow-band copy" in warnings[0]


def test_a_wide_band_stream_never_warns(
    rng: np.random.Generator, caplog: pytest.LogCaptureFixture
) -> None:
    v = voices(rng, 1)
    t = _tracker(NarrowCopies(), v[0])
    with caplog.at_level(logging.WARNING, logger="monitor.daemon.pipeline"):
        t.process(window(v[0], 0))
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
