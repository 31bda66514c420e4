"""Local information disclosure (LID, paper 003).

Each trial row is z-normalised (ddof 0), mapped to LLRs by a logistic calibration fitted on
speaker-disjoint dev data, and turned into a posterior over the N identities by a softmax. Because
the softmax cancels the bias and the prior term, the posterior and LID depend on the weight w only.
Rows are processed in blocks so a 10⁴ × 10⁴ matrix never needs a second full-size temporary.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

from monitor.disclosure.ranks import (
    check_scores,
    check_truth,
    chunk_rows,
    reject_non_finite,
)

logger = logging.getLogger(__name__)


_LN2 = math.log(2.0)


@dataclass(frozen=True)
class LidCalibration:
    """Logistic calibration LLR = w·z + b − ln(N_mated / N_nonmated) (eq. 3), in nats."""

    weight: float  # w: nats of LLR per unit of row z-score
    bias: float  # b: intercept of the unweighted logistic fit, nats
    log_prior_odds: float  # ln(N_mated / N_nonmated) on the dev data (= −ln(N' − 1)), nats


def check_weight(weight: float) -> float:
    w = float(weight)
    if not math.isfinite(w):
        raise ValueError(f"weight = {weight}: the LID weight must be finite")
    return w


@dataclass(frozen=True)
class RowScaling:
    """Per-row constants (n, 1) of the z-norm: z = (x / scale − mean) / sigma, 0 on constant rows.
    Kept by the logistic fit so that each pass recomputes the same z bit for bit instead of
    storing a (T, N) float64 copy."""

    scale: npt.NDArray[np.float64]
    mean: npt.NDArray[np.float64]
    sigma: npt.NDArray[np.float64]
    constant: npt.NDArray[np.bool_]

    def apply(self, block: np.ndarray, out: np.ndarray) -> npt.NDArray[np.float64]:
        """z-scores (n, N) of the rows these constants were computed from, into ``out``."""
        z = np.divide(block, self.scale, out=out)
        z -= self.mean
        z /= self.sigma
        z[self.constant[:, 0]] = 0.0
        return cast(npt.NDArray[np.float64], z)


def znorm_scaling(
    block: np.ndarray, row0: int, out: np.ndarray | None = None
) -> tuple[npt.NDArray[np.float64], RowScaling]:
    """z-scores of each row (ddof 0), into ``out`` if given, and the row constants that
    reproduce them; rows whose scores are all equal become 0.

    z is invariant to scaling a row, so each row is first divided by its largest magnitude:
    scores near 1e308 would overflow the mean and scores near 1e-200 underflow the variance.
    """
    high = np.asarray(block.max(axis=1), dtype=np.float64)  # exact: float32 → float64
    low = np.asarray(block.min(axis=1), dtype=np.float64)
    if not (np.isfinite(high).all() and np.isfinite(low).all()):  # NaN propagates to both
        reject_non_finite(block, row0)
    constant = (high == low)[:, None]
    scale = np.maximum(np.abs(high), np.abs(low))[:, None]
    scale[scale == 0] = 1.0
    z = np.divide(block, scale, out=out, dtype=np.float64)
    mean = z.mean(axis=1, keepdims=True)
    z -= mean
    sigma = np.sqrt(np.einsum("ij,ij->i", z, z) / z.shape[1])[:, None]
    sigma[constant | (sigma == 0)] = 1.0
    z /= sigma
    z[constant[:, 0]] = 0.0
    return z, RowScaling(scale, mean, sigma, constant)


def znorm_block(
    block: np.ndarray, row0: int, out: np.ndarray | None = None
) -> npt.NDArray[np.float64]:
    """z-scores (n, N) of each row of a block whose first row is ``row0`` of the matrix."""
    return znorm_scaling(block, row0, out)[0]


#: Entries per row block in this module's passes: a block and its few temporaries stay in the
#: L2 cache (the z-norm of 10⁸ float32 scores: 0.5 s in 2¹⁶-entry blocks, 1.5 s in 2²²-entry ones).
CACHE_ELEMENTS = 1 << 16


def block_rows(n_columns: int) -> int:
    """Rows per block: cache-sized, and never more than :func:`chunk_rows` (which tests shrink)."""
    return min(chunk_rows(n_columns), max(1, CACHE_ELEMENTS // max(1, n_columns)))


def znorm_rows(S: np.ndarray) -> np.ndarray:
    """Row-wise z-normalisation (eq. 2, population std): S (T, N) → Z (T, N) float64."""
    S = check_scores(S)
    Z = np.empty(S.shape, dtype=np.float64)
    step = block_rows(S.shape[1])
    for r0 in range(0, S.shape[0], step):
        Z[r0 : r0 + step] = znorm_block(S[r0 : r0 + step], r0)
    return Z


def _log_softmax_block(block: np.ndarray, weight: float, row0: int) -> np.ndarray:
    a = znorm_block(block, row0)
    a *= weight
    a -= a.max(axis=1, keepdims=True)
    a -= np.log(np.exp(a).sum(axis=1, keepdims=True))
    return a


def lid_log_posteriors(S: np.ndarray, weight: float) -> np.ndarray:
    """ln P(identity j | row i) = log-softmax_j(w·z_ij) (eq. 4): S (T, N) → (T, N) nats."""
    S = check_scores(S)
    w = check_weight(weight)
    out = np.empty(S.shape, dtype=np.float64)
    step = block_rows(S.shape[1])
    for r0 in range(0, S.shape[0], step):
        out[r0 : r0 + step] = _log_softmax_block(S[r0 : r0 + step], w, r0)
    return out


def lid_posteriors(S: np.ndarray, weight: float) -> npt.NDArray[np.float64]:
    """P(identity j | row i) (T, N); each row sums to 1."""
    return cast(npt.NDArray[np.float64], np.exp(lid_log_posteriors(S, weight)))


def calibrated_llr(S: np.ndarray, cal: LidCalibration) -> np.ndarray:
    """Calibrated LLRs w·z + b − ln(N_mated/N_nonmated) (T, N) nats, for export (eq. 3)."""
    S = check_scores(S)
    out = znorm_rows(S)
    out *= check_weight(cal.weight)
    out += cal.bias - cal.log_prior_odds
    return out


def row_blocks(
    S: np.ndarray, start: int = 0, stop: int | None = None, step: int | None = None
) -> Iterator[tuple[int, np.ndarray]]:
    """(row0, S[row0 : row0 + step]) over blocks of ``step`` rows (default cache-sized) of rows
    [start, stop); ``start`` is a multiple of the step, so the blocks are those of the whole
    matrix."""
    step = step or block_rows(S.shape[1])
    stop = S.shape[0] if stop is None else stop
    for r0 in range(start, stop, step):
        yield r0, S[r0 : min(r0 + step, stop)]


class BlockBuffers:
    """Three (n, N) float64 buffers reused for every row block of a pass. Fresh half-megabyte
    temporaries per block may each cost an mmap and its page faults (glibc's threshold moves
    with the allocation history): a third of the time of a pass over 10⁸ scores."""

    def __init__(self, S: np.ndarray, step: int | None = None) -> None:
        self.data = np.empty((3, (step or block_rows(S.shape[1])) * S.shape[1]))

    def views(self, shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
        size = math.prod(shape)
        return tuple(buffer[:size].reshape(shape) for buffer in self.data)


def _truth_log_posterior(z: np.ndarray, truth: np.ndarray, w: float, a: np.ndarray) -> np.ndarray:
    """ln P(m_i | row i) (n,) nats from a block's z-scores (n, N) and truth (n,); ``a`` is
    scratch space of z's shape."""
    np.multiply(z, w, out=a)
    a -= a.max(axis=1, keepdims=True)
    mated = a[np.arange(a.shape[0]), truth]
    np.exp(a, out=a)
    return cast(np.ndarray, mated - np.log(a.sum(axis=1)))


