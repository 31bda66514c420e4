"""Local information disclosure (LID, paper 003; DESIGN §2).

Each trial row is z-normalised (ddof 0), mapped to LLRs by a logistic calibration fitted on
speaker-disjoint dev data, and turned into a posterior over the N identities by a softmax. Because
the softmax cancels the bias and the prior term, the posterior and LID depend on the weight w only.
Rows are processed in blocks so a 10⁴ × 10⁴ matrix never needs a second full-size temporary.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt
from scipy.special import expit

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


def _znorm_block(block: np.ndarray, row0: int) -> npt.NDArray[np.float64]:
    """z-scores of each row (ddof 0); rows whose scores are all equal become 0.

    z is invariant to scaling a row, so each row is first divided by its largest magnitude:
    scores near 1e308 would overflow the mean and scores near 1e-200 underflow the variance.
    """
    reject_non_finite(block, row0)
    values = np.asarray(block, dtype=np.float64)  # a view when already float64
    high, low = values.max(axis=1), values.min(axis=1)
    constant = (high == low)[:, None]
    scale = np.maximum(np.abs(high), np.abs(low))[:, None]
    scale[scale == 0] = 1.0
    z = values / scale
    z -= z.mean(axis=1, keepdims=True)
    sigma = np.sqrt(np.einsum("ij,ij->i", z, z) / z.shape[1])[:, None]
    sigma[constant | (sigma == 0)] = 1.0
    z /= sigma
    z[np.broadcast_to(constant, z.shape)] = 0.0
    return cast(npt.NDArray[np.float64], z)


def znorm_rows(S: np.ndarray) -> np.ndarray:
    """Row-wise z-normalisation (eq. 2, population std): S (T, N) → Z (T, N) float64."""
    S = check_scores(S)
    Z = np.empty(S.shape, dtype=np.float64)
    step = chunk_rows(S.shape[1])
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
    step = chunk_rows(S.shape[1])
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


def lid_per_trial(S: np.ndarray, m: np.ndarray, weight: float) -> np.ndarray:
    """LID_i = log2(N · P(m_i | row i)) bits (eqs. 5–7): S (T, N), m (T,) → (T,)."""
    S = check_scores(S)
    T, N = S.shape
    truth = check_truth(m, T, N)
    w = _check_weight(weight)
    lid = np.empty(T, dtype=np.float64)
    step = chunk_rows(N)
    for r0 in range(0, T, step):
        log_post = _log_softmax_block(S[r0 : r0 + step], w, r0)
        lid[r0 : r0 + step] = log_post[np.arange(log_post.shape[0]), truth[r0 : r0 + step]]
    lid += math.log(N)
    lid /= _LN2
    return lid


#: Entries per chunk of the logistic fit's sums: (T·N,) temporaries never exist.
_FIT_CHUNK = 1 << 21


def _softplus(t: np.ndarray) -> np.ndarray:
    """ln(1 + e^t), stable, in place of ``t`` (np.logaddexp(0, t) is ~4x slower)."""
    e = np.exp(-np.abs(t))
    np.maximum(t, 0.0, out=t)
    t += np.log1p(e)
    return t


def _logistic_sums(
    z: np.ndarray, w: float, b: float, *, derivatives: bool
) -> tuple[float, np.ndarray | None]:
    """Σ softplus(w·z + b) and, if asked, Σ (q·z, q, s·z², s·z, s) with q = σ(t), s = q(1 − q),
    over the flat z chunk by chunk."""
    total = 0.0
    sums = np.zeros(5) if derivatives else None
    for start in range(0, z.size, _FIT_CHUNK):
        zc = z[start : start + _FIT_CHUNK]
        t = zc * w
        t += b
        if sums is not None:
            q = expit(t)
            s = q * (1.0 - q)
            sz = s * zc
            sums += (np.dot(q, zc), q.sum(), np.dot(sz, zc), sz.sum(), s.sum())
        total += float(_softplus(t).sum())
    return total, sums


def _penalised_nll(
    z: np.ndarray, n_mated: int, z_mated_sum: float, w: float, b: float, c: float
) -> float:
    total, _ = _logistic_sums(z, w, b, derivatives=False)
    return total - (w * z_mated_sum + b * n_mated) + w * w / (2 * c)


def _newton_logistic(
    z: np.ndarray, n_mated: int, z_mated_sum: float, b0: float, c: float, *, w0: float = 0.0
) -> tuple[float, float]:
    """Damped Newton on the penalised logistic NLL in (w, b); strictly convex, so it converges.
    Each accepted step evaluates the loss and the next derivatives in one pass over z."""
    w, b = w0, b0
    total, sums = _logistic_sums(z, w, b, derivatives=True)
    value = total - (w * z_mated_sum + b * n_mated) + w * w / (2 * c)
    for _ in range(100):
        assert sums is not None
        qz, q_sum, szz, sz_sum, s_sum = (float(x) for x in sums)
        g_w, g_b = qz - z_mated_sum + w / c, q_sum - n_mated
        h_ww, h_wb, h_bb = szz + 1.0 / c, sz_sum, s_sum
        det = h_ww * h_bb - h_wb * h_wb
        if det > 1e-300 and h_bb > 0:
            step_w, step_b = (h_bb * g_w - h_wb * g_b) / det, (h_ww * g_b - h_wb * g_w) / det
        else:  # saturated: fall back to a scaled gradient step
            step_w, step_b = g_w / h_ww, g_b / max(h_bb, 1.0)
        decrement = g_w * step_w + g_b * step_b
        if decrement < 1e-12 * max(1.0, abs(value)):
            break
        scale = 1.0
        while scale > 1e-10:
            w_new, b_new = w - scale * step_w, b - scale * step_b
            total, new_sums = _logistic_sums(z, w_new, b_new, derivatives=scale == 1.0)
            new_value = total - (w_new * z_mated_sum + b_new * n_mated) + w_new**2 / (2 * c)
            if new_value <= value - 1e-4 * scale * decrement:
                break
            scale *= 0.5
        else:
            break
        if new_sums is None:
            _, new_sums = _logistic_sums(z, w_new, b_new, derivatives=True)
        w, b, value, sums = w_new, b_new, new_value, new_sums
    return w, b


def fit_lid_calibration(
    S_dev: np.ndarray, m_dev: np.ndarray, *, c: float = DEFAULT_C
) -> LidCalibration:
    """Fit P(mated | z) = sigmoid(w·z + b) on every dev entry (unweighted; §2.3, §10 A12).

    S_dev (T', N') with N' >= 2, m_dev (T',). Newton's method on the log-likelihood with an L2
    penalty w²/(2c) on w only; with the default c = 1e6 this is the maximum-likelihood fit except
    when the dev data are separable, where the penalty keeps w finite and a warning is issued.
    Beside the z-scores (T'·N' float64) it needs only chunk-sized temporaries.
    """
    S = check_scores(S_dev, name="S_dev")
    T, N = S.shape
    truth = check_truth(m_dev, T, N)
    if T < 1:
        raise ValueError("S_dev has no trials: cannot fit the LID calibration")
    if N < 2:
        raise ValueError("S_dev has N' = 1 identity: no non-mated scores to calibrate against")
    if not (c > 0 and math.isfinite(c)):
        raise ValueError(f"c = {c}: the inverse regularisation strength must be finite and > 0")
    Z = znorm_rows(S)
    rows = np.arange(T)
    z_mated = Z[rows, truth].copy()
    Z[rows, truth] = -np.inf
    z_non_max = float(Z.max())
    Z[rows, truth] = np.inf
    z_non_min = float(Z.min())
    Z[rows, truth] = z_mated
    z = Z.ravel()
    n_mated, n_non = T, T * (N - 1)
    log_prior_odds = math.log(n_mated / n_non)
    if z_mated.min() > z_non_max or z_mated.max() < z_non_min:
        message = (
            f"LID calibration: the dev scores are perfectly separable ({T} trials, N' = {N}); "
            f"the maximum-likelihood weight is infinite, so the L2 penalty (c = {c:g}) sets it"
        )
        warnings.warn(message, SeparableWarning, stacklevel=2)
    with single_threaded_blas():
        w0, b0 = _warm_start(Z, truth, z_mated, log_prior_odds, c)
        w, b = _newton_logistic(z, n_mated, float(z_mated.sum()), b0, c, w0=w0)
    return LidCalibration(weight=float(w), bias=float(b), log_prior_odds=log_prior_odds)


def _warm_start(
    Z: np.ndarray, truth: np.ndarray, z_mated: np.ndarray, log_prior_odds: float, c: float
) -> tuple[float, float]:
    """Starting (w, b) for the full fit: the fit on every k-th row (about one chunk of
    entries). Newton then needs two or three passes over all entries instead of ten; the
    optimum, and so the result, is the full data's."""
    stride = Z.size // _FIT_CHUNK
    if stride < 4:
        return 0.0, log_prior_odds
    rows = np.arange(0, Z.shape[0], stride)
    z = Z[rows].ravel()
    return _newton_logistic(z, rows.size, float(z_mated[rows].sum()), log_prior_odds, c)


def calibrated_costs(S: np.ndarray, m: np.ndarray, cal: LidCalibration) -> np.ndarray:
    """Per trial (T, 2): ln(1 + e^−llr) of the mated and Σ ln(1 + e^llr) over the non-mated
    calibrated LLRs (:func:`calibrated_llr`) of S (T, N) with truth m (T,), in nats, computed
    row block by row block. Per-row values do not depend on how the rows are split."""
    S = check_scores(S)
    T, N = S.shape
    truth = check_truth(m, T, N)
    w = _check_weight(cal.weight)
    costs = np.empty((T, 2))
    step = chunk_rows(N)
    for r0 in range(0, T, step):
        llr = _znorm_block(S[r0 : r0 + step], r0)
        llr *= w
        llr += cal.bias - cal.log_prior_odds
        rows, cols = np.arange(llr.shape[0]), truth[r0 : r0 + step]
        costs[r0 : r0 + step, 0] = np.logaddexp(0.0, -llr[rows, cols])
        llr[rows, cols] = -np.inf  # ln(1 + e^-inf) = 0: the mated entries drop out
        costs[r0 : r0 + step, 1] = np.logaddexp(0.0, llr).sum(axis=1)
    return costs


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
