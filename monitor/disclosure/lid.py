"""Local information disclosure (LID, paper 003; DESIGN §2).

Each trial row is z-normalised (ddof 0), mapped to LLRs by a logistic calibration fitted on
speaker-disjoint dev data, and turned into a posterior over the N identities by a softmax. Because
the softmax cancels the bias and the prior term, the posterior and LID depend on the weight w only.
Rows are processed in blocks so a 10⁴ × 10⁴ matrix never needs a second full-size temporary.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

from monitor.disclosure.ranks import (
    check_scores,
    check_truth,
    chunk_rows,
    reject_non_finite,
    single_threaded_blas,
)

logger = logging.getLogger(__name__)


class SeparableWarning(RuntimeWarning):
    """The dev scores are perfectly separable: the LID weight is set by the L2 penalty.
    Callers that fit many calibrations collect these and report each feature once."""


DEFAULT_C = 1e6  # inverse L2 strength on w (scikit-learn's C): nearly maximum likelihood
_LN2 = math.log(2.0)


@dataclass(frozen=True)
class LidCalibration:
    """Logistic calibration LLR = w·z + b − ln(N_mated / N_nonmated) (eq. 3), in nats."""

    weight: float  # w: nats of LLR per unit of row z-score
    bias: float  # b: intercept of the unweighted logistic fit, nats
    log_prior_odds: float  # ln(N_mated / N_nonmated) on the dev data (= −ln(N' − 1)), nats


def _check_weight(weight: float) -> float:
    w = float(weight)
    if not math.isfinite(w):
        raise ValueError(f"weight = {weight}: the LID weight must be finite")
    return w


@dataclass(frozen=True)
class _RowScaling:
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


def _znorm_scaling(
    block: np.ndarray, row0: int, out: np.ndarray | None = None
) -> tuple[npt.NDArray[np.float64], _RowScaling]:
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
    return z, _RowScaling(scale, mean, sigma, constant)


def _znorm_block(
    block: np.ndarray, row0: int, out: np.ndarray | None = None
) -> npt.NDArray[np.float64]:
    """z-scores (n, N) of each row of a block whose first row is ``row0`` of the matrix."""
    return _znorm_scaling(block, row0, out)[0]


#: Entries per row block in this module's passes: a block and its few temporaries stay in the
#: L2 cache (the z-norm of 10⁸ float32 scores: 0.5 s in 2¹⁶-entry blocks, 1.5 s in 2²²-entry ones).
CACHE_ELEMENTS = 1 << 16


def _block_rows(n_columns: int) -> int:
    """Rows per block: cache-sized, and never more than :func:`chunk_rows` (which tests shrink)."""
    return min(chunk_rows(n_columns), max(1, CACHE_ELEMENTS // max(1, n_columns)))


def znorm_rows(S: np.ndarray) -> np.ndarray:
    """Row-wise z-normalisation (eq. 2, population std): S (T, N) → Z (T, N) float64."""
    S = check_scores(S)
    Z = np.empty(S.shape, dtype=np.float64)
    step = _block_rows(S.shape[1])
    for r0 in range(0, S.shape[0], step):
        Z[r0 : r0 + step] = _znorm_block(S[r0 : r0 + step], r0)
    return Z


def _log_softmax_block(block: np.ndarray, weight: float, row0: int) -> np.ndarray:
    a = _znorm_block(block, row0)
    a *= weight
    a -= a.max(axis=1, keepdims=True)
    a -= np.log(np.exp(a).sum(axis=1, keepdims=True))
    return a


def lid_log_posteriors(S: np.ndarray, weight: float) -> np.ndarray:
    """ln P(identity j | row i) = log-softmax_j(w·z_ij) (eq. 4): S (T, N) → (T, N) nats."""
    S = check_scores(S)
    w = _check_weight(weight)
    out = np.empty(S.shape, dtype=np.float64)
    step = _block_rows(S.shape[1])
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
    out *= _check_weight(cal.weight)
    out += cal.bias - cal.log_prior_odds
    return out


def _row_blocks(
    S: np.ndarray, start: int = 0, stop: int | None = None, step: int | None = None
) -> Iterator[tuple[int, np.ndarray]]:
    """(row0, S[row0 : row0 + step]) over blocks of ``step`` rows (default cache-sized) of rows
    [start, stop); ``start`` is a multiple of the step, so the blocks are those of the whole
    matrix."""
    step = step or _block_rows(S.shape[1])
    stop = S.shape[0] if stop is None else stop
    for r0 in range(start, stop, step):
        yield r0, S[r0 : min(r0 + step, stop)]


class _BlockBuffers:
    """Three (n, N) float64 buffers reused for every row block of a pass. Fresh half-megabyte
    temporaries per block may each cost an mmap and its page faults (glibc's threshold moves
    with the allocation history): a third of the time of a pass over 10⁸ scores."""

    def __init__(self, S: np.ndarray, step: int | None = None) -> None:
        self.data = np.empty((3, (step or _block_rows(S.shape[1])) * S.shape[1]))

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
    w = _check_weight(weight)
    lid = np.empty(T, dtype=np.float64)
    buffers = _BlockBuffers(S)
    for r0, block in _row_blocks(S):
        rows = slice(r0, r0 + block.shape[0])
        z, a, _ = buffers.views(block.shape)
        lid[rows] = _truth_log_posterior(_znorm_block(block, r0, z), truth[rows], w, a)
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
    w = _check_weight(cal.weight)
    costs = np.empty((T, 2))
    buffers = _BlockBuffers(S)
    for r0, block in _row_blocks(S):
        rows = slice(r0, r0 + block.shape[0])
        z, llr, e = buffers.views(block.shape)
        costs[rows] = _costs_block(_znorm_block(block, r0, z), truth[rows], cal, w, llr, e)
    return costs


def lid_and_costs(
    S: np.ndarray, m: np.ndarray, cal: LidCalibration
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`lid_per_trial` (T,) bits with the calibration's weight and :func:`calibrated_costs`
    (T, 2) nats of S (T, N) with truth m (T,), from one z-normalisation of each row block."""
    S = check_scores(S)
    T, N = S.shape
    truth = check_truth(m, T, N)
    w = _check_weight(cal.weight)
    lid = np.empty(T, dtype=np.float64)
    costs = np.empty((T, 2))
    buffers = _BlockBuffers(S)
    for r0, block in _row_blocks(S):
        rows = slice(r0, r0 + block.shape[0])
        z, a, e = buffers.views(block.shape)
        _znorm_block(block, r0, z)
        lid[rows] = _truth_log_posterior(z, truth[rows], w, a)
        costs[rows] = _costs_block(z, truth[rows], cal, w, a, e)
    lid += math.log(N)
    lid /= _LN2
    return lid, costs