def _softplus(t: np.ndarray, e: np.ndarray | None = None) -> np.ndarray:
    """ln(1 + e^t) = max(t, 0) + ln(1 + e^−|t|), stable, in place of ``t`` (−inf gives 0);
    ``e`` is scratch space of t's shape."""
    e = np.abs(t, out=e)
    np.negative(e, out=e)
    np.exp(e, out=e)
    np.log1p(e, out=e)
    np.maximum(t, 0.0, out=t)
    t += e
    return t


def _costs_block(
    z: np.ndarray, truth: np.ndarray, cal: LidCalibration, w: float, llr: np.ndarray, e: np.ndarray
) -> np.ndarray:
    """(n, 2) mated ln(1 + e^−llr) and Σ non-mated ln(1 + e^llr) of a block's z-scores (n, N);
    ``llr`` and ``e`` are scratch space of z's shape."""
    np.multiply(z, w, out=llr)
    llr += cal.bias - cal.log_prior_odds
    rows = np.arange(llr.shape[0])
    costs = np.empty((llr.shape[0], 2))
    costs[:, 0] = _softplus(-llr[rows, truth])
    llr[rows, truth] = -np.inf  # ln(1 + e^-inf) = 0: the mated entries drop out
    costs[:, 1] = _softplus(llr, e).sum(axis=1)
    return costs


def lid_per_trial(S: np.ndarray, m: np.ndarray, weight: float) -> np.ndarray:
    """LID_i = log2(N · P(m_i | row i)) bits (eqs. 5–7): S (T, N), m (T,) → (T,)."""
    S = check_scores(S)
    T, N = S.shape
    truth = check_truth(m, T, N)
    w = check_weight(weight)
    lid = np.empty(T, dtype=np.float64)
    buffers = BlockBuffers(S)
    for r0, block in row_blocks(S):
        rows = slice(r0, r0 + block.shape[0])
        z, a, _ = buffers.views(block.shape)
        lid[rows] = _truth_log_posterior(znorm_block(block, r0, z), truth[rows], w, a)
    lid += math.log(N)
    lid /= _LN2
    return lid


