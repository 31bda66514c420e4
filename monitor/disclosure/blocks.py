"""The one sorted core of the pooled metrics: class counts per block of the sorted scores.

Like scikit-learn's ``_binary_clf_curve``, PAV (ZEBRA), the ROC convex hull, both EERs and
min Cllr only need, in score order, how many targets and non-targets fall in each block of
exactly tied scores. Targets are few next to non-targets (a 1-to-N matrix has T mated and
T·(N−1) non-mated scores), so only the targets are sorted: their K distinct values cut the line
into 2K+1 blocks — block 2k holds the non-targets strictly between distinct targets k−1 and k,
block 2k+1 every score equal to distinct target k — and the non-targets are counted into them with
``searchsorted`` + ``bincount``, chunk by chunk (float32 stays float32: both comparisons are
exact). Merging a run of non-target-only tie blocks into one block leaves PAV unchanged (equal
neighbours pool in the isotonic solution), so every metric on these blocks is exact; only the
threshold-sweep EER looks inside the one gap where FAR crosses FRR (:func:`sweep_eer`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class ClassCounts:
    """Targets and non-targets per non-empty block, in ascending score order (what PAV needs)."""

    n_tar: np.ndarray  # (B,) float64
    n_non: np.ndarray  # (B,) float64


@dataclass(frozen=True)
class ScoreBlocks:
    """Class counts per block of the sorted pooled scores (K distinct target scores)."""

    mated: np.ndarray  # (K,) distinct target scores, ascending, in the input's float dtype
    n_tar: np.ndarray  # (2K+1,) float64: targets per block (0 in the gaps, even blocks)
    n_non: np.ndarray  # (2K+1,) float64: non-targets per block

    @property
    def filled(self) -> npt.NDArray[np.bool_]:
        """Mask (2K+1,) of the blocks that hold at least one score."""
        return cast(npt.NDArray[np.bool_], (self.n_tar + self.n_non) > 0)

    def counts(self) -> ClassCounts:
        """The non-empty blocks' counts."""
        keep = self.filled
        return ClassCounts(self.n_tar[keep], self.n_non[keep])

    def gap_bounds(self, block: int) -> tuple[float, float]:
        """Open score interval of gap block ``block`` (even), ±inf at the ends."""
        k = block // 2
        low = float(self.mated[k - 1]) if k > 0 else -np.inf
        high = float(self.mated[k]) if k < self.mated.size else np.inf
        return low, high


#: Cells of the uniform grid that routes most scores to their block without a binary search.
GRID_CELLS = 1 << 20


class BlockCounter:
    """Counts scores into the 2K+1 blocks cut by the distinct target scores, chunk by chunk.

    A binary search per score costs ~80 ns; instead each score goes to a cell of a uniform grid
    over the target range, ``cell(x) = floor((x − lo)·scale)``, which is monotone in x. A cell that
    holds no target lies wholly inside one gap, so its block is read from a table; only the
    scores in the (at most K) cells that hold a target are searched. Exact for any inputs.
    """

    def __init__(self, tar: np.ndarray) -> None:
        tar = np.asarray(tar).ravel()
        self.mated, tar_counts = np.unique(tar, return_counts=True)
        self.n_tar = np.zeros(2 * self.mated.size + 1)
        self.n_tar[1::2] = tar_counts
        self.n_all = np.zeros(2 * self.mated.size + 1, dtype=np.int64)
        # A NaN sentinel makes mated[index] valid for index == K and never equal.
        self._lookup = np.concatenate([self.mated, np.array([np.nan], dtype=self.mated.dtype)])
        low, high = float(self.mated[0]), float(self.mated[-1])
        span = high - low
        self._low = low
        self._scale = (GRID_CELLS - 2) / span if 0 < span < np.inf else 0.0
        target_cells = self._cells(self.mated.astype(np.float64))
        cells = np.arange(GRID_CELLS)
        self._table = 2 * np.searchsorted(target_cells, cells)  # gap block of a target-free cell
        self._table[target_cells] = -1  # cells holding a target: search exactly

    def _cells(self, scores: np.ndarray) -> npt.NDArray[np.intp]:
        if self._scale == 0.0:  # one target value, or a range beyond floats: search them all
            return np.zeros(scores.shape, dtype=np.intp)
        with np.errstate(over="ignore"):  # far outside the target range: ±inf, clipped below
            cell = np.subtract(scores, self._low, dtype=np.float64)
            cell *= self._scale
        np.floor(cell, out=cell)
        cell += 1.0
        np.clip(cell, 0.0, GRID_CELLS - 1.0, out=cell)  # also maps ±inf into the end cells
        return cast(npt.NDArray[np.intp], cell.astype(np.intp))

    def add(self, scores: np.ndarray) -> None:
        """Count a chunk of scores (any shape) into the blocks."""
        scores = np.asarray(scores).ravel()
        block = self._table[self._cells(scores)]
        search = np.flatnonzero(block < 0)
        if search.size:
            exact = scores[search]
            if exact.dtype != self.mated.dtype:
                exact = exact.astype(np.result_type(exact.dtype, self.mated.dtype))
            index = np.searchsorted(self.mated, exact)
            block[search] = 2 * index + (self._lookup[index] == exact)
        self.n_all += np.bincount(block, minlength=self.n_all.size)

    def blocks(self) -> ScoreBlocks:
        """The blocks of the targets and the counted non-targets (see :func:`matrix_blocks`
        when the counted scores held the targets too)."""
        return ScoreBlocks(self.mated, self.n_tar.copy(), self.n_all.astype(np.float64))