# ---- the logistic fit ------------------------------------------------------------------------

#: Threads for the fit's passes over the rows: numpy releases the GIL inside its loops.
FIT_THREADS = min(4, os.cpu_count() or 1)
#: Row blocks per task of those passes. The groups, and so the order in which their sums are
#: added, do not depend on the number of threads: neither does the fit, to the last bit.
_GROUP_BLOCKS = 32
#: Non-mated entries sampled for the warm start beside the tail (all mated entries join them).
_WARM_SAMPLE = 1 << 19
#: z above which every non-mated entry joins the warm start's sample: at most 10 % of them
#: (Cantelli), 0.13 % for normal rows, yet they carry most of the gradient.
_TAIL_Z = 3.0
#: Largest change of any t = w·z + b for which a Newton step is taken without evaluating the
#: loss: along such a step every q(1 − q) grows by at most e^0.5, so the step decreases the loss
#: by at least 0.17 times the Newton decrement (Armijo holds; no loss pass is needed).
_SAFE_STEP = 0.5
#: A step that changes no t by more than this is the last: the next would be ~its square.
_LAST_STEP = 1e-5

SumsAt = Callable[[float, float, bool], npt.NDArray[np.float64]]
"""(w, b, with_loss) -> :func:`_logistic_sums` of the data at (w, b)."""


