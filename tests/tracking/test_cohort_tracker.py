"""The tracker deciding members on cosines normalised against the N templates (AS-norm,
monitor/calibration/cohort.py) when its thresholds carry normalised levels and there are
enough templates; on raw cosines otherwise."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from monitor.calibration.cohort import MIN_COHORT
from monitor.settings.tracker import TrackerSettings
from monitor.tracking.tracker import SpeakerTracker
from tests.tracking.test_tracker import FakeClock, at_cosine, fitted, profile, window


def _tracker(
    cohort_size: int, rng: np.random.Generator, **norm: object
) -> tuple[SpeakerTracker, np.ndarray]:
    """A member (cohort row 0, its identity) among ``cohort_size`` orthogonal template voices;
    row ``cohort_size`` of the returned voices is outside the cohort."""
    v, _ = np.linalg.qr(rng.normal(size=(64, 64)))
    aliases = tuple(f"{i:04d}" for i in range(cohort_size))
    thresholds = fitted(cohort_top=10, **norm)
    t = SpeakerTracker(
        [profile("home-1", "0000", v[0])],
        TrackerSettings(merge_seconds=6.0),
        thresholds=thresholds,
        cohort=(aliases, v[:cohort_size]),
        clock=FakeClock(),
        wall_clock=FakeClock(),
    )
    return t, v


def test_a_member_below_the_raw_threshold_passes_the_normalised_one(
    rng: np.random.Generator,
) -> None:
    """Against orthogonal cohort voices a window at cosine 0.65 to the member (under the raw
    0.7) stands far above the cohort: the member's on the normalised scale."""
    t, v = _tracker(40, rng, profile_norm=(3.0, 3.0, 3.0), ambiguous_norm=(2.0, 2.0, 2.0))
    far = at_cosine(v[0], v[40], 0.65)  # v[40] is outside the cohort
    tracked, _ = t.process(window(far, 0))
    assert tracked is not None and tracked.track == "home-1"
    assert abs(tracked.similarity - 0.65) < 1e-9  # the raw cosine is what is reported


def test_a_normalised_threshold_also_refuses(rng: np.random.Generator) -> None:
    """A window at raw 0.75 (over the raw 0.7) whose normalised score is under a strict
    normalised threshold is not the member's, and may be: no track opened."""
    t, v = _tracker(40, rng, profile_norm=(1e6,) * 3, ambiguous_norm=(2.0,) * 3)
    tracked, _ = t.process(window(at_cosine(v[0], v[40], 0.75), 0))
    assert tracked is None and t.clusters == {}


def test_too_few_templates_leave_the_raw_cosines_deciding(rng: np.random.Generator) -> None:
    t, v = _tracker(MIN_COHORT - 1, rng, profile_norm=(1e6,) * 3, ambiguous_norm=(1e6,) * 3)
    tracked, _ = t.process(window(at_cosine(v[0], v[MIN_COHORT], 0.75), 0))
    assert tracked is not None and tracked.track == "home-1"


def test_a_turn_that_may_still_be_the_member_stays_theirs(rng: np.random.Generator) -> None:
    """The sticky prior: after a window the member certainly spoke, the next window of the same
    turn that only may be theirs stays theirs; the same window after a pause, or flagged as
    holding two voices, is not theirs."""
    t, v = _tracker(40, rng, profile_norm=(0.0,) * 3, ambiguous_norm=(0.0,) * 3)
    band = t.bands["wide"]
    assert band.cohort is not None
    sure, tail = at_cosine(v[0], v[40], 0.9), at_cosine(v[0], v[41], 0.5)
    high, low = (float(band.cohort.normalise(w, band.profiles.cosines(w))[0]) for w in (sure, tail))
    assert high > low
    band.thresholds = replace(
        band.thresholds, profile_norm=((high + low) / 2,) * 3, ambiguous_norm=(low - 0.1,) * 3
    )
    first, _ = t.process(window(sure, 0))
    assert first is not None and first.track == "home-1"
    stays, _ = t.process(replace(window(tail, 1), continues=True))
    assert stays is not None and stays.track == "home-1"
    alone, _ = t.process(window(tail, 2))  # a new turn: the tail alone may be, but is not, theirs
    assert alone is None or alone.track != "home-1"
    t.process(window(sure, 3))
    mixed, _ = t.process(replace(window(tail, 4), continues=True, mixed=True))
    assert mixed is None or mixed.track != "home-1"
    off = replace(t.settings, sticky=False)
    t.settings = off
    t.process(window(sure, 5))
    unstuck, _ = t.process(replace(window(tail, 6), continues=True))
    assert unstuck is None or unstuck.track != "home-1"


