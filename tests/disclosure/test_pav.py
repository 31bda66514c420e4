"""PAV of block counts as hull slopes, against an exact slow PAV and scipy's isotonic_regression."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy.optimize import isotonic_regression

from monitor.disclosure import pav
from monitor.disclosure.pav import lower_hull, pav_of_counts


def slow_pav(n_tar: list[int], n_non: list[int]) -> list[Fraction]:
    """Obviously correct PAV in exact fractions: pool backwards while a mean falls."""
    stack: list[list[int]] = []  # [targets, size, blocks]
    for t, n in zip(n_tar, n_non, strict=True):
        stack.append([t, t + n, 1])
        while len(stack) > 1 and Fraction(stack[-2][0], stack[-2][1]) > Fraction(
            stack[-1][0], stack[-1][1]
        ):
            top = stack.pop()
            stack[-1] = [stack[-1][0] + top[0], stack[-1][1] + top[1], stack[-1][2] + top[2]]
    return [Fraction(t, size) for t, size, blocks in stack for _ in range(blocks)]


def random_counts(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Block counts of sorted scores: targets more likely high; empty blocks avoided."""
    trend = np.linspace(0.05, 0.95, size)
    n_tar = rng.binomial(rng.integers(0, 6, size), trend)
    n_non = rng.binomial(rng.integers(0, 6, size), 1 - trend)
    n_non[(n_tar + n_non) == 0] = 1
    return n_tar.astype(np.float64), n_non.astype(np.float64)


@pytest.mark.parametrize("seed", range(20))
def test_hull_slopes_are_the_exact_pav_correctly_rounded(seed):
    rng = np.random.default_rng(seed)
    n_tar, n_non = random_counts(rng, int(rng.integers(1, 400)))
    exact = slow_pav(n_tar.astype(int).tolist(), n_non.astype(int).tolist())
    assert pav_of_counts(n_tar, n_non).tolist() == [float(p) for p in exact]
    reference = isotonic_regression(n_tar / (n_tar + n_non), weights=n_tar + n_non).x
    np.testing.assert_allclose(pav_of_counts(n_tar, n_non), reference, rtol=1e-12, atol=1e-15)


def test_the_sequential_chain_finishes_what_the_passes_leave(monkeypatch):
    # A strictly convex chain (rising target share) with a huge non-target block last: a pass
    # drops only the chain's last point, so the passes stop and the monotone chain takes the
    # rest; the result is the same.
    n_tar = np.append(np.arange(1.0, 301.0), 0.0)
    n_non = np.append(np.full(300, 300.0), 1e7)
    exact = [float(p) for p in slow_pav(n_tar.astype(int).tolist(), n_non.astype(int).tolist())]
    assert pav_of_counts(n_tar, n_non).tolist() == exact
    monkeypatch.setattr(pav, "_MIN_SHARE", 2.0)  # never trust the passes: chain only
    assert pav_of_counts(n_tar, n_non).tolist() == exact


def test_counts_beyond_int64_products_use_exact_integers():
    big = float(2**40)
    n_tar = np.array([big, 0.0, big, 3 * big])
    n_non = np.array([big, 2 * big, 0.0, big])
    exact = slow_pav([int(v) for v in n_tar], [int(v) for v in n_non])
    np.testing.assert_allclose(pav_of_counts(n_tar, n_non), [float(p) for p in exact], rtol=1e-15)


def test_degenerate_blocks():
    assert pav_of_counts(np.array([3.0]), np.array([1.0])).tolist() == [0.75]
    assert pav_of_counts(np.array([1.0, 0.0]), np.array([0.0, 1.0])).tolist() == [0.5, 0.5]
    assert pav_of_counts(np.zeros(0), np.zeros(0)).size == 0
    with pytest.raises(ValueError, match="empty block"):
        pav_of_counts(np.array([1.0, 0.0]), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="whole"):
        pav_of_counts(np.array([0.5]), np.array([1.0]))


def test_lower_hull_keeps_strict_vertices_only():
    x = np.array([0, 1, 2, 3, 4])
    y = np.array([0, 0, 0, 1, 3])  # (1, 0) is on the chord: not a strict vertex
    assert lower_hull(x, y).tolist() == [0, 2, 3, 4]
