"""Fitting the LID calibration (paper 003 eq. 3): the unweighted logistic on the
row-z-normalised dev scores, LLR = w·z + b − ln(N_mated / N_nonmated).

The fit never stores the (T, N) z-scores: one pass keeps the z-norm constants of each row
(re-applied bit for bit), the mated z, the non-mated extremes and a warm-start sample; Newton
then passes over all entries in fixed row groups (:func:`fit_layout`) whose sums are added in
row order, so the fit is the same bits on this process's threads or on Dask workers
(:func:`scan_fit_group`, :func:`fit_group_sums`, :func:`fit_lid_passes`). The metric itself
(z-norm, posteriors, LID per trial) is :mod:`monitor.disclosure.lid`.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.disclosure import lid
from monitor.disclosure.lid import LidCalibration
from monitor.disclosure.ranks import (
    check_scores,
    check_truth,
    single_threaded_blas,
)

logger = logging.getLogger(__name__)


class SeparableWarning(RuntimeWarning):
    """The dev scores are perfectly separable: the LID weight is set by the L2 penalty.
    Callers that fit many calibrations collect these and report each feature once."""


DEFAULT_C = 1e6  # inverse L2 strength on w (scikit-learn's C): nearly maximum likelihood
DEFAULT_C = 1e6  # inverse L2 strength on w (scikit-learn's C): nearly maximum likelihood

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
    work = work or _Work(max(1, min(z.size, lid.CACHE_ELEMENTS)))
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
    rows = lid.block_rows(N)
    return FitLayout(rows, rows * _GROUP_BLOCKS, lid.CACHE_ELEMENTS)


@dataclass
class FitScan:
    """What one pass over rows of the dev matrix gives the fit: the z-norm constants of every
    block, the mated z-scores, the non-mated extremes (separability) and a sample of the
    non-mated entries for the warm start: every one above _TAIL_Z (where the gradient's weight
    lies) and every stride-th one of the rest."""

    scalings: list[list[lid.RowScaling]]  # per group of rows, per block
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
    buffers = lid.BlockBuffers(S_rows, layout.block_rows)
    for r, block in lid.row_blocks(S_rows, step=layout.block_rows):
        r0 = row0 + r
        z, scaling = lid.znorm_scaling(block, r0, buffers.views(block.shape)[0])
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
    scalings: list[lid.RowScaling] | None = None,
) -> npt.NDArray[np.float64]:
    """:func:`_logistic_sums` (6,) at (w, b) of one group, rows [row0, row0 + n) of the dev
    matrix, block by block: the z-scores from the group's kept ``scalings`` (this process) or
    z-normalised again (Dask workers), the same bits either way."""
    total = np.zeros(6)
    size = layout.block_rows * S_rows.shape[1]
    z_buffer, work = np.empty(size), _Work(min(size, layout.chunk))
    blocks = lid.row_blocks(S_rows, step=layout.block_rows)
    for i, (r, block) in enumerate(blocks):
        out = z_buffer[: block.size].reshape(block.shape)
        if scalings is None:
            z = lid.znorm_scaling(block, row0 + r, out)[0]
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
        def group_sums(task: tuple[tuple[int, int], list[lid.RowScaling]]) -> np.ndarray:
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
    """Fit P(mated | z) = sigmoid(w·z + b) on every dev entry (unweighted).

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
