"""The sorted core (blocks cut by the distinct target scores) against the former tie-block
metrics and the slow references: equal to 1e-12, exactly equal where only counts are involved."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.disclosure import blocks as core
from monitor.disclosure.baselines import eer_rocch, eer_sweep, min_cllr
from monitor.disclosure.blocks import BlockCounter, matrix_blocks, pooled_blocks
from monitor.disclosure.zebra import (
    _d_ece_blocks,
    _worst_case_blocks,
    tie_blocks,
    zebra,
)
from tests.disclosure.test_baselines import slow_eer_rocch, slow_eer_sweep
from tests.disclosure.test_zebra import slow_pav_llr


def _cases(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Targets and non-targets with every kind of tie: rounded normals, few integers, float32."""
    rng = np.random.default_rng(seed)
    n_tar, n_non = rng.integers(1, 50), rng.integers(1, 400)
    kind = seed % 4
    if kind == 0:
        return np.round(rng.normal(1, 1, n_tar), 1), np.round(rng.normal(0, 1, n_non), 1)
    if kind == 1:
        return rng.integers(0, 5, n_tar).astype(float), rng.integers(0, 5, n_non).astype(float)
    if kind == 2:
        tar = rng.normal(1, 1, n_tar).astype(np.float32)
        return tar, rng.normal(0, 1, n_non).astype(np.float32)
    return rng.normal(2, 1, n_tar), rng.normal(0, 1, n_non)


def _former_eer_sweep(tar: np.ndarray, non: np.ndarray) -> float:
    """The sweep before the sorted core: every unique score and midpoint, by searchsorted."""
    tar, non = np.sort(tar), np.sort(non)
    unique = np.unique(np.concatenate([tar, non]))
    thresholds = np.sort(np.concatenate([unique, unique[1:] / 2.0 + unique[:-1] / 2.0]))
    frr = np.searchsorted(tar, thresholds, side="right") / tar.size
    far = 1.0 - np.searchsorted(non, thresholds, side="right") / non.size
    best = int(np.argmin(np.abs(far - frr)))
    return float((far[best] + frr[best]) / 2.0)


def _slow_counts(tar: np.ndarray, non: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Counts per block by a loop: gap k holds non-targets strictly between distinct targets."""
    mated = sorted(set(tar.tolist()))
    edges = [-np.inf, *mated, np.inf]
    n_tar, n_non = [], []
    for k in range(len(mated) + 1):
        n_tar.append(0)
        n_non.append(sum(edges[k] < s < edges[k + 1] for s in non.tolist()))
        if k < len(mated):
            n_tar.append(sum(s == mated[k] for s in tar.tolist()))
            n_non.append(sum(s == mated[k] for s in non.tolist()))
    return np.array(n_tar, float), np.array(n_non, float)


@pytest.mark.parametrize("seed", range(16))
def test_block_counts_match_a_loop_whatever_the_chunking(seed, monkeypatch):
    tar, non = _cases(seed)
    n_tar, n_non = _slow_counts(tar, non)
    for chunk in (1, 7, 1 << 22):
        blocks = pooled_blocks(tar, non, chunk=chunk)
        assert np.array_equal(blocks.n_tar, n_tar) and np.array_equal(blocks.n_non, n_non)
    # A coarse grid sends most scores down the exact search path: the same counts.
    monkeypatch.setattr(core, "GRID_CELLS", 8)
    blocks = pooled_blocks(tar, non)
    assert np.array_equal(blocks.n_non, n_non)


def test_counts_at_the_float_limits_and_infinities():
    tar = np.array([-1.7e308, 0.0, 1.7e308])
    non = np.array([-np.inf, -1.7e308, -1e308, 0.0, 5e-324, 1e308, 1.7e308, np.inf])
    blocks = pooled_blocks(tar, non)
    assert blocks.n_non.tolist() == [1, 1, 1, 1, 2, 1, 1]
    assert blocks.n_tar.tolist() == [0, 1, 0, 1, 0, 1, 0]


@pytest.mark.parametrize("seed", range(16))
def test_metrics_on_blocks_equal_the_tie_block_metrics_and_slow_references(seed):
    tar, non = _cases(seed)
    tar64, non64 = tar.astype(np.float64), non.astype(np.float64)
    ties = tie_blocks(tar64, non64)  # the former core: every tie block apart
    result = zebra(tar, non)
    assert pytest.approx(_d_ece_blocks(ties), rel=1e-12, abs=1e-15) == result.D_ECE
    assert result.log10_lr_max == pytest.approx(_worst_case_blocks(ties), rel=1e-12, abs=1e-15)
    assert eer_sweep(tar, non) == _former_eer_sweep(tar64, non64)
    assert eer_sweep(tar, non) == pytest.approx(slow_eer_sweep(tar64.tolist(), non64.tolist()))
    assert eer_rocch(tar, non) == pytest.approx(
        slow_eer_rocch(tar64.tolist(), non64.tolist()), abs=2e-4
    )
    slow_tar, slow_non = slow_pav_llr(tar64.tolist(), non64.tolist())
    expected = (
        0.5 * (np.mean(np.logaddexp(0, -slow_tar)) + np.mean(np.logaddexp(0, slow_non))) / np.log(2)
    )
    assert min_cllr(tar, non) == pytest.approx(expected, rel=1e-12)


def test_eer_crossing_inside_a_gap_sweeps_the_gap():
    # Two targets far apart and 1000 non-targets between them: FAR crosses FRR = 1/2 inside
    # that one gap, at the non-target of rank 500.
    non = np.linspace(-1.0, 1.0, 1000)
    tar = np.array([-5.0, 5.0])
    assert eer_sweep(tar, non) == _former_eer_sweep(tar, non)
    assert eer_sweep(tar, non) == pytest.approx(slow_eer_sweep(tar.tolist(), non.tolist()))
    blocks = pooled_blocks(tar, non)
    assert blocks.n_non.tolist() == [0, 0, 1000, 0, 0]


def test_matrix_counts_subtract_the_targets_they_include():
    rng = np.random.default_rng(5)
    S = np.round(rng.normal(size=(40, 30)), 1).astype(np.float32)
    m = rng.integers(0, 30, 40)
    mated = S[np.arange(40), m]
    counter = BlockCounter(mated)
    for r0 in range(0, 40, 9):
        counter.add(S[r0 : r0 + 9])
    mask = np.zeros(S.shape, bool)
    mask[np.arange(40), m] = True
    expected = pooled_blocks(mated, S[~mask])
    got = matrix_blocks(mated, counter.n_all)
    assert np.array_equal(got.mated, expected.mated)
    assert np.array_equal(got.n_tar, expected.n_tar)
    assert np.array_equal(got.n_non, expected.n_non)
