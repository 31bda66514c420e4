"""Baseline metrics that published tables report beside disclosure.

Two EERs on purpose: ``eer_sweep`` (threshold sweep, what VoicePrivacy reports) and
``eer_rocch`` (ROC convex hull, BOSARIS/ZEBRA); they differ (the 4×4 example: 50 % vs 37.5 %).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np

from monitor.disclosure.blocks import ClassCounts, ScoreBlocks, gap_values, pooled_blocks, sweep_eer
from monitor.disclosure.zebra import LN2, block_llr, class_counts, pav_pooled


def _scores(values: np.ndarray | list[float], name: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).ravel()
    if array.size == 0:
        raise ValueError(f"{name}: no scores")
    if np.any(np.isnan(array)):
        raise ValueError(f"{name}: NaN score")
    return array


def split_mated(S: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mated scores S[i, m_i] (T,) and the non-mated rest (T·(N-1),), row by row."""
    S = np.asarray(S, dtype=np.float64)
    m = np.asarray(m)
    if S.ndim != 2 or m.shape != (S.shape[0],):
        raise ValueError(f"scores {S.shape} and truth {m.shape} do not match as (T, N) and (T,)")
    if not np.issubdtype(m.dtype, np.integer):
        raise ValueError(f"truth must be integer indices, got dtype {m.dtype}")
    if m.size and (m.min() < 0 or m.max() >= S.shape[1]):
        raise ValueError(f"truth index out of range [0, {S.shape[1]})")
    rows = np.arange(S.shape[0])
    mask = np.zeros(S.shape, dtype=bool)
    mask[rows, m] = True
    return S[rows, m], S[~mask]


def top1_linkage(S: np.ndarray, m: np.ndarray) -> float:
    """Strict top-1 rate: fraction of rows whose mated score beats every non-mated one."""
    mated, nonmated = split_mated(S, m)
    if mated.size == 0:
        return math.nan
    if nonmated.size == 0:
        return 1.0
    best_other = nonmated.reshape(mated.size, -1).max(axis=1)
    return float(np.mean(mated > best_other))


def eer_sweep(tar: np.ndarray, non: np.ndarray) -> float:
    """Threshold-sweep EER: thresholds at unique scores and their midpoints,
    FRR(t) = #{tar <= t}/|tar|, FAR(t) = #{non > t}/|non|; (FAR + FRR)/2 where |FAR - FRR| is
    smallest (the lowest such threshold on ties)."""
    tar = _scores(tar, "targets")
    non = _scores(non, "non-targets")
    return sweep_eer(pooled_blocks(tar, non), gap_values(non))