def test_a_strangers_turn_is_not_lifted_to_a_member_by_the_normalised_scale(
    rng: np.random.Generator,
) -> None:
    """A window continuing a stranger's turn, at raw 0.5 to the member (under the raw 0.7)
    and 0.87 to the stranger's track, passes the normalised threshold: it stays with the
    stranger's track. The same window opening a turn of its own is the member's."""
    t, v = _tracker(40, rng)
    band = t.bands["wide"]
    assert band.cohort is not None
    stranger, tail = v[41], at_cosine(v[0], v[41], 0.5)
    low, high = (
        float(band.cohort.normalise(w, band.profiles.cosines(w))[0]) for w in (stranger, tail)
    )
    assert high > low
    band.thresholds = replace(
        band.thresholds,
        profile_norm=((high + low) / 2,) * 3,
        ambiguous_norm=((high + low) / 2,) * 3,
    )
    opened, _ = t.process(window(stranger, 0))
    assert opened is not None and opened.track == "unknown-1"
    kept, _ = t.process(replace(window(tail, 1), continues=True))
    assert kept is not None and kept.track == "unknown-1"
    alone, _ = t.process(window(tail, 2))
    assert alone is not None and alone.track == "home-1"


def test_through_an_8khz_device_the_turn_does_not_keep_a_member_s_window(
    rng: np.random.Generator,
) -> None:
    """The same continuing window from a narrow-band source is the member's: through an 8 kHz
    device members' own turns split into unknown tracks, which would keep their windows."""
    t, v = _tracker(40, rng)
    band = t.bands["wide"]
    assert band.cohort is not None and t.bands["narrow"] is band  # no narrow copies
    stranger, tail = v[41], at_cosine(v[0], v[41], 0.5)
    low, high = (
        float(band.cohort.normalise(w, band.profiles.cosines(w))[0]) for w in (stranger, tail)
    )
    middle = ((high + low) / 2,) * 3
    band.thresholds = replace(band.thresholds, profile_norm=middle, ambiguous_norm=middle)
    opened, _ = t.process(replace(window(stranger, 0), source_rate_hz=8_000))
    assert opened is not None and opened.track == "unknown-1"
    tail_window = replace(window(tail, 1), continues=True, source_rate_hz=8_000)
    assert tail_window.band == "narrow"
    given, _ = t.process(tail_window)
    assert given is not None and given.track == "home-1"


def _orthogonal(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random direction orthogonal to unit ``a``."""
    b = rng.normal(size=a.shape[0])
    out: np.ndarray = b - (b @ a) * a
    return out


def _look_alike(
    rng: np.random.Generator, own: tuple[float, ...]
) -> tuple[SpeakerTracker, dict[str, np.ndarray]]:
    """A member among 40 random template voices and a stranger of their gender and age (raw
    cosine 0.55 to them) who is in no template, as a household's visitor; the normalised
    threshold halfway between the stranger's score with a template of theirs in the cohort
    (as the calibration scores every voice) and without one."""
    cohort = rng.normal(size=(40, 64))
    cohort /= np.linalg.norm(cohort, axis=1, keepdims=True)
    aliases = tuple(f"{i:04d}" for i in range(40))
    member = cohort[0]
    stranger = at_cosine(member, _orthogonal(member, rng), 0.55)
    template = at_cosine(stranger, _orthogonal(stranger, rng), 0.76)  # theirs
    t = SpeakerTracker(
        [profile("home-1", "0000", member)],
        TrackerSettings(merge_seconds=6.0),
        thresholds=fitted(cohort_top=10, own=own),
        cohort=(aliases, cohort),
        clock=FakeClock(),
        wall_clock=FakeClock(),
    )
    band = t.bands["wide"]
    assert band.cohort is not None
    cosines = band.profiles.cosines(stranger)
    absent = float(band.cohort.normalise(stranger, cosines)[0])
    calibrated = float(band.cohort.normalise(stranger, cosines, template[None, :])[0])
    assert absent > calibrated  # the cohort without the stranger's voice lifts them
    middle = ((absent + calibrated) / 2,) * 3
    band.thresholds = replace(band.thresholds, profile_norm=middle, ambiguous_norm=middle)
    return t, {"member": member, "stranger": stranger}


def test_a_look_alike_stranger_in_no_template_is_not_lifted_to_the_member(
    rng: np.random.Generator,
) -> None:
    """The stranger's window meets the cohort the thresholds were calibrated on (the usual
    own-template cosine stands for the template they lack): not the member's, at the first
    window and after; without that stand-in (thresholds without ``own``) it is the member's.
    The member's own window is still theirs."""
    t, v = _look_alike(rng, own=(0.76,) * 3)
    first, _ = t.process(window(v["stranger"], 0))
    assert first is None or first.kind == "unknown"
    again, _ = t.process(window(v["stranger"], 1))
    assert again is None or again.kind == "unknown"
    member, _ = t.process(window(at_cosine(v["member"], v["stranger"], 0.9), 2))
    assert member is not None and member.track == "home-1"
    unfixed, w = _look_alike(np.random.default_rng(7), own=())
    lifted, _ = unfixed.process(window(w["stranger"], 0))
    assert lifted is not None and lifted.track == "home-1"
