"""The tracker deciding members on cosines normalised against the N templates (AS-norm,
monitor/calibration/cohort.py) when its thresholds carry normalised levels and there are
enough templates; on raw cosines otherwise."""

from __future__ import annotations

import numpy as np

from monitor.calibration.cohort import MIN_COHORT
from monitor.settings.sections import TrackerSettings
from monitor.tracking.tracker import SpeakerTracker
from tests.daemon.test_tracker import FakeClock, at_cosine, fitted, profile, window


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
