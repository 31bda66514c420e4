"""Differential-privacy composition bounds for k = ``steps`` (ε, δ)-DP releases.

ε is in nats throughout. Every bound is vectorised over an array of step counts and evaluated in
log space (gammaln, logaddexp), so the optimal bound works at 10⁴–10⁶ steps where
e^{k·ε} and C(k, l) overflow a float.
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln

LN2 = math.log(2.0)
#: Elements per work array in ``optimal`` (rows of steps × half-range of l).
_CHUNK_ELEMENTS = 4_000_000
#: ``optimal`` holds O(k) terms for one k: 10⁷ steps take about 0.5 GB and 2 s; beyond that a
#: user's typo would exhaust memory, so larger k is refused.
MAX_OPTIMAL_STEPS = 10_000_000
#: Largest ε per release that ``voxmeter compose`` accepts: 100 nats is 144 bits per release,
#: beyond what any population can disclose (log2 of 10¹⁰ people is 33 bits); up to it, every
#: bound is finite for up to MAX_OPTIMAL_STEPS steps and any δ.
MAX_EPSILON_NATS = 100.0


def _check_eps(eps: float) -> float:
    eps = float(eps)
    if not (math.isfinite(eps) and eps > 0.0):
        raise ValueError(f"epsilon must be a finite number > 0, got {eps}")
    return eps


def _check_delta(delta: float) -> float:
    delta = float(delta)
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    return delta


def _check_steps(steps: np.ndarray | int | list[int]) -> np.ndarray:
    array = np.asarray(steps)
    if array.size == 0:
        raise ValueError("steps: empty")
    as_float = array.astype(np.float64)
    if np.any(as_float != np.round(as_float)) or np.any(as_float < 1):
        raise ValueError(f"steps must be integers >= 1, got {array.ravel().tolist()[:5]}")
    return as_float.astype(np.int64)


def basic(eps: float, steps: np.ndarray | int) -> np.ndarray:
    """Basic composition: k·ε nats (δ composes to k·δ)."""
    return _check_steps(steps) * _check_eps(eps)


def drv(eps: float, steps: np.ndarray | int, delta: float) -> npt.NDArray[np.float64]:
    """Dwork–Rothblum–Vadhan advanced composition: sqrt(2k ln(1/δ'))·ε + k·ε·(e^ε - 1)."""
    eps, delta = _check_eps(eps), _check_delta(delta)
    k = _check_steps(steps).astype(np.float64)
    with np.errstate(over="ignore"):  # e^ε overflows past ε ≈ 709: the bound is then +inf
        growth = np.expm1(eps)
    return cast(
        npt.NDArray[np.float64], np.sqrt(2.0 * k * -math.log(delta)) * eps + k * eps * growth
    )


def kairouz_advanced(eps: float, steps: np.ndarray | int, delta: float) -> np.ndarray:
    """Kairouz–Oh–Viswanath Thm 3.4: the minimum of its three terms (paper 004 Table 7)."""
    eps, delta = _check_eps(eps), _check_delta(delta)
    k = _check_steps(steps).astype(np.float64)
    g = k * eps * math.tanh(eps / 2.0)  # = k ε (e^ε - 1)/(e^ε + 1)
    with np.errstate(over="ignore"):  # absurd ε (~1e300): a term is +inf, the minimum is k·ε
        second = g + eps * np.sqrt(2.0 * k * np.log(math.e + np.sqrt(k * eps * eps) / delta))
    third = g + eps * np.sqrt(2.0 * k * -math.log(delta))
    return np.minimum(k * eps, np.minimum(second, third))


def _log1mexp(x: np.ndarray) -> npt.NDArray[np.float64]:
    """ln(1 - e^x) for x <= 0, accurate near 0 and for very negative x."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return cast(
            npt.NDArray[np.float64], np.where(x > -LN2, np.log(-np.expm1(x)), np.log1p(-np.exp(x)))
        )


def _half_terms(eps: float, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative log A_i and log B_i over l = 0..L-1, shape (len(k), L), L = max ceil(k/2).

    A_l = C(k,l) e^{(k-l)ε}/(1+e^ε)^k and B_l = C(k,l) e^{lε}/(1+e^ε)^k, so the δ of Thm 3.3 on
    the piece where l <= i contributes is δ(e) = ΣA - e^e·ΣB. Entries with 2l >= k are -inf.
    """
    length = int(np.max((k + 1) // 2))
    ell = np.arange(length, dtype=np.float64)[None, :]
    kk = k.astype(np.float64)[:, None]
    valid = 2.0 * ell < kk
    log_norm = kk * np.logaddexp(0.0, eps)
    log_comb = gammaln(kk + 1.0) - gammaln(ell + 1.0) - gammaln(np.maximum(kk - ell, 0.0) + 1.0)
    log_a = np.where(valid, log_comb + (kk - ell) * eps - log_norm, -np.inf)
    log_b = np.where(valid, log_comb + ell * eps - log_norm, -np.inf)
    return np.logaddexp.accumulate(log_a, axis=1), np.logaddexp.accumulate(log_b, axis=1)


def _log_delta_at(
    log_cum_a: np.ndarray, log_cum_b: np.ndarray, e: np.ndarray
) -> npt.NDArray[np.float64]:
    """ln δ(e) = ln(ΣA - e^e ΣB), elementwise; -inf where the sums are empty or cancel."""
    with np.errstate(invalid="ignore"):
        ratio = np.where(np.isfinite(log_cum_a), e + log_cum_b - log_cum_a, -np.inf)
        return cast(npt.NDArray[np.float64], log_cum_a + _log1mexp(np.minimum(ratio, 0.0)))


def theorem33_points(eps: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Thm 3.3 region corners ((k-2i)·ε, δ_i) for i = 0..floor(k/2), base δ = 0."""
    eps = _check_eps(eps)
    k_arr = _check_steps(np.array([k]))
    kk = int(k_arr[0])
    i = np.arange(kk // 2 + 1)
    eps_i = (kk - 2 * i) * eps
    if kk == 1:
        return eps_i.astype(np.float64), np.zeros(1)
    log_cum_a, log_cum_b = _half_terms(eps, k_arr)
    # δ_i sums l = 0..i-1: cumulative index i-1 (i = 0 is the empty sum).
    index = np.clip(i - 1, 0, log_cum_a.shape[1] - 1)
    log_delta = _log_delta_at(log_cum_a[0, index], log_cum_b[0, index], eps_i)
    delta_i = np.where(i == 0, 0.0, np.exp(log_delta))
    return eps_i.astype(np.float64), delta_i


def _optimal_chunk(eps: float, k: np.ndarray, log_target: float) -> npt.NDArray[np.float64]:
    log_cum_a, log_cum_b = _half_terms(eps, k)
    length = log_cum_a.shape[1]
    j = np.arange(length)[None, :]
    kk = k[:, None].astype(np.float64)
    # δ at the breakpoint e_j = (k - 2j)ε sums l < j, i.e. cumulative index j - 1.
    corner_e = (kk - 2.0 * j) * eps
    shifted_a = np.concatenate([np.full((k.size, 1), -np.inf), log_cum_a[:, :-1]], axis=1)
    shifted_b = np.concatenate([np.full((k.size, 1), -np.inf), log_cum_b[:, :-1]], axis=1)
    corner_log_delta = _log_delta_at(shifted_a, shifted_b, corner_e)
    corner_log_delta = np.where(corner_e > 0.0, corner_log_delta, np.inf)
    # δ(e) decreases in e, so the corners' δ increase with j; the answer lies on the piece of
    # the largest corner j* still meeting the target: l = 0..j* contribute there.
    j_star = np.sum(corner_log_delta <= log_target, axis=1) - 1
    rows = np.arange(k.size)
    la, lb = log_cum_a[rows, j_star], log_cum_b[rows, j_star]
    # Solve ΣA - e^e ΣB = target for e on that piece: e = ln(ΣA - target) - ln ΣB.
    with np.errstate(invalid="ignore"):
        e = la + _log1mexp(np.minimum(log_target - la, 0.0)) - lb
    lower = np.maximum((k - 2.0 * (j_star + 1)) * eps, 0.0)
    upper = (k - 2.0 * j_star) * eps
    return cast(
        npt.NDArray[np.float64], np.clip(np.nan_to_num(e, nan=0.0, neginf=0.0), lower, upper)
    )


def optimal(eps: float, steps: np.ndarray | int, delta: float) -> np.ndarray:
    """Optimal composition (Kairouz–Oh–Viswanath Thm 3.3, continuous in δ).

    The smallest ε* with δ(ε*) <= delta for k-fold composition of ε-DP (base δ = 0). On each
    piece between Thm 3.3's corners δ(e) = ΣA - e^e·ΣB, so ε* is found in closed form on the
    piece located by comparing the corners' δ with the target: no bisection, all in log space.
    """
    eps, delta = _check_eps(eps), _check_delta(delta)
    k = _check_steps(steps)
    if k.max() > MAX_OPTIMAL_STEPS:
        raise ValueError(
            f"steps = {int(k.max())}: the optimal bound is computed for at most "
            f"{MAX_OPTIMAL_STEPS} steps (its memory grows with the steps)"
        )
    flat = k.ravel()
    out = np.empty(flat.size)
    # Sorted steps keep each chunk's padding (up to its largest k) small.
    order = np.argsort(flat)
    half = (flat[order] + 1) // 2
    start = 0
    while start < flat.size:
        fits = np.arange(1, flat.size - start + 1) * half[start:] <= _CHUNK_ELEMENTS
        stop = start + max(1, int(np.sum(fits)))  # fits is True then False: r·half grows with r
        index = order[start:stop]
        out[index] = _optimal_chunk(eps, flat[index], math.log(delta))
        start = stop
    return out.reshape(k.shape)


def nats_to_bits(x: np.ndarray | float) -> np.ndarray | float:
    """Convert nats to bits (÷ ln 2)."""
    return np.asarray(x, dtype=np.float64) / LN2


def dp_disclosure_cap_bits(eps: np.ndarray | float, N: int) -> npt.NDArray[np.float64]:
    """Largest disclosure an ε-DP release allows about one of N identities:
    log2(N e^ε / (e^ε + N - 1)) bits, <= min(ε·log2 e, log2 N)."""
    if N < 1:
        raise ValueError(f"N must be >= 1, got {N}")
    eps = np.asarray(eps, dtype=np.float64)
    if N == 1:
        return np.zeros_like(eps)
    return cast(
        npt.NDArray[np.float64], (math.log(N) + eps - np.logaddexp(eps, math.log(N - 1))) / LN2
    )
