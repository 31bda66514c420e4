"""Every pooled and rank statistic of a 1-to-N score matrix in passes over row blocks.

A (T, N) matrix of 10⁸ scores is read twice, block by block, and never copied whole: the first
pass counts the true identity's rank (above, ties), the non-mated maximum per row (top-1), the
scores per block of the sorted core (:mod:`monitor.disclosure.blocks`) and the range; the second
fills the linkability histograms on that range. Each statistic of a row block merges exactly
with the others' (integer counts, per-row values), so row blocks may also be scanned by separate
workers (:class:`monitor.blocks.workers.DaskRows`) and merged with :func:`merge_scans`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

import numpy as np
import numpy.typing as npt

from monitor.disclosure.blocks import BlockCounter
from monitor.disclosure.lid import LidCalibration, lid_and_costs
from monitor.disclosure.ranks import check_truth, chunk_rows, reject_non_finite

_R = TypeVar("_R")
RowFunction = Callable[..., _R]
"""function(S_rows (n, N), m_rows (n,), row0, *args) -> result for one block of rows."""


class RowSource(Protocol):
    """A (T, N) score matrix with its truth, visited in row blocks (in memory or on workers)."""

    shape: tuple[int, int]

    def map(self, function: RowFunction[_R], *args: Any) -> list[_R]:
        """``function(S_rows, m_rows, row0, *args)`` for every row block, in row order."""
        ...


class InMemoryRows:
    """Row blocks of an in-memory matrix S (T, N) and truth m (T,), ~4 M scores a block."""

    def __init__(self, S: np.ndarray, m: np.ndarray, *, rows_per_block: int | None = None):
        self.S = S
        self.shape = (int(S.shape[0]), int(S.shape[1]))
        self.m = check_truth(m, *self.shape)
        self.step = rows_per_block or chunk_rows(self.shape[1])

    def map(self, function: RowFunction[_R], *args: Any) -> list[_R]:
        return [
            function(self.S[r0 : r0 + self.step], self.m[r0 : r0 + self.step], r0, *args)
            for r0 in range(0, self.shape[0], self.step)
        ]


@dataclass
class MatrixScan:
    """First-pass statistics of rows [row0, row0 + n) of a matrix whose mated scores are known."""

    row0: int
    above: np.ndarray  # (n,) int64: non-mated scores above the mated one
    ties: np.ndarray  # (n,) int64: non-mated scores equal to the mated one
    best_other: np.ndarray  # (n,) float64: largest non-mated score (-inf when N = 1)
    counts: np.ndarray  # (2K+1,) int64: every score of the rows per block of the sorted core
    low: float  # smallest score
    high: float  # largest score


def mated_scores(S: np.ndarray, m: np.ndarray) -> npt.NDArray[Any]:
    """S[i, m_i] (T,), in the matrix's dtype."""
    return cast(npt.NDArray[Any], S[np.arange(S.shape[0]), m])


def scan_rows(S: np.ndarray, m: np.ndarray, mated_all: np.ndarray, *, row0: int = 0) -> MatrixScan:
    """First pass over rows S (n, N) with truth m (n,), their first row being ``row0`` of the
    whole matrix; ``mated_all`` holds every row's mated score (the blocks are cut by them)."""
    counter = BlockCounter(mated_all)
    n, N = S.shape
    above = np.empty(n, dtype=np.int64)
    ties = np.empty(n, dtype=np.int64)
    best_other = np.empty(n, dtype=np.float64)
    low, high = np.inf, -np.inf
    step = chunk_rows(N)
    for r0 in range(0, n, step):
        block = S[r0 : r0 + step]
        rows = np.arange(block.shape[0])
        reject_non_finite(block, row0 + r0)
        mated = block[rows, m[r0 : r0 + step]]
        above[r0 : r0 + step] = np.count_nonzero(block > mated[:, None], axis=1)
        ties[r0 : r0 + step] = np.count_nonzero(block == mated[:, None], axis=1) - 1
        counter.add(block)
        low, high = min(low, float(block.min())), max(high, float(block.max()))
        others = block.copy()  # the mated entry is masked out
        others[rows, m[r0 : r0 + step]] = -np.inf
        best_other[r0 : r0 + step] = others.max(axis=1)
    return MatrixScan(row0, above, ties, best_other, counter.n_all, low, high)


def histogram_rows(S: np.ndarray, edges: np.ndarray, scale: float) -> np.ndarray:
    """Counts (bins,) int64 of S / scale over ``edges`` (as np.histogram), row block by block."""
    counts = np.zeros(edges.size - 1, dtype=np.int64)
    step = chunk_rows(S.shape[1])
    for r0 in range(0, S.shape[0], step):
        scaled = S[r0 : r0 + step].astype(np.float64) / scale
        counts += np.histogram(scaled, bins=edges)[0]
    return counts


def rows_mated(S: np.ndarray, m: np.ndarray, row0: int) -> np.ndarray:
    """Row function: the mated scores of a block (n,)."""
    return mated_scores(S, m)


def rows_scan(S: np.ndarray, m: np.ndarray, row0: int, mated_all: np.ndarray) -> MatrixScan:
    """Row function: :func:`scan_rows` of a block."""
    return scan_rows(S, m, mated_all, row0=row0)


def rows_histogram(
    S: np.ndarray, m: np.ndarray, row0: int, edges: np.ndarray, scale: float
) -> np.ndarray:
    """Row function: :func:`histogram_rows` of a block."""
    return histogram_rows(S, edges, scale)


def rows_between(S: np.ndarray, m: np.ndarray, row0: int, low: float, high: float) -> np.ndarray:
    """Row function: the scores of a block strictly inside (low, high), float64."""
    return S[(low < S) & (high > S)].astype(np.float64)


def rows_lid_costs(
    S: np.ndarray, m: np.ndarray, row0: int, cal: LidCalibration
) -> tuple[np.ndarray, np.ndarray]:
    """Row function: LID per trial (n,) bits and the calibrated-Cllr costs (n, 2) of a block."""
    return lid_and_costs(S, m, cal)


def merge_scans(scans: list[MatrixScan]) -> MatrixScan:
    """The scan of the whole matrix from its row blocks' scans (in row order)."""
    return MatrixScan(
        scans[0].row0,
        np.concatenate([s.above for s in scans]),
        np.concatenate([s.ties for s in scans]),
        np.concatenate([s.best_other for s in scans]),
        np.sum([s.counts for s in scans], axis=0),
        min(s.low for s in scans),
        max(s.high for s in scans),
    )


def values_between(S: np.ndarray) -> Callable[[float, float], np.ndarray]:
    """Gap reader for the threshold-sweep EER: every score of S strictly inside (low, high).
    Mated scores equal a block boundary, so they never fall strictly inside a gap."""

    def inside(low: float, high: float) -> np.ndarray:
        found = []
        step = chunk_rows(S.shape[1])
        for r0 in range(0, S.shape[0], step):
            block = S[r0 : r0 + step]
            found.append(block[(block > low) & (block < high)].astype(np.float64))
        return np.concatenate(found)

    return inside