class _Work:
    """Buffers reused by the fit's inner loop. Fresh half-megabyte temporaries per chunk may each
    cost an mmap and its page faults (glibc's threshold moves with the allocation history),
    which made a pass over 10⁸ entries take twice as long."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.buffers = np.empty((5, size))
        self.positive = np.empty(size, dtype=bool)


def _logistic_sums(
    z: np.ndarray, w: float, b: float, *, loss: bool, work: _Work | None = None
) -> npt.NDArray[np.float64]:
    """Σ softplus(t) (0 unless ``loss``), Σ q·z, Σ q, Σ s·z², Σ s·z, Σ s over the flat z, with
    t = w·z + b, q = σ(t), s = q(1 − q), all from one e = exp(−|t|) per entry:
    σ(|t|) = 1/(1 + e), σ(−|t|) = e/(1 + e), s = e/(1 + e)², softplus = max(t, 0) + ln(1 + e).
    Computed in cache-sized chunks."""
    work = work or _Work(max(1, min(z.size, CACHE_ELEMENTS)))
    total = np.zeros(6)
    for i in range(0, z.size, work.size):
        total += _chunk_sums(z[i : i + work.size], w, b, loss=loss, work=work)
    return total


def _chunk_sums(
    z: np.ndarray, w: float, b: float, *, loss: bool, work: _Work
) -> npt.NDArray[np.float64]:
    """:func:`_logistic_sums` of one chunk of at most ``work.size`` entries."""
    t, e, r, q, s = work.buffers[:, : z.size]
    positive = work.positive[: z.size]
    np.multiply(z, w, out=t)
    t += b
    np.abs(t, out=e)
    np.negative(e, out=e)
    np.exp(e, out=e)
    np.add(e, 1.0, out=r)
    np.reciprocal(r, out=r)  # σ(|t|)
    np.multiply(e, r, out=q)  # σ(−|t|)
    np.multiply(q, r, out=s)
    np.greater_equal(t, 0.0, out=positive)
    softplus = float(t.sum(where=positive)) + float(np.log1p(e, out=e).sum()) if loss else 0.0
    np.copyto(q, r, where=positive)  # σ(t)
    sz = np.multiply(s, z, out=r)
    return np.array([softplus, q @ z, q.sum(), sz @ z, sz.sum(), s.sum()])


@dataclass(frozen=True)
class _Penalised:
    """The terms of the penalised NLL Σ softplus(w·z + b) − (w·Σz_mated + b·n_mated) + w²/(2c)
    that are not sums over every entry."""

    n_mated: float
    z_mated_sum: float
    c: float

    def gradient_hessian(
        self, sums: np.ndarray, x: np.ndarray
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Gradient (2,) and Hessian (2, 2) in (w, b) from :func:`_logistic_sums` at x = (w, b)."""
        _, qz, q_sum, szz, sz_sum, s_sum = (float(v) for v in sums)
        gradient = np.array([qz - self.z_mated_sum + x[0] / self.c, q_sum - self.n_mated])
        return gradient, np.array([[szz + 1.0 / self.c, sz_sum], [sz_sum, s_sum]])

    def value(self, sums: np.ndarray, x: np.ndarray) -> float:
        w, b = float(x[0]), float(x[1])
        return float(sums[0]) - (w * self.z_mated_sum + b * self.n_mated) + w * w / (2 * self.c)


def _newton_step(gradient: np.ndarray, hessian: np.ndarray) -> npt.NDArray[np.float64]:
    """H⁻¹g; a scaled gradient step where the Hessian is saturated."""
    (h_ww, h_wb), (_, h_bb) = hessian
    g_w, g_b = gradient
    det = h_ww * h_bb - h_wb * h_wb
    if det > 1e-300 and h_bb > 0:
        return np.array([(h_bb * g_w - h_wb * g_b) / det, (h_ww * g_b - h_wb * g_w) / det])
    return np.array([g_w / h_ww, g_b / max(h_bb, 1.0)])


def _t_change(step: np.ndarray, z_abs_max: float) -> float:
    """Largest change of any t = w·z + b when (w, b) moves by ``step``."""
    return float(abs(step[0]) * z_abs_max + abs(step[1]))