def calibrated_costs(S: np.ndarray, m: np.ndarray, cal: LidCalibration) -> np.ndarray:
    """Per trial (T, 2): ln(1 + e^−llr) of the mated and Σ ln(1 + e^llr) over the non-mated
    calibrated LLRs (:func:`calibrated_llr`) of S (T, N) with truth m (T,), in nats, computed
    row block by row block. Per-row values do not depend on how the rows are split."""
    S = check_scores(S)
    T, N = S.shape
    truth = check_truth(m, T, N)
    w = check_weight(cal.weight)
    costs = np.empty((T, 2))
    buffers = BlockBuffers(S)
    for r0, block in row_blocks(S):
        rows = slice(r0, r0 + block.shape[0])
        z, llr, e = buffers.views(block.shape)
        costs[rows] = _costs_block(znorm_block(block, r0, z), truth[rows], cal, w, llr, e)
    return costs


def lid_and_costs(
    S: np.ndarray, m: np.ndarray, cal: LidCalibration
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`lid_per_trial` (T,) bits with the calibration's weight and :func:`calibrated_costs`
    (T, 2) nats of S (T, N) with truth m (T,), from one z-normalisation of each row block."""
    S = check_scores(S)
    T, N = S.shape
    truth = check_truth(m, T, N)
    w = check_weight(cal.weight)
    lid = np.empty(T, dtype=np.float64)
    costs = np.empty((T, 2))
    buffers = BlockBuffers(S)
    for r0, block in row_blocks(S):
        rows = slice(r0, r0 + block.shape[0])
        z, a, e = buffers.views(block.shape)
        znorm_block(block, r0, z)
        lid[rows] = _truth_log_posterior(z, truth[rows], w, a)
        costs[rows] = _costs_block(z, truth[rows], cal, w, a, e)
    lid += math.log(N)
    lid /= _LN2
    return lid, costs


def cllr_of_costs(costs: np.ndarray, N: int) -> float:
    """Cllr [bits] from :func:`calibrated_costs` (T, 2) of a matrix with N identities; the
    exactly rounded sums make it independent of the order of the rows."""
    T = int(costs.shape[0])
    tar, non = math.fsum(costs[:, 0]), math.fsum(costs[:, 1])
    return 0.5 * (tar / T + non / (T * (N - 1))) / _LN2


def calibrated_cllr(S: np.ndarray, m: np.ndarray, cal: LidCalibration) -> float:
    """Cllr [bits] of the calibrated LLRs split by the truth (T,), computed in row blocks."""
    return cllr_of_costs(calibrated_costs(S, m, cal), np.shape(S)[1])


@dataclass(frozen=True)
class LidSummary:
    """Outer aggregators of LID over trials (eqs. 8–9, Table 2); bits and fractions."""

    ALID: float  # mean LID, bits
    PDR: float  # fraction of trials with LID > 0
    NDR: float  # 1 − PDR (LID == 0 counts as negative)
    LID_plus: float  # mean LID over LID > 0, bits; NaN when PDR = 0
    LID_minus: float  # mean LID over LID <= 0, bits; NaN when NDR = 0
    LID_max: float  # largest LID, bits
    weight: float  # calibration weight w used
    bias: float  # calibration bias b (does not affect LID)


def _check_lid(lid: np.ndarray) -> np.ndarray:
    x = np.asarray(lid, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"lid must be a 1-D (T,) array, got shape {x.shape}")
    if np.isnan(x).any() or np.isposinf(x).any():
        raise ValueError("lid contains NaN or +inf")
    return x


def lid_summary(lid: np.ndarray, cal: LidCalibration | None) -> LidSummary:
    """ALID, PDR, NDR, LID+, LID−, LIDmax of per-trial LIDs (T,); T = 0 gives NaN everywhere."""
    x = _check_lid(lid)
    weight = cal.weight if cal is not None else math.nan
    bias = cal.bias if cal is not None else math.nan
    if x.size == 0:
        nan = math.nan
        return LidSummary(nan, nan, nan, nan, nan, nan, weight, bias)
    positive = x > 0
    n_pos = int(np.count_nonzero(positive))
    pdr = n_pos / x.size
    return LidSummary(
        ALID=float(x.mean()),
        PDR=pdr,
        NDR=1.0 - pdr,
        LID_plus=float(x[positive].mean()) if n_pos else math.nan,
        LID_minus=float(x[~positive].mean()) if n_pos < x.size else math.nan,
        LID_max=float(x.max()),
        weight=weight,
        bias=bias,
    )


def lid_ccdf(lid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Empirical CCDF (Fig. 4): x = sorted distinct LIDs, y = fraction of trials with LID > x."""
    x = np.sort(_check_lid(lid))
    values = np.unique(x)
    if x.size == 0:
        return values, np.empty(0)
    return values, 1.0 - np.searchsorted(x, values, side="right") / x.size
