"""Baselines (DESIGN §6, §2.8) against §7.4/§7.6 and slow, obviously correct references."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest

from monitor.disclosure.baselines import (
    cllr,
    eer_rocch,
    eer_sweep,
    linkability,
    min_cllr,
    rocch,
    split_mated,
    top1_linkage,
)
from tests.disclosure.examples import M4, NON, S4, TAR


def slow_eer_sweep(tar, non):
    values = sorted(set(tar) | set(non))
    thresholds = sorted(values + [(a + b) / 2 for a, b in itertools.pairwise(values)])
    best = None
    for t in thresholds:
        frr = sum(s <= t for s in tar) / len(tar)
        far = sum(s > t for s in non) / len(non)
        if best is None or abs(far - frr) < best[0]:
            best = (abs(far - frr), (far + frr) / 2)
    return best[1]


def slow_eer_rocch(tar, non):
    """max over cost weights w of the minimum over ROC points of w·Pmiss + (1-w)·Pfa."""
    points = [(1.0, 0.0)]
    for t in sorted(set(tar) | set(non)):
        points.append((sum(s > t for s in non) / len(non), sum(s <= t for s in tar) / len(tar)))
    pfa, pmiss = np.array(points).T
    w = np.linspace(0.0, 1.0, 20001)[:, None]
    return float(np.max(np.min(w * pmiss + (1 - w) * pfa, axis=1)))


def slow_linkability(mated, nonmated):
    n_bins = min(len(mated) // 10, 100)
    low, high = min(min(mated), min(nonmated)), max(max(mated), max(nonmated))
    width = (high - low) / n_bins
    centres, values = [], []
    for i in range(n_bins):
        lo, hi = low + i * width, low + (i + 1) * width
        last = i == n_bins - 1
        in_m = sum(lo <= s < hi or (last and s == hi) for s in mated)
        in_n = sum(lo <= s < hi or (last and s == hi) for s in nonmated)
        y_m = in_m / (len(mated) * width)
        y_n = in_n / (len(nonmated) * width)
        if y_n == 0:
            d = 1.0
        else:
            lr = y_m / y_n
            d = 2 * lr / (1 + lr) - 1 if lr > 1 else 0.0
        centres.append((lo + hi) / 2)
        values.append(d * y_m)
    return sum(
        (centres[i + 1] - centres[i]) * (values[i] + values[i + 1]) / 2 for i in range(n_bins - 1)
    )


def test_split_mated_and_top1_on_four_by_four():
    mated, nonmated = split_mated(S4, M4)
    np.testing.assert_allclose(mated, [0.9, 0.7, 0.5, 0.3])
    np.testing.assert_allclose(np.sort(nonmated), np.sort([0.8, 0.6, 0.4, 0.2] * 3))
    assert nonmated.shape == (12,)
    assert top1_linkage(S4, M4) == 1.0


def test_top1_linkage_is_strict():
    S = np.array([[1.0, 1.0, 0.0], [2.0, 1.0, 0.0], [0.0, 1.0, 0.5]])
    assert top1_linkage(S, np.array([0, 0, 0])) == pytest.approx(1 / 3)


def test_split_mated_rejects_bad_truth():
    with pytest.raises(ValueError, match="out of range"):
        split_mated(S4, np.array([0, 0, 1, 4]))
    with pytest.raises(ValueError, match="integer"):
        split_mated(S4, np.array([0.0, 0.0, 1.0, 2.0]))


def test_four_by_four_eers_and_min_cllr():
    mated, nonmated = split_mated(S4, M4)
    assert eer_sweep(mated, nonmated) == pytest.approx(0.5)
    assert eer_rocch(mated, nonmated) == pytest.approx(0.375)
    pfa, pmiss = rocch(mated, nonmated)
    np.testing.assert_allclose(pfa, [1.0, 0.75, 0.0, 0.0])
    np.testing.assert_allclose(pmiss, [0.0, 0.0, 0.75, 1.0])
    assert min_cllr(mated, nonmated) == pytest.approx(0.75)


def test_small_example_eers_and_min_cllr():
    assert eer_sweep(TAR, NON) == pytest.approx(0.225)
    assert eer_rocch(TAR, NON) == pytest.approx(3 / 13)
    assert min_cllr(TAR, NON) == pytest.approx(0.5353940, abs=1e-7)


def test_degenerate_scores():
    assert eer_rocch(np.ones(3), np.ones(5)) == pytest.approx(0.5)
    assert eer_sweep(np.ones(3), np.ones(5)) == pytest.approx(0.5)
    assert min_cllr(np.ones(3), np.ones(5)) == pytest.approx(1.0)
    assert min_cllr([2.0, 3.0], [0.0, 1.0]) == 0.0
    assert eer_rocch([2.0, 3.0], [0.0, 1.0]) == 0.0
    assert eer_sweep([2.0, 3.0], [0.0, 1.0]) == 0.0


def test_cllr_values():
    assert cllr(np.zeros(5), np.zeros(7)) == pytest.approx(1.0)
    assert cllr([math.inf], [-math.inf]) == 0.0
    expected = 0.5 * (math.log2(1 + math.exp(-2.0)) + math.log2(1 + math.exp(-1.0)))
    assert cllr([2.0], [-1.0]) == pytest.approx(expected)
    assert cllr([-800.0], [0.0]) == pytest.approx(0.5 * (800 / math.log(2) + 1), rel=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_eers_match_slow_references(seed):
    rng = np.random.default_rng(seed)
    tar = np.round(rng.normal(1.0, 1.0, rng.integers(1, 60)), 1)
    non = np.round(rng.normal(0.0, 1.0, rng.integers(1, 80)), 1)
    assert eer_sweep(tar, non) == pytest.approx(slow_eer_sweep(tar.tolist(), non.tolist()))
    assert eer_rocch(tar, non) == pytest.approx(
        slow_eer_rocch(tar.tolist(), non.tolist()), abs=2e-4
    )


@pytest.mark.parametrize("seed", range(4))
def test_linkability_matches_slow_reference(seed):
    rng = np.random.default_rng(seed)
    mated = rng.normal(1.0 + seed, 1.0, 10 * (seed + 2) + 3)
    nonmated = rng.normal(0.0, 1.0, 500)
    assert linkability(mated, nonmated) == pytest.approx(
        slow_linkability(mated.tolist(), nonmated.tolist()), rel=1e-9, abs=1e-12
    )


def test_scores_near_the_float_limit_neither_overflow_nor_change_the_result(rng):
    tar, non = rng.normal(2.0, 1.0, 40), rng.normal(0.0, 1.0, 400)
    huge = 1.7e308 / max(np.abs(tar).max(), np.abs(non).max())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow on the way
        assert eer_sweep(tar * huge, non * huge) == pytest.approx(eer_sweep(tar, non))
        assert linkability(tar * huge, non * huge) == pytest.approx(linkability(tar, non))


def test_linkability_ranges():
    rng = np.random.default_rng(7)
    same = rng.normal(0.0, 1.0, 20000)
    assert linkability(same[:10000], same[10000:]) < 0.05
    assert linkability(rng.normal(50.0, 1.0, 1000), rng.normal(0.0, 1.0, 1000)) > 0.95
    with pytest.warns(RuntimeWarning, match="10 mated"):
        assert math.isnan(linkability([1.0, 2.0], [0.0, 1.0]))