def matrix_blocks(mated: np.ndarray, counts: np.ndarray) -> ScoreBlocks:
    """Blocks of a matrix from its mated scores (T,) and the counts (2K+1,) of all its scores
    (mated ones included) by :class:`BlockCounter` built on the same mated scores."""
    distinct, tar_counts = np.unique(np.asarray(mated).ravel(), return_counts=True)
    n_tar = np.zeros(2 * distinct.size + 1)
    n_tar[1::2] = tar_counts
    return ScoreBlocks(distinct, n_tar, counts.astype(np.float64) - n_tar)


def pooled_blocks(tar: np.ndarray, non: np.ndarray, *, chunk: int = 1 << 22) -> ScoreBlocks:
    """Blocks of target scores (n_tar,) and non-target scores (n_non,), exact for any sizes."""
    tar, non = np.asarray(tar).ravel(), np.asarray(non).ravel()
    counter = BlockCounter(tar)
    for start in range(0, non.size, chunk):
        counter.add(non[start : start + chunk])
    return counter.blocks()


def gap_values(non: np.ndarray) -> Callable[[float, float], np.ndarray]:
    """Gap reader over an in-memory array of non-target scores (see :func:`sweep_eer`)."""

    def inside(low: float, high: float) -> np.ndarray:
        return non[(non > low) & (non < high)]

    return inside


def sweep_eer(blocks: ScoreBlocks, gap_scores: Callable[[float, float], np.ndarray]) -> float:
    """Threshold-sweep EER from the blocks, exactly as over all unique scores.

    FAR − FRR strictly falls from one distinct score to the next, so the threshold with the
    smallest |FAR − FRR| sits where it changes sign. Block ends give FAR and FRR at every distinct
    target score; if the sign changes inside a gap, ``gap_scores(low, high)`` returns the
    non-targets strictly inside it and their distinct values are swept too. Midpoint thresholds
    repeat the counts of the score below them, so they never change the result.
    """
    n_tar, n_non = float(blocks.n_tar.sum()), float(blocks.n_non.sum())
    filled = np.flatnonzero(blocks.filled)
    cum_tar = np.cumsum(blocks.n_tar)[filled]
    cum_non = np.cumsum(blocks.n_non)[filled]
    frr = cum_tar / n_tar
    far = 1.0 - cum_non / n_non
    first_negative = int(np.argmax(far - frr < 0))  # exists: at the top FAR 0, FRR 1
    block = int(filled[first_negative])
    if block % 2 == 0 and blocks.n_non[block] > 1:  # crossing inside a gap: sweep its values
        inside = np.sort(gap_scores(*blocks.gap_bounds(block)).astype(np.float64, copy=False))
        last = np.flatnonzero(np.concatenate([inside[1:] != inside[:-1], [True]]))
        before = cum_non[first_negative] - blocks.n_non[block]
        gap_far = 1.0 - (before + last + 1.0) / n_non
        gap_frr = np.full(last.size, frr[first_negative])
        far = np.concatenate([far[:first_negative], gap_far, far[first_negative + 1 :]])
        frr = np.concatenate([frr[:first_negative], gap_frr, frr[first_negative + 1 :]])
    best = int(np.argmin(np.abs(far - frr)))
    return float((far[best] + frr[best]) / 2.0)
