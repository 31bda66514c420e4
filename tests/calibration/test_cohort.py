"""Cosines normalised against a cohort (monitor/calibration/cohort.py): the vectorised
statistics equal their definition, a profile never counts itself, and a room that lowers a
member's every cosine leaves them recognisable on the normalised scale."""

from __future__ import annotations

import numpy as np

from monitor.calibration.cohort import (
    MIN_COHORT,
    cohort_for,
    normalised_trials,
    profile_statistics,
    snorm,
    top_statistics,
)


def _units(rng: np.random.Generator, n: int, d: int = 32) -> np.ndarray:
    m = rng.standard_normal((n, d))
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_top_statistics_are_the_mean_and_spread_of_the_highest(
    rng: np.random.Generator,
) -> None:
    cosines = rng.uniform(-1, 1, size=(7, 50))
    mean, spread = top_statistics(cosines, 10)
    for row, m, s in zip(cosines, mean, spread, strict=True):
        best = np.sort(row)[-10:]
        assert np.isclose(m, best.mean(), rtol=1e-12)
        assert np.isclose(s, best.std(), rtol=1e-12)


def test_a_profile_is_never_its_own_cohort(rng: np.random.Generator) -> None:
    """The profile's own identity among the templates (cosine 1) is left out."""
    cohort = _units(rng, 40)
    profiles = cohort[[3, 7]].copy()
    with_own = profile_statistics(profiles, cohort, np.array([3, 7]), 5)
    others = np.delete(cohort, [3], axis=0)
    mean, _ = top_statistics((profiles[:1] @ others.T), 5)
    assert np.isclose(with_own[0][0], mean[0], rtol=1e-12)
    assert with_own[0].max() < 0.9  # no template scored 1 against itself


def test_normalised_trials_match_the_per_row_definition(rng: np.random.Generator) -> None:
    N, starts = 30, 2
    templates = _units(rng, N * starts)
    tests = _units(rng, N * starts)
    scores = np.concatenate(
        [tests[s * N : (s + 1) * N] @ templates[s * N : (s + 1) * N].T for s in range(starts)]
    )
    z = normalised_trials(scores, templates, N, top=8)
    row, column, s = N + 4, 11, 1
    block = templates[s * N : (s + 1) * N]
    among = np.delete(block[column] @ block.T, column)
    mw, sw = top_statistics(scores[row], 8)
    mp, sp = np.sort(among)[-8:].mean(), np.sort(among)[-8:].std()
    expected = 0.5 * ((scores[row, column] - mw) / sw + (scores[row, column] - mp) / sp)
    assert np.isclose(z[row, column], expected, rtol=1e-9)


def test_a_room_that_lowers_every_cosine_keeps_the_member_first(
    rng: np.random.Generator,
) -> None:
    """A window pulled towards a direction shared by the room (every cosine falls) stays its
    speaker's on the normalised scale as it does on the raw one: its rank is kept, and its
    margin over the cohort, in the cohort's units, falls far less than its raw cosine."""
    cohort = _units(rng, 60)
    member = cohort[0]
    room = _units(rng, 1)[0]
    clean = member + 0.6 * _units(rng, 1)[0]
    far = clean / np.linalg.norm(clean) + 1.2 * room
    normed = cohort_for(tuple(f"s{i}" for i in range(60)), cohort, member[None], ("s0",), top=10)
    assert normed is not None
    scores = {}
    for name, w in (("clean", clean), ("far", far)):
        w = w / np.linalg.norm(w)
        raw = np.array([member @ w])
        scores[name] = (float(raw[0]), float(normed.normalise(w, raw)[0]))
    assert scores["far"][0] < scores["clean"][0]
    assert scores["far"][1] > 0.0  # still above the cohort's best in its units


def test_too_few_templates_mean_no_cohort(rng: np.random.Generator) -> None:
    few = _units(rng, MIN_COHORT - 1)
    aliases = tuple(str(i) for i in range(MIN_COHORT - 1))
    assert cohort_for(aliases, few, few[:1], ("0",), top=10) is None
    assert cohort_for((*aliases, "x"), _units(rng, MIN_COHORT), few[:1], ("0",), top=0) is None


def test_snorm_is_symmetric_in_its_two_sides() -> None:
    s = np.array([0.5, 0.6])
    a = (np.array(0.1), np.array(0.2))
    b = (np.array(0.3), np.array(0.1))
    assert np.allclose(snorm(s, a, b), snorm(s, b, a))
