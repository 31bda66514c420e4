"""Short buckets from crops and the tracker's thresholds from cosine quantiles (synthetic
speakers: the crops are noisier copies of each utterance's observation)."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.calibration.buckets import load_default
from monitor.calibration.cohort import COHORT_TOP
from monitor.calibration.crops import (
    QUANTILES,
    TRACKING_LENGTHS,
    cosine_statistics,
    crop_trials,
)
from monitor.calibration.fit import calibrate_speakers
from monitor.features.base import EMBEDDING_BACKENDS
from monitor.settings.config import load_config
from monitor.tracking.thresholds import (
    fixed_thresholds,
    tracker_thresholds,
    tracker_thresholds_for,
)
from tests.calibration.synthetic import synthetic_speakers

FEATURES = ("f0", "phone", "embedding")


def crops_of(speakers, rng: np.random.Generator):  # type: ignore[no-untyped-def]
    """Each utterance's crop of L s: its observation, thinned (counts) or noisier (embedding)."""
    out = {}
    for s in speakers:
        out[s.alias] = {}
        for seconds in TRACKING_LENGTHS:
            share = seconds / 6.0
            views = {}
            for name in FEATURES:
                values = np.asarray(s.values[name], dtype=float)
                if name == "embedding":
                    noisy = values + rng.normal(scale=0.03 / np.sqrt(share), size=values.shape)
                    views[name] = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
                else:
                    views[name] = rng.binomial(values.astype(int), share).astype(float)
            out[s.alias][seconds] = views
    return out


def test_crop_trials_test_the_crop_against_the_usual_templates(rng: np.random.Generator) -> None:
    speakers = synthetic_speakers(rng, n_speakers=6, n_utterances=8)
    crops = crops_of(speakers, rng)
    trials = crop_trials(speakers, crops, seconds=1.0, template_seconds=6.0, features=FEATURES)
    N = trials.N
    assert trials.T == N * 8 and np.all(trials.test_seconds <= 1.0)
    # row s·N + i is speaker i's crop of the first utterance of its test block at start s
    first = crops[speakers[2].alias][1.0]["embedding"][0]
    assert np.array_equal(trials.tests["embedding"][2], first)
    calibration = calibrate_speakers(
        speakers, buckets=(1.0, 2.0, 3.0), template_seconds=6.0, features=FEATURES, crops=crops
    )
    assert [b.seconds for b in calibration.buckets("embedding")] == [1.0, 2.0, 3.0]
    without = calibrate_speakers(speakers, buckets=(1.0, 2.0, 3.0), template_seconds=6.0,
                                 features=FEATURES)  # fmt: skip
    assert [b.seconds for b in without.buckets("embedding")] == [3.0]  # no crops: no short ones


def test_cosine_statistics_separate_same_from_other(rng: np.random.Generator) -> None:
    speakers = synthetic_speakers(rng, n_speakers=6, n_utterances=8, overlap=0.3)
    stats = cosine_statistics(speakers, crops_of(speakers, rng), template_seconds=6.0)
    assert stats["quantiles"] == list(QUANTILES)
    for seconds in ("1", "2", "3"):
        row = stats["lengths"][seconds]
        for key in ("profile_same", "profile_other", "window_same", "window_other"):
            assert row[key] == sorted(row[key]) and len(row[key]) == len(QUANTILES)
        median = len(QUANTILES) // 2
        assert row["profile_same"][median] > row["profile_other"][median]
        assert row["window_same"][median] > row["window_other"][median]
    # longer windows are more alike
    lengths = stats["lengths"]
    assert lengths["3"]["window_same"][median] > lengths["1"]["window_same"][median]


