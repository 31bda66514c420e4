"""The speaker tracker with a fake clock: local profiles, unknown-N clustering, idle expiry."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from monitor.events.messages import FeatureWindow
from monitor.features.base import Observation
from monitor.settings.tracker import TrackerSettings
from monitor.store.templates import LocalProfile
from monitor.tracking.thresholds import TrackerThresholds
from monitor.tracking.tracker import SpeakerTracker

D = 16


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def voices(rng: np.random.Generator, n: int) -> np.ndarray:
    """n orthogonal unit vectors: clearly different voices."""
    q, _ = np.linalg.qr(rng.normal(size=(D, D)))
    return q[:n]


def window(vector: np.ndarray, index: int = 0, seconds: float = 3.0) -> FeatureWindow:
    return FeatureWindow(
        index=index,
        start_seconds=index * 3.0,
        end_seconds=index * 3.0 + seconds,
        speech_seconds=seconds,
        observations={"embedding": Observation("embedding", unit(vector), seconds)},
        closed_monotonic=0.0,
        closed_unix=0.0,
        feature_seconds=0.0,
    )


def tracker(profiles: list[LocalProfile], clock: FakeClock, **overrides: float) -> SpeakerTracker:
    # thresholds as for GE2E (0.75, 0.70): the scale these synthetic voices were drawn for
    defaults = {"track_idle_seconds": 60.0, "profile_threshold": 0.75, "cluster_threshold": 0.70}
    settings = TrackerSettings(**{**defaults, **overrides})  # type: ignore[arg-type]
    return SpeakerTracker(profiles, settings, clock=clock, wall_clock=clock)


def profile(alias: str, identity: str, vector: np.ndarray) -> LocalProfile:
    return LocalProfile(alias, identity, Observation("embedding", unit(vector), 30.0), "")


def test_local_profile_matched_by_cosine(rng: np.random.Generator) -> None:
    v = voices(rng, 3)
    t = tracker([profile("home-1", "0001", v[0]), profile("home-2", "0002", v[1])], FakeClock())
    noisy = v[1] + 0.1 * rng.normal(size=D) / np.sqrt(D)
    tracked, expired = t.process(window(noisy))
    assert (tracked.track, tracked.kind, tracked.identity) == ("home-2", "local", "0002")
    assert tracked.similarity > 0.9 and expired == []


def test_no_profile_match_opens_unknown_tracks_and_clusters(rng: np.random.Generator) -> None:
    v = voices(rng, 4)
    t = tracker([profile("home-1", "0001", v[0])], FakeClock())
    first, _ = t.process(window(v[2], 0))
    again, _ = t.process(window(v[2] + 0.05 * v[3], 1))
    other, _ = t.process(window(v[3], 2))
    assert (first.track, first.kind, first.identity, first.new_track) == (
        "unknown-1",
        "unknown",
        None,
        True,
    )
    assert (again.track, again.new_track) == ("unknown-1", False)
    assert (other.track, other.new_track) == ("unknown-2", True)
    # the centroid is the seconds-weighted mean, re-normalised
    centroid = t.clusters["unknown-1"].centroid
    assert np.linalg.norm(centroid) == pytest.approx(1.0)
    expected = unit(unit(v[2]) * 3 + unit(v[2] + 0.05 * v[3]) * 3)
    np.testing.assert_allclose(centroid, expected, atol=1e-12)


def test_profile_threshold_is_respected(rng: np.random.Generator) -> None:
    v = voices(rng, 2)
    halfway = unit(v[0]) * 0.7 + unit(v[1]) * np.sqrt(1 - 0.49)  # cosine 0.7 to home-1
    t = tracker([profile("home-1", "0001", v[0])], FakeClock(), profile_threshold=0.75)
    assert t.process(window(halfway))[0].kind == "unknown"
    t = tracker([profile("home-1", "0001", v[0])], FakeClock(), profile_threshold=0.65)
    assert t.process(window(halfway))[0].track == "home-1"


def test_idle_unknown_tracks_expire_and_names_are_not_reused(rng: np.random.Generator) -> None:
    v = voices(rng, 3)
    clock = FakeClock()
    t = tracker([profile("home-1", "0001", v[0])], clock)
    t.process(window(v[1]))
    clock.now += 30
    t.process(window(v[2]))
    clock.now += 45  # unknown-1 idle 75 s > 60 s, unknown-2 idle 45 s
    assert [e.track for e in t.expire()] == ["unknown-1"]
    clock.now += 20  # unknown-2 now idle 65 s: expires when the next window arrives
    tracked, expired = t.process(window(v[1]))
    assert [e.track for e in expired] == ["unknown-2"]
    assert tracked.track == "unknown-3"  # a returning voice after expiry is a new track
    assert t.process(window(v[0]))[1] == []  # local profiles never expire


def test_oldest_unknown_track_expires_beyond_the_maximum(rng: np.random.Generator) -> None:
    v = voices(rng, 4)
    clock = FakeClock()
    t = tracker([], clock, max_unknown_tracks=2)
    for i in range(3):
        clock.now += 1
        tracked, expired = t.process(window(v[i], i))
    assert tracked.track == "unknown-3"
    assert [e.track for e in expired] == ["unknown-1"]
    assert set(t.clusters) == {"unknown-2", "unknown-3"}


def test_restart_continues_numbering(rng: np.random.Generator) -> None:
    v = voices(rng, 3)
    t = tracker([], FakeClock())
    t.skip_numbers(["home-1", "unknown-4", "unknown-2"])
    t.restore("unknown-4", v[0], 12.0)
    assert t.process(window(v[0]))[0].track == "unknown-4"
    assert t.process(window(v[1]))[0].track == "unknown-5"


def fitted(**overrides: object) -> TrackerThresholds:
    """Thresholds as a calibration gives them: one per window length (1, 2, 3 s)."""
    base: dict[str, object] = {
        "lengths": (1.0, 2.0, 3.0),
        "profile": (0.9, 0.8, 0.7),
        "cluster": (0.8, 0.8, 0.8),
        "mature": (0.8, 0.8, 0.8),
        "ambiguous": (0.6, 0.6, 0.6),
        "merge": 0.55,
        "change": 0.0,
    }
    return TrackerThresholds(**{**base, **overrides})  # type: ignore[arg-type]


def fitted_tracker(profiles: list[LocalProfile], **overrides: object) -> SpeakerTracker:
    settings = TrackerSettings(merge_seconds=6.0)
    return SpeakerTracker(
        profiles,
        settings,
        thresholds=fitted(**overrides),
        clock=FakeClock(),
        wall_clock=FakeClock(),
    )


def at_cosine(a: np.ndarray, b: np.ndarray, cosine: float) -> np.ndarray:
    """A unit vector at ``cosine`` to unit(a), in the plane of a and b (a ⟂ b)."""
    return unit(a) * cosine + unit(b) * np.sqrt(1 - cosine**2)


def test_the_profile_threshold_follows_the_window_length(rng: np.random.Generator) -> None:
    v = voices(rng, 2)
    t = fitted_tracker([profile("home-1", "0001", v[0])])
    near = at_cosine(v[0], v[1], 0.75)
    long_window, _ = t.process(window(near, 0, seconds=3.0))
    assert long_window is not None and long_window.track == "home-1"
    short_window, _ = t.process(window(near, 1, seconds=1.0))
    assert short_window is None  # a 1 s window needs 0.9; at 0.75 it may still be the member
    assert t.skipped_seconds == 1.0 and t.clusters == {}


def test_mixed_windows_join_but_never_open_a_track(rng: np.random.Generator) -> None:
    v = voices(rng, 3)
    t = fitted_tracker([profile("home-1", "0001", v[0])])
    mixed = replace(window(v[1], 0), mixed=True)
    assert t.process(mixed) == (None, []) and t.skipped_seconds == 3.0
    opened, _ = t.process(window(v[1], 1))
    assert opened is not None and opened.new_track
    joined, _ = t.process(replace(window(v[1], 2), mixed=True))
    assert joined is not None and joined.track == opened.track and not joined.new_track


def test_fragments_of_one_voice_merge_into_the_longer_track(rng: np.random.Generator) -> None:
    v = voices(rng, 3)
    t = fitted_tracker([])
    other = at_cosine(v[1], v[2], 0.6)  # below the cluster threshold, above the merge one
    for i in range(3):
        t.process(window(v[1], i))  # unknown-1: 9 s
    first, _ = t.process(window(other, 3))
    assert first is not None and first.track == "unknown-2" and first.new_track
    second, events = t.process(window(other, 4))  # unknown-2 reaches 6 s: the two merge
    assert [(e.track, e.merged_into) for e in events] == [("unknown-2", "unknown-1")]
    assert second is not None and second.track == "unknown-1"
    assert set(t.clusters) == {"unknown-1"} and t.clusters["unknown-1"].seconds == 15.0
    assert t.clusters["unknown-1"].windows == 5


def test_a_window_nearer_a_profile_is_not_taken_by_an_unknown_track(
    rng: np.random.Generator,
) -> None:
    v = voices(rng, 3)
    t = fitted_tracker([profile("home-1", "0001", v[0])], cluster=(0.3, 0.3, 0.3))
    t.process(window(v[1], 0))  # unknown-1
    between = unit(v[0]) * 0.65 + unit(v[1]) * 0.5 + unit(v[2]) * np.sqrt(1 - 0.65**2 - 0.5**2)
    tracked, _ = t.process(window(between, 1))
    # below the member's 0.7 at 3 s, yet nearer the member than unknown-1: nobody's
    assert tracked is None and t.clusters["unknown-1"].windows == 1


def test_a_short_window_joins_but_never_opens_a_track(rng: np.random.Generator) -> None:
    v = voices(rng, 2)
    t = fitted_tracker([])
    assert t.process(window(v[1], 0, seconds=1.5)) == (None, [])
    opened, _ = t.process(window(v[1], 1, seconds=2.0))
    joined, _ = t.process(window(v[1], 2, seconds=1.0))
    assert opened is not None and joined is not None and joined.track == opened.track
    assert t.skipped_seconds == 1.5


def test_a_turns_short_tail_stays_with_its_track(rng: np.random.Generator) -> None:
    v = voices(rng, 3)
    t = fitted_tracker([profile("home-1", "0001", v[0])], cluster=(0.5, 0.5, 0.5))
    tail = at_cosine(v[0], v[1], 0.6)  # below 0.9 for a 1 s window against the profile
    head, _ = t.process(window(v[0], 0))
    assert head is not None and head.track == "home-1"
    kept, _ = t.process(replace(window(tail, 1, seconds=1.0), continues=True))
    assert kept is not None and (kept.track, kept.kind) == ("home-1", "local")
    # the same window starting a new turn proves nothing: skipped
    assert t.process(window(tail, 2, seconds=1.0))[0] is None
    # and a continuation far from the track is not kept
    t.process(window(v[0], 3))
    far = at_cosine(v[0], v[2], 0.2)
    assert t.process(replace(window(far, 4, seconds=1.0), continues=True))[0] is None


def test_a_continuing_window_stays_unless_nearer_another_voice(rng: np.random.Generator) -> None:
    """The fitted stay cosine (a voice's own windows rarely fall below it) keeps a turn's
    continuation with its track below the join threshold; another profile nearer takes it."""
    v = voices(rng, 4)
    home = [profile("home-1", "0001", v[0]), profile("home-2", "0002", v[3])]
    t = fitted_tracker(home, cluster=(0.5, 0.5, 0.5), stay=(0.25, 0.25, 0.25))
    t.process(window(v[0], 0))
    weak = at_cosine(v[0], v[1], 0.3)  # below the 0.5 join cosine, above the 0.25 stay one
    kept, _ = t.process(replace(window(weak, 1, seconds=1.0), continues=True))
    assert kept is not None and kept.track == "home-1"
    t.process(window(v[0], 2))
    nearer_two = unit(v[0]) * 0.3 + unit(v[3]) * 0.4 + unit(v[1]) * np.sqrt(1 - 0.3**2 - 0.4**2)
    assert t.process(replace(window(nearer_two, 3, seconds=1.0), continues=True))[0] is None


def test_a_small_fragment_merges_once_the_main_track_would_take_it(
    rng: np.random.Generator,
) -> None:
    """A voice's first windows may open a second track before its main one has formed; once
    the fragment's centroid passes the join cosine to the grown track, they are one track."""
    v = voices(rng, 2)
    t = fitted_tracker([])
    a, b = unit(v[0]), at_cosine(v[0], v[1], 0.7)  # 0.7: below the 0.8 join cosine
    t.process(window(a, 0))
    opened, _ = t.process(window(b, 1))
    assert opened is not None and opened.track == "unknown-2" and opened.new_track
    # 0.92 to both, a hair nearer a: an exact tie was decided by float rounding (machine-dependent)
    between = unit(1.01 * a + b)  # joins unknown-1, whose centroid moves to 0.83 of b
    joined, events = t.process(window(between, 2))
    assert [(e.track, e.merged_into) for e in events] == [("unknown-2", "unknown-1")]
    assert joined is not None and joined.track == "unknown-1"
    assert set(t.clusters) == {"unknown-1"} and t.clusters["unknown-1"].seconds == 9.0
