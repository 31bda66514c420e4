"""Rank counting and histograms against a slow, obviously correct loop (DESIGN §1.2–1.3)."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.disclosure import ranks
from monitor.disclosure.ranks import (
    identity_ranks,
    rank_histogram,
    rank_of,
    true_rank_counts,
)
from tests.disclosure.examples import traced_peak_bytes


def slow_histogram(S: np.ndarray, m: np.ndarray, ties: str) -> np.ndarray:
    """One trial at a time, straight from the §1.2 definitions."""
    T, N = S.shape
    h = np.zeros(N)
    for i in range(T):
        target = S[i, m[i]]
        above = sum(1 for j in range(N) if j != m[i] and S[i, j] > target)
        tied = sum(1 for j in range(N) if j != m[i] and S[i, j] == target)
        if ties == "optimistic":
            h[above] += 1
        elif ties == "pessimistic":
            h[above + tied] += 1
        else:
            for k in range(above, above + tied + 1):
                h[k] += 1 / (tied + 1)
    return h


def slow_identity_ranks(s: np.ndarray) -> np.ndarray:
    return np.array([1 + sum(1 for x in s if x > v) for v in s])


def quantised_matrix(rng: np.random.Generator, T: int, N: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores on a coarse grid, so ties are frequent (as with short F0 histograms)."""
    S = np.round(rng.normal(size=(T, N)), 1)
    m = rng.integers(0, N, size=T)
    S[np.arange(T), m] += 0.5
    return S, m


@pytest.mark.parametrize("ties", ["fractional", "optimistic", "pessimistic"])
def test_histogram_matches_slow_reference_with_ties(rng, ties, monkeypatch):
    monkeypatch.setattr(ranks, "CHUNK_ELEMENTS", 37)  # several blocks, the last one partial
    S, m = quantised_matrix(rng, 53, 9)
    expected = slow_histogram(S, m, ties)
    got = rank_histogram(S, m, ties=ties)
    np.testing.assert_allclose(got, expected, atol=1e-12)
    assert got.sum() == pytest.approx(53)


def test_random_ties_lie_between_optimistic_and_pessimistic(rng):
    S, m = quantised_matrix(rng, 400, 12)
    best = np.cumsum(rank_histogram(S, m, ties="optimistic"))
    worst = np.cumsum(rank_histogram(S, m, ties="pessimistic"))
    drawn = rank_histogram(S, m, ties="random", rng=7)
    assert drawn.sum() == 400
    assert np.all(worst <= np.cumsum(drawn)) and np.all(np.cumsum(drawn) <= best)
    np.testing.assert_array_equal(drawn, rank_histogram(S, m, ties="random", rng=7))
    mean = np.mean([rank_histogram(S, m, ties="random", rng=s) for s in range(200)], axis=0)
    np.testing.assert_allclose(mean, rank_histogram(S, m), atol=2.0)


def test_counts_and_rank_of(rng):
    S, m = quantised_matrix(rng, 20, 7)
    above, tied = true_rank_counts(S, m)
    for i in range(20):
        assert rank_of(S[i], int(m[i])) == above[i] + 1
        assert tied[i] == np.count_nonzero(S[i] == S[i, m[i]]) - 1


def test_identity_ranks_match_loop_with_ties(rng):
    S, _ = quantised_matrix(rng, 15, 8)
    got = identity_ranks(S)
    for i in range(15):
        np.testing.assert_array_equal(got[i], slow_identity_ranks(S[i]))
    np.testing.assert_array_equal(identity_ranks(np.array([3.0, 1.0, 3.0, 2.0])), [1, 4, 1, 3])


def test_all_equal_scores_spread_evenly():
    h = rank_histogram(np.zeros((4, 5)), np.array([0, 1, 2, 3]))
    np.testing.assert_allclose(h, np.full(5, 4 / 5))
    np.testing.assert_array_equal(
        rank_histogram(np.zeros((4, 5)), [0] * 4, ties="optimistic"), [4, 0, 0, 0, 0]
    )


def test_degenerate_shapes():
    assert rank_histogram(np.ones((3, 1)), np.zeros(3, dtype=int)).tolist() == [3.0]
    assert rank_histogram(np.empty((0, 4)), np.empty(0, dtype=int)).tolist() == [0.0] * 4


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_scores_rejected(bad):
    S = np.zeros((3, 4))
    S[2, 1] = bad
    with pytest.raises(ValueError, match=r"scores\[2, 1\]"):
        rank_histogram(S, np.array([0, 1, 2]))


def test_bad_truth_and_options_rejected():
    S = np.zeros((2, 3))
    with pytest.raises(ValueError, match=r"truth\[1\] = 3"):
        rank_histogram(S, np.array([0, 3]))
    with pytest.raises(ValueError, match="shape"):
        rank_histogram(S, np.array([0]))
    with pytest.raises(ValueError, match="ties="):
        rank_histogram(S, np.array([0, 1]), ties="average")
    with pytest.raises(ValueError, match="2-D"):
        rank_histogram(np.zeros(3), np.array([0]))


def test_no_full_size_temporaries(rng, monkeypatch):
    """Blocks keep the extra memory far below the matrix size (the 10⁴ × 10⁴ case needs this)."""
    monkeypatch.setattr(ranks, "CHUNK_ELEMENTS", 1 << 16)
    S = rng.normal(size=(1000, 4000))
    m = rng.integers(0, 4000, size=1000)
    assert traced_peak_bytes(lambda: rank_histogram(S, m)) < S.nbytes / 8