def test_thresholds_are_read_at_the_configured_rates() -> None:
    q = list(QUANTILES)
    levels = np.linspace(-1.0, 1.0, len(q)).tolist()  # cosine = 2·level − 1: easy to read
    row = {k: levels for k in ("profile_same", "profile_other", "window_same", "window_other")}
    tracking = {"quantiles": q, "lengths": {"1": row, "3": row}}
    t = tracker_thresholds(
        tracking, false_member_rate=0.002, false_join_rate=0.01, false_change_rate=0.02
    )
    assert t.lengths == (1.0, 3.0)
    expected = float(np.interp(0.998, q, levels))
    assert t.profile == (pytest.approx(expected),) * 2
    assert t.cluster[0] == pytest.approx(float(np.interp(0.99, q, levels)))
    assert t.change == pytest.approx(float(np.interp(0.02, q, levels)))
    # a continuation stays down to where 2 % of a voice's own windows fall (below the join)
    assert t.stay == (pytest.approx(float(np.interp(0.02, q, levels))),) * 2
    assert t.staying(1.0) == t.stay[0] and fixed_thresholds(0.6, 0.5).staying(1.0) == 0.5
    assert t.at(t.profile, 0.5) == t.profile[0] and t.at(t.profile, 10.0) == t.profile[1]
    fixed = fixed_thresholds(0.6, 0.5)
    assert fixed.at(fixed.profile, 1.0) == 0.6 and fixed.change == -1.0


STATISTICS = (
    "profile_same", "profile_other", "profile_same_snorm", "profile_other_snorm", "window_same",
    "window_other",
)  # fmt: skip


@pytest.mark.parametrize("band", ["wide", "narrow"])
@pytest.mark.parametrize("backend", list(EMBEDDING_BACKENDS))
def test_every_shipped_backend_decides_on_normalised_scores_in_both_bands(
    backend: str, band: str
) -> None:
    """Every shipped calibration carries the tracker's statistics of a 16 kHz and of an 8 kHz
    device, the AS-normed ones included: with the default settings the daemon decides members
    on normalised scores whatever the embedding backend or the source's rate, on thresholds
    read off its own network's distributions."""
    calibration = load_default(backend)
    tracking = calibration.metadata["tracking_narrow" if band == "narrow" else "tracking"]
    assert tracking["cohort_top"] == COHORT_TOP
    assert tracking["quantiles"] == pytest.approx(QUANTILES)
    for seconds in TRACKING_LENGTHS:
        row = tracking["lengths"][f"{seconds:g}"]
        for name in STATISTICS:
            levels = np.asarray(row[name])
            assert levels.shape == QUANTILES.shape and np.all(np.diff(levels) >= 0), name
        half = len(QUANTILES) // 2  # the median
        p95 = int(np.searchsorted(QUANTILES, 0.95))
        # a crop's normalised score to its own template is over most strangers' 95th percentile
        assert row["profile_same_snorm"][half] > row["profile_other_snorm"][p95]
    thresholds = tracker_thresholds_for(load_config(None, []), calibration, band)
    assert thresholds is not None and thresholds.cohort_top == COHORT_TOP
    assert len(thresholds.profile_norm) == len(thresholds.ambiguous_norm) == len(TRACKING_LENGTHS)
    assert np.all(np.less(thresholds.ambiguous_norm, thresholds.profile_norm))


@pytest.mark.parametrize("backend", list(EMBEDDING_BACKENDS))
def test_the_narrow_band_statistics_are_measured_on_band_limited_crops(backend: str) -> None:
    """The 8 kHz statistics are their own measurement on band-limited crops against
    band-limited templates (scripts/calibrate_narrow.py), not a copy of the 16 kHz ones."""
    metadata = load_default(backend).metadata
    wide, narrow = metadata["tracking"]["lengths"], metadata["tracking_narrow"]["lengths"]
    assert metadata["tracking_narrow"]["band"].startswith("narrow")
    assert metadata["tracking_narrow"]["source"]["script"] == "scripts/calibrate_narrow.py"
    for seconds in TRACKING_LENGTHS:
        key = f"{seconds:g}"
        assert narrow[key]["profile_same"] != wide[key]["profile_same"]
        assert narrow[key]["profile_other_snorm"] != wide[key]["profile_other_snorm"]