def _newton_logistic(
    sums_at: SumsAt,
    objective: _Penalised,
    z_abs_max: float,
    start: tuple[float, float],
    *,
    model: SumsAt | None = None,
) -> tuple[float, float]:
    """Damped Newton on the penalised logistic NLL in (w, b); strictly convex, so it converges.
    A step that changes no t = w·z + b by more than _SAFE_STEP is taken without a loss
    evaluation (one pass over the data per step), refined on ``model`` (:func:`_refined`) if
    given; larger steps backtrack on the loss (Armijo)."""
    x = np.array(start, dtype=np.float64)
    sums = sums_at(x[0], x[1], False)
    value: float | None = None
    for _ in range(100):
        gradient, hessian = objective.gradient_hessian(sums, x)
        step = _newton_step(gradient, hessian)
        decrement = float(gradient @ step)
        change = _t_change(step, z_abs_max)
        if not decrement > 0 or change == 0:
            break
        if change <= _SAFE_STEP:
            x_new = x - step
            if model is not None:
                x_new = _refined(model, objective, sums, x, x_new, z_abs_max)
            x, value = x_new, None
            if change <= _LAST_STEP:
                break
            sums = sums_at(x[0], x[1], False)
            continue
        if value is None:
            value = objective.value(sums_at(x[0], x[1], True), x)
        scale = 1.0
        while scale > 1e-10:
            x_new = x - scale * step
            new_sums = sums_at(x_new[0], x_new[1], True)
            new_value = objective.value(new_sums, x_new)
            if new_value <= value - 1e-4 * scale * decrement:
                break
            scale *= 0.5
        else:
            break
        x, value, sums = x_new, new_value, new_sums
    return float(x[0]), float(x[1])


def _refined(
    model: SumsAt,
    objective: _Penalised,
    sums: np.ndarray,
    x: np.ndarray,
    x_newton: np.ndarray,
    z_abs_max: float,
) -> npt.NDArray[np.float64]:
    """A Newton step from x refined on the warm start's sample: the minimum of the sample's NLL
    plus the linear and quadratic terms that give it the full data's gradient and Hessian at x
    (from ``sums``). Newton's error is the third-order terms of the full data; this leaves only
    the sample's error in them, so one pass over all entries gains more than a squaring. The
    refinement is kept only if it moves the Newton point by less than half the step."""
    gradient, hessian = objective.gradient_hessian(sums, x)
    model_gradient, model_hessian = objective.gradient_hessian(model(x[0], x[1], False), x)
    shift, curvature = gradient - model_gradient, hessian - model_hessian
    y = x_newton
    for _ in range(10):
        g, h = objective.gradient_hessian(model(y[0], y[1], False), y)
        step = _newton_step(g + shift + curvature @ (y - x), h + curvature)
        y = y - step
        if _t_change(step, z_abs_max) <= 1e-13:
            break
    moved = _t_change(y - x_newton, z_abs_max)
    if not moved <= 0.5 * _t_change(x_newton - x, z_abs_max):
        return x_newton
    return y


@dataclass(frozen=True)
class FitLayout:
    """How the fit cuts a dev matrix of N columns: blocks of ``block_rows`` rows (z-normalised
    one at a time), groups of ``group_rows`` rows (the tasks of its passes, in this process's
    threads or on Dask workers) and chunks of ``chunk`` entries (its sums). Each pass adds the
    groups' sums in row order, so the fit depends on the layout alone, never on who computes
    the groups: it is fixed by :func:`fit_layout` before the first pass and sent with each task."""

    block_rows: int
    group_rows: int
    chunk: int

    def groups(self, T: int) -> list[tuple[int, int]]:
        """Row ranges [g0, g1) of the groups of a matrix of T rows."""
        return [(g0, min(g0 + self.group_rows, T)) for g0 in range(0, T, self.group_rows)]


def fit_layout(N: int) -> FitLayout:
    """The layout of this module's constants (cache-sized blocks, _GROUP_BLOCKS per group)."""
    rows = _block_rows(N)
    return FitLayout(rows, rows * _GROUP_BLOCKS, CACHE_ELEMENTS)


@dataclass
class FitScan:
    """What one pass over rows of the dev matrix gives the fit: the z-norm constants of every
    block, the mated z-scores, the non-mated extremes (separability) and a sample of the
    non-mated entries for the warm start: every one above _TAIL_Z (where the gradient's weight
    lies) and every stride-th one of the rest."""

    scalings: list[list[_RowScaling]]  # per group of rows, per block
    z_mated: npt.NDArray[np.float64]  # (rows,)
    z_non_max: float
    z_non_min: float
    tail: npt.NDArray[np.float64]  # every non-mated z > _TAIL_Z
    sample: npt.NDArray[np.float64]  # every stride-th non-mated z <= _TAIL_Z of the flat matrix