def rocch(tar: np.ndarray, non: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ROC convex-hull vertices (Pfa, Pmiss) from tie-pooled PAV, from (1, 0) to (0, 1)."""
    return rocch_of_counts(class_counts(tar, non))


def rocch_of_counts(blocks: ClassCounts) -> tuple[np.ndarray, np.ndarray]:
    """ROCCH vertices (Pfa, Pmiss) from the sorted core's counts per block."""
    return _rocch_of_pooled(*pav_pooled(blocks))


def _rocch_of_pooled(blocks: ClassCounts, posterior: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # Runs of equal PAV posterior are the hull's bins; their boundaries are the vertices.
    edge = np.flatnonzero(np.diff(posterior) != 0)
    ends = np.concatenate([edge, [posterior.size - 1]])
    cum_tar = np.cumsum(blocks.n_tar)[ends]
    cum_non = np.cumsum(blocks.n_non)[ends]
    pmiss = np.concatenate([[0.0], cum_tar / cum_tar[-1]])
    pfa = np.concatenate([[1.0], 1.0 - cum_non / cum_non[-1]])
    return pfa, pmiss


def eer_rocch(tar: np.ndarray, non: np.ndarray) -> float:
    """ROCCH-EER (BOSARIS): largest crossing of a hull segment's line with Pfa = Pmiss."""
    return _rocch_eer(*rocch(tar, non))


def _rocch_eer(pfa: np.ndarray, pmiss: np.ndarray) -> float:
    x0, x1, y0, y1 = pfa[:-1], pfa[1:], pmiss[:-1], pmiss[1:]
    proper = (x0 != x1) & (y0 != y1)
    det = x0 * y1 - x1 * y0
    denominator = (y1 - y0) + (x0 - x1)
    crossing = np.where(proper, det / np.where(proper, denominator, 1.0), 0.0)
    return float(max(crossing.max(initial=0.0), 0.0))


def baselines_of_blocks(
    blocks: ScoreBlocks, gap_scores: Callable[[float, float], np.ndarray]
) -> tuple[float, float, float]:
    """(threshold-sweep EER, ROCCH-EER, min Cllr) from the sorted core's blocks, in one go;
    ``gap_scores(low, high)`` returns the non-targets strictly inside (low, high)."""
    pooled = pav_pooled(blocks.counts())  # one PAV for the hull and min Cllr
    return (
        sweep_eer(blocks, gap_scores),
        _rocch_eer(*_rocch_of_pooled(*pooled)),
        _min_cllr_of_pooled(*pooled),
    )


def cllr(llr_tar: np.ndarray, llr_non: np.ndarray) -> float:
    """Cllr [bits] of natural-log LLRs; ±inf LLRs are allowed."""
    llr_tar = _scores(llr_tar, "target LLRs")
    llr_non = _scores(llr_non, "non-target LLRs")
    tar_cost = np.mean(np.logaddexp(0.0, -llr_tar))
    non_cost = np.mean(np.logaddexp(0.0, llr_non))
    return float(0.5 * (tar_cost + non_cost) / LN2)


def min_cllr(tar: np.ndarray, non: np.ndarray) -> float:
    """Cllr of the PAV-calibrated (tie-pooled, no Laplace) LLRs of the scores [bits]."""
    return _min_cllr_of_counts(class_counts(tar, non))


def _min_cllr_of_counts(blocks: ClassCounts) -> float:
    return _min_cllr_of_pooled(*pav_pooled(blocks))


def _min_cllr_of_pooled(blocks: ClassCounts, posterior: np.ndarray) -> float:
    llr = block_llr(blocks, posterior)
    # Weight-0 blocks may hold an infinite cost (e.g. a non-target-only block at LLR -inf).
    tar_cost = np.where(blocks.n_tar > 0, np.logaddexp(0.0, -llr), 0.0)
    non_cost = np.where(blocks.n_non > 0, np.logaddexp(0.0, llr), 0.0)
    mean_tar = np.dot(blocks.n_tar, tar_cost) / blocks.n_tar.sum()
    mean_non = np.dot(blocks.n_non, non_cost) / blocks.n_non.sum()
    return float(0.5 * (mean_tar + mean_non) / LN2)


def linkability(mated: np.ndarray, nonmated: np.ndarray, *, omega: float = 1.0) -> float:
    """Global linkability D<->sys in [0, 1] (Gomez-Barrero et al.).

    Histogram densities with min(floor(|mated|/10), 100) equal-width bins over all scores;
    LR := 1 and D := 1 where the non-mated density is 0; trapezoid over bin centres (as the
    reference code). With fewer than 10 mated scores there is no bin: warns and returns NaN.
    """
    mated = _scores(mated, "mated")
    nonmated = _scores(nonmated, "non-mated")
    grid = linkability_bins(
        mated.size, min(mated.min(), nonmated.min()), max(mated.max(), nonmated.max())
    )
    if grid is None or isinstance(grid, float):
        return math.nan if grid is None else grid
    edges, scale = grid
    y_mated = np.histogram(mated / scale, bins=edges)[0]
    y_non = np.histogram(nonmated / scale, bins=edges)[0]
    return linkability_of_counts(y_mated, y_non, edges, omega=omega)


def linkability_bins(
    n_mated: int, low: float, high: float
) -> tuple[np.ndarray, float] | float | None:
    """Bin edges of the scaled scores and the scale, or the answer itself when there is no
    histogram to make: None (NaN, with a warning) below 10 mated scores, 0.0 for one point mass.
    """
    n_bins = min(n_mated // 10, 100)
    if n_bins < 1:
        warnings.warn(
            f"linkability needs at least 10 mated scores, got {n_mated}",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    if high == low:
        return 0.0  # one point mass shared by both classes: no evidence
    # D<->sys is invariant to scaling the scores (densities and bin widths scale inversely);
    # scaling to [-1, 1] keeps the bin width of scores near ±1e308 finite.
    scale = max(abs(low), abs(high))
    return np.linspace(low / scale, high / scale, n_bins + 1), scale


def linkability_of_counts(
    mated_counts: np.ndarray, non_counts: np.ndarray, edges: np.ndarray, *, omega: float = 1.0
) -> float:
    """D<->sys from the bin counts of the scaled mated and non-mated scores over ``edges``."""
    centres = (edges[1:] + edges[:-1]) / 2.0
    width = np.diff(edges).astype(float)
    y_mated = mated_counts / width / mated_counts.sum()  # np.histogram(density=True)
    y_non = non_counts / width / non_counts.sum()
    lr = np.divide(y_mated, y_non, out=np.ones_like(y_mated), where=y_non != 0)
    d = np.where(omega * lr > 1.0, 2.0 * omega * lr / (1.0 + omega * lr) - 1.0, 0.0)
    d = np.where(y_non == 0, 1.0, d)
    return float(np.trapezoid(d * y_mated, x=centres))
