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

import numpy as np
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


def _znorm_block(block: np.ndarray, row0: int) -> np.ndarray:
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
    return z


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


def lid_posteriors(S: np.ndarray, weight: float) -> np.ndarray:
    """P(identity j | row i) (T, N); each row sums to 1."""
    return np.exp(lid_log_posteriors(S, weight))


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


def _penalised_nll(
    z: np.ndarray, n_mated: int, z_mated_sum: float, w: float, b: float, c: float
) -> float:
    t = w * z + b
    return float(np.logaddexp(0.0, t).sum()) - (w * z_mated_sum + b * n_mated) + w * w / (2 * c)


def _newton_logistic(
    z: np.ndarray, n_mated: int, z_mated_sum: float, b0: float, c: float
) -> tuple[float, float]:
    """Damped Newton on the penalised logistic NLL in (w, b); strictly convex, so it converges."""
    w, b = 0.0, b0
    value = _penalised_nll(z, n_mated, z_mated_sum, w, b, c)
    for _ in range(100):
        q = expit(w * z + b)
        s = q * (1.0 - q)
        g_w, g_b = float(np.dot(q, z)) - z_mated_sum + w / c, float(q.sum()) - n_mated
        sz = s * z
        h_ww, h_wb, h_bb = float(np.dot(sz, z)) + 1.0 / c, float(sz.sum()), float(s.sum())
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
            new_value = _penalised_nll(z, n_mated, z_mated_sum, w_new, b_new, c)
            if new_value <= value - 1e-4 * scale * decrement:
                break
            scale *= 0.5
        else:
            break
        w, b, value = w_new, b_new, new_value
    return w, b


def fit_lid_calibration(
    S_dev: np.ndarray, m_dev: np.ndarray, *, c: float = DEFAULT_C
) -> LidCalibration:
    """Fit P(mated | z) = sigmoid(w·z + b) on every dev entry (unweighted; §2.3, §10 A12).

    S_dev (T', N') with N' >= 2, m_dev (T',). Newton's method on the log-likelihood with an L2
    penalty w²/(2c) on w only; with the default c = 1e6 this is the maximum-likelihood fit except
    when the dev data are separable, where the penalty keeps w finite and a warning is issued.
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
    z_mated = Z[np.arange(T), truth]
    mated_mask = np.zeros(S.shape, dtype=bool)
    mated_mask[np.arange(T), truth] = True
    z_non_max = float(np.max(Z, where=~mated_mask, initial=-np.inf))
    z_non_min = float(np.min(Z, where=~mated_mask, initial=np.inf))
    del mated_mask
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
        w, b = _newton_logistic(z, n_mated, float(z_mated.sum()), log_prior_odds, c)
    return LidCalibration(weight=float(w), bias=float(b), log_prior_odds=log_prior_odds)


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