def scan_fit_group(
    S_rows: np.ndarray, truth: np.ndarray, row0: int, stride: int, layout: FitLayout
) -> FitScan:
    """:class:`FitScan` of one group: rows [row0, row0 + n) of the dev matrix (``S_rows``, with
    their truth indices); no tail or sample if ``stride`` is 0. The first pass of the fit."""
    N = S_rows.shape[1]
    scalings, mated, tail, sample = [], np.empty(S_rows.shape[0]), [], []
    z_non_max, z_non_min = -math.inf, math.inf
    buffers = _BlockBuffers(S_rows, layout.block_rows)
    for r, block in _row_blocks(S_rows, step=layout.block_rows):
        r0 = row0 + r
        z, scaling = _znorm_scaling(block, r0, buffers.views(block.shape)[0])
        scalings.append(scaling)
        rows, cols = np.arange(z.shape[0]), truth[r : r + z.shape[0]]
        mated[r : r + z.shape[0]] = z_mated = z[rows, cols]
        z[rows, cols] = -np.inf  # out of the maximum, the tail and the sample
        z_non_max = max(z_non_max, float(z.max()))
        if stride:
            tail.append(z[z > _TAIL_Z])
            strided = z.ravel()[-(r0 * N) % stride :: stride]
            sample.append(strided[(strided <= _TAIL_Z) & (strided > -np.inf)])
        z[rows, cols] = np.inf
        z_non_min = min(z_non_min, float(z.min()))
        z[rows, cols] = z_mated
    tail_z, sample_z = (np.concatenate(x) if x else np.empty(0) for x in (tail, sample))
    return FitScan([scalings], mated, z_non_max, z_non_min, tail_z, sample_z)


def merge_fit_scans(parts: list[FitScan]) -> FitScan:
    """The scan of the whole matrix from its groups' scans, in row order."""
    return FitScan(
        [p.scalings[0] for p in parts],
        np.concatenate([p.z_mated for p in parts]),
        max(p.z_non_max for p in parts),
        min(p.z_non_min for p in parts),
        np.concatenate([p.tail for p in parts]),
        np.concatenate([p.sample for p in parts]),
    )


def fit_group_sums(
    S_rows: np.ndarray,
    row0: int,
    w: float,
    b: float,
    loss: bool,
    layout: FitLayout,
    scalings: list[_RowScaling] | None = None,
) -> npt.NDArray[np.float64]:
    """:func:`_logistic_sums` (6,) at (w, b) of one group, rows [row0, row0 + n) of the dev
    matrix, block by block: the z-scores from the group's kept ``scalings`` (this process) or
    z-normalised again (Dask workers), the same bits either way."""
    total = np.zeros(6)
    size = layout.block_rows * S_rows.shape[1]
    z_buffer, work = np.empty(size), _Work(min(size, layout.chunk))
    blocks = _row_blocks(S_rows, step=layout.block_rows)
    for i, (r, block) in enumerate(blocks):
        out = z_buffer[: block.size].reshape(block.shape)
        if scalings is None:
            z = _znorm_scaling(block, row0 + r, out)[0]
        else:
            z = scalings[i].apply(block, out=out)
        total += _logistic_sums(z.ravel(), w, b, loss=loss, work=work)
    return total


def _scan_for_fit(
    S: np.ndarray, truth: np.ndarray, stride: int, pool: ThreadPoolExecutor, layout: FitLayout
) -> list[FitScan]:
    def scan(group: tuple[int, int]) -> FitScan:
        g0, g1 = group
        return scan_fit_group(S[g0:g1], truth[g0:g1], g0, stride, layout)

    return list(pool.map(scan, layout.groups(S.shape[0])))


def _matrix_sums(
    S: np.ndarray, scan: FitScan, pool: ThreadPoolExecutor, layout: FitLayout
) -> SumsAt:
    """:data:`SumsAt` over every entry of S, block by block from the kept z-norm constants, the
    groups of rows on the pool's threads and their sums added in row order."""
    tasks = list(zip(layout.groups(S.shape[0]), scan.scalings, strict=True))

    def sums_at(w: float, b: float, loss: bool) -> npt.NDArray[np.float64]:
        def group_sums(task: tuple[tuple[int, int], list[_RowScaling]]) -> np.ndarray:
            (g0, g1), scalings = task
            return fit_group_sums(S[g0:g1], g0, w, b, loss, layout, scalings)

        return sum(pool.map(group_sums, tasks), np.zeros(6))

    return sums_at


def check_fit_arguments(T: int, N: int, c: float) -> None:
    """ValueError unless a (T, N) dev matrix and c can be fitted."""
    if T < 1:
        raise ValueError("S_dev has no trials: cannot fit the LID calibration")
    if N < 2:
        raise ValueError("S_dev has N' = 1 identity: no non-mated scores to calibrate against")
    if not (c > 0 and math.isfinite(c)):
        raise ValueError(f"c = {c}: the inverse regularisation strength must be finite and > 0")


def fit_lid_calibration(
    S_dev: np.ndarray, m_dev: np.ndarray, *, c: float = DEFAULT_C
) -> LidCalibration:
    """Fit P(mated | z) = sigmoid(w·z + b) on every dev entry (unweighted; §2.3, §10 A12).

    S_dev (T', N') with N' >= 2, m_dev (T',). Newton's method on the log-likelihood with an L2
    penalty w²/(2c) on w only; with the default c = 1e6 this is the maximum-likelihood fit except
    when the dev data are separable, where the penalty keeps w finite and a warning is issued.
    Each pass z-normalises the rows again in cache-sized blocks: beside S_dev it needs only the
    per-row constants and the warm start's sample, never a (T', N') copy.
    """
    S = check_scores(S_dev, name="S_dev")
    T, N = S.shape
    truth = check_truth(m_dev, T, N)
    check_fit_arguments(T, N, c)
    layout = fit_layout(N)
    with single_threaded_blas(), ThreadPoolExecutor(FIT_THREADS) as pool:
        return fit_lid_passes(
            (T, N),
            lambda stride: _scan_for_fit(S, truth, stride, pool, layout),
            lambda scan: _matrix_sums(S, scan, pool, layout),
            c=c,
        )


def fit_lid_passes(
    shape: tuple[int, int],
    scan_groups: Callable[[int], list[FitScan]],
    matrix_sums: Callable[[FitScan], SumsAt],
    *,
    c: float = DEFAULT_C,
) -> LidCalibration:
    """:func:`fit_lid_calibration` of a (T, N) dev matrix visited by its groups' passes:
    ``scan_groups(stride)`` gives every group's :func:`scan_fit_group` in row order and
    ``matrix_sums(scan)`` the :data:`SumsAt` of the whole matrix (its groups'
    :func:`fit_group_sums` added in row order). In this process's threads or on Dask workers,
    the same passes give the same bits."""
    T, N = shape
    check_fit_arguments(T, N, c)
    n_mated, n_non = T, T * (N - 1)
    log_prior_odds = math.log(n_mated / n_non)
    stride = n_non // _WARM_SAMPLE
    stride = stride if stride >= 4 else 0  # small: no warm start, Newton on all entries
    scan = merge_fit_scans(scan_groups(stride))
    z_mated = scan.z_mated
    if z_mated.min() > scan.z_non_max or z_mated.max() < scan.z_non_min:
        message = (
            f"LID calibration: the dev scores are perfectly separable ({T} trials, N' = {N}); "
            f"the maximum-likelihood weight is infinite, so the L2 penalty (c = {c:g}) sets it"
        )
        warnings.warn(message, SeparableWarning, stacklevel=3)
    z_abs_max = max(abs(scan.z_non_max), abs(scan.z_non_min), float(np.abs(z_mated).max()))
    objective = _Penalised(n_mated, float(z_mated.sum()), c)
    start, model = (0.0, log_prior_odds), None
    if stride:
        model = _sample_sums(scan, n_non)
        start = _newton_logistic(model, objective, z_abs_max, start)
    w, b = _newton_logistic(matrix_sums(scan), objective, z_abs_max, start, model=model)
    return LidCalibration(weight=float(w), bias=float(b), log_prior_odds=log_prior_odds)


def _sample_sums(scan: FitScan, n_non: int) -> SumsAt:
    """:data:`SumsAt` of the warm start: every mated entry, the non-mated tail and the strided
    sample of the other non-mated entries weighted up to their number. Sampling the few
    informative entries in full puts its optimum within ~10⁻³ of the full data's, so Newton
    then needs two or three passes over all entries; the optimum, and so the result, is the
    full data's."""
    weight = (n_non - scan.tail.size) / max(1, scan.sample.size)
    mated, tail, sample = scan.z_mated, scan.tail, scan.sample

    def sums_at(w: float, b: float, loss: bool) -> npt.NDArray[np.float64]:
        exact = _logistic_sums(mated, w, b, loss=loss) + _logistic_sums(tail, w, b, loss=loss)
        return exact + weight * _logistic_sums(sample, w, b, loss=loss)

    return sums_at


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
