"""Similarity rank disclosure (SRD, paper 000).

The disclosure of rank k is ``log2(N·p_k)`` bits, where p is the normalised rank histogram or the
beta-binomial model ``(rank − 1) ~ BetaBinomial(N − 1, α, β)``. The model is fitted in log space
(u = ln α, v = ln β, clipped to [−12, 12]) with analytic gradients and several starts, because the
losses of the paper are not convex and the paper's own fits sometimes stopped early.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize
from scipy.special import digamma, gammaln, logsumexp

from monitor.disclosure.ranks import single_threaded_blas, tie_groups

Loss = Literal["ll", "ms", "wms", "rwms", "cll"]
LOSSES: tuple[str, ...] = ("ll", "ms", "wms", "rwms", "cll")
LOG_PARAM_BOUND = 12.0
CLL_PENALTY = 1e5
# p_k within this relative distance of 1/N counts as equal to it in Spread (strict '>'):
# the model's γ_k = 1/N at α = β = 1 comes out as 0.1 + 1e-17, which is not "above" chance.
SPREAD_RTOL = 1e-9
_STARTS: tuple[tuple[float, float], ...] = ((1.0, 1.0), (0.5, 2.0), (0.2, 5.0), (0.1, 20.0))
_LN2 = math.log(2.0)


def _check_model(N: int, alpha: float, beta: float) -> int:
    if int(N) != N or N < 1:
        raise ValueError(f"N = {N}: the number of identities must be an integer >= 1")
    for name, value in (("alpha", alpha), ("beta", beta)):
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"{name} = {value}: beta-binomial parameters must be finite and > 0")
    return int(N)


def _log_choose(N: int) -> npt.NDArray[np.float64]:
    j = np.arange(N, dtype=np.float64)
    return cast(npt.NDArray[np.float64], gammaln(N) - gammaln(j + 1.0) - gammaln(N - j))


def betabinom_logpmf(N: int, alpha: float, beta: float) -> npt.NDArray[np.float64]:
    """ln γ_k for k = 1..N as an (N,) array (natural log; exact in the tails, no underflow)."""
    N = _check_model(N, alpha, beta)
    j = np.arange(N, dtype=np.float64)
    n = N - 1
    return cast(
        npt.NDArray[np.float64],
        (
            _log_choose(N)
            + gammaln(j + alpha)
            + gammaln(n - j + beta)
            - gammaln(n + alpha + beta)
            - (gammaln(alpha) + gammaln(beta) - gammaln(alpha + beta))
        ),
    )


def betabinom_pmf(N: int, alpha: float, beta: float) -> npt.NDArray[np.float64]:
    """γ (N,): probability of rank k = 1..N, i.e. scipy ``betabinom.pmf(k−1, N−1, α, β)``."""
    return cast(npt.NDArray[np.float64], np.exp(betabinom_logpmf(N, alpha, beta)))


def _normalise(p_or_hist: np.ndarray, name: str) -> npt.NDArray[np.float64]:
    p = np.asarray(p_or_hist, dtype=np.float64)
    if p.ndim != 1 or p.size < 1:
        raise ValueError(f"{name} must be a non-empty 1-D (N,) array, got shape {p.shape}")
    if not np.isfinite(p).all():
        raise ValueError(f"{name} contains NaN/inf")
    if (p < 0).any():
        i = int(np.flatnonzero(p < 0)[0])
        raise ValueError(f"{name}[{i}] = {p[i]} is negative")
    total = p.sum()
    if total <= 0:
        raise ValueError(f"{name} is empty (sums to 0): no trials, so no rank distribution")
    return cast(npt.NDArray[np.float64], p / total)


@dataclass(frozen=True)
class SrdStats:
    """Summary of a rank distribution. Bits for MeanD/MaxD/StDD; fractions otherwise."""

    MeanD: float  # mean disclosure = log2 N − H(p) = KL(p ‖ uniform), bits
    IdR: float  # identification rate p_1
    MaxD: float  # largest disclosure over ranks with p_k > 0, bits
    StDD: float  # standard deviation of the per-observation disclosure, bits
    Spread: float  # fraction of ranks with p_k > 1/N (strict)
    N: int  # number of identities (the histogram length)


def rank_disclosure(p: np.ndarray) -> npt.NDArray[np.float64]:
    """ε_k = log2(N·p_k) bits (N,), −inf where p_k = 0; ``p`` may be an unnormalised histogram."""
    q = _normalise(p, "p")
    with np.errstate(divide="ignore"):
        return cast(npt.NDArray[np.float64], np.log2(q.size * q))


def srd_stats(p_or_hist: np.ndarray) -> SrdStats:
    """MeanD, IdR, MaxD, StDD, Spread of a histogram or model p (N,); 0·(−inf) counts as 0."""
    p = _normalise(p_or_hist, "p_or_hist")
    N = p.size
    present = p > 0
    q = p[present]
    eps = np.log2(N * q)
    mean = float(np.dot(q, eps))
    spread_floor = (1.0 / N) * (1.0 + SPREAD_RTOL)
    return SrdStats(
        MeanD=max(0.0, mean),  # = KL(p ‖ uniform) >= 0; rounding gave -6e-17 ("-0.000 bits")
        IdR=float(p[0]),
        MaxD=float(eps.max()),
        StDD=float(math.sqrt(max(0.0, float(np.dot(q, (eps - mean) ** 2))))),
        Spread=float(np.count_nonzero(p > spread_floor) / N),
        N=N,
    )


@dataclass(frozen=True)
class RankFit:
    """A beta-binomial rank model fitted to a histogram."""

    loss: str  # "ll", "ms", "wms", "rwms" or "cll"
    alpha: float
    beta: float
    KL_bits: float  # KL(p~ ‖ γ) in bits
    rank1_match_bits: float  # |log2(p~_1 / γ_1)|; inf when p~_1 = 0
    at_bound: bool  # ln α or ln β reached ±12: the optimum lies outside the searched box
    stats: SrdStats  # statistics of the fitted model γ


def _loss_function(p: np.ndarray, loss: str) -> Callable[[np.ndarray], tuple[float, np.ndarray]]:
    """Loss(u, v) and its gradient for histogram p, via d ln γ / d ln α and d ln γ / d ln β."""
    N = p.size
    n = N - 1
    j = np.arange(N, dtype=np.float64)
    log_choose = _log_choose(N)
    present = p > 0
    if loss in ("ms", "wms", "rwms"):
        weights = {"ms": np.ones(N), "wms": p, "rwms": np.exp(-(j + 1.0))}[loss]
        scale = float(np.dot(weights, p * p))  # loss at γ = 0: puts every loss on an O(1) scale
        scale = scale if scale > 0 else 1.0

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        a, b = np.exp(np.clip(x, -LOG_PARAM_BOUND, LOG_PARAM_BOUND))
        log_g = (
            log_choose
            + gammaln(j + a)
            + gammaln(n - j + b)
            - gammaln(n + a + b)
            - (gammaln(a) + gammaln(b) - gammaln(a + b))
        )
        common = digamma(a + b) - digamma(n + a + b)
        d_u = a * (digamma(j + a) - digamma(a) + common)
        d_v = b * (digamma(n - j + b) - digamma(b) + common)
        if loss in ("ll", "cll"):
            value = -float(np.dot(p[present], log_g[present]))
            grad = -np.array([np.dot(p, d_u), np.dot(p, d_v)])
            if loss == "cll":
                g1 = math.exp(log_g[0])
                value += CLL_PENALTY * (p[0] - g1) ** 2
                grad -= 2.0 * CLL_PENALTY * (p[0] - g1) * g1 * np.array([d_u[0], d_v[0]])
            return value, grad
        g = np.exp(log_g)
        residual = p - g
        value = float(np.dot(weights, residual * residual)) / scale
        coef = -2.0 * weights * residual * g / scale
        return value, np.array([np.dot(coef, d_u), np.dot(coef, d_v)])

    return objective


def _moment_start(p: np.ndarray) -> tuple[float, float] | None:
    """Method-of-moments (α, β) for rank − 1 ~ BetaBinomial(N − 1), or None if not positive."""
    n = p.size - 1
    j = np.arange(p.size, dtype=np.float64)
    m1 = float(np.dot(p, j))
    m2 = float(np.dot(p, j * j))
    if n < 1 or m1 <= 0:
        return None
    denom = n * (m2 / m1 - m1 - 1.0) + m1
    if denom == 0:
        return None
    alpha = (n * m1 - m2) / denom
    beta = (n - m1) * (n - m2 / m1) / denom
    if not (np.isfinite(alpha) and np.isfinite(beta) and alpha > 0 and beta > 0):
        return None
    return alpha, beta


def fit_rank_model(hist: np.ndarray, *, loss: Loss = "ll") -> RankFit:
    """Fit (rank − 1) ~ BetaBinomial(N − 1, α, β) to a rank histogram (N,) with one of the losses.

    "ll" minimises KL(p~ ‖ γ) and suits sparse (per-speaker) histograms; "cll" adds a 1e5-weighted
    rank-1 penalty and suits dense pooled ones. N = 1 gives α = β = 1 (γ_1 = 1 anyway).
    """
    if loss not in LOSSES:
        raise ValueError(f"loss={loss!r}; expected one of {', '.join(LOSSES)}")
    p = _normalise(hist, "hist")
    N = p.size
    if N == 1:
        alpha = beta = 1.0
        at_bound = False
    else:
        objective = _loss_function(p, loss)
        starts = list(_STARTS)
        moments = _moment_start(p)
        if moments is not None:
            starts.append(moments)
        bounds = [(-LOG_PARAM_BOUND, LOG_PARAM_BOUND)] * 2
        best_x, best_f = None, math.inf
        with single_threaded_blas():
            for a0, b0 in starts:
                x0 = np.clip(np.log([a0, b0]), -LOG_PARAM_BOUND, LOG_PARAM_BOUND)
                result = minimize(
                    objective,
                    x0,
                    jac=True,
                    method="L-BFGS-B",
                    bounds=bounds,
                    options={"maxiter": 500, "ftol": 1e-15, "gtol": 1e-11},
                )
                if np.isfinite(result.fun) and result.fun < best_f:
                    best_x, best_f = result.x, float(result.fun)
        if best_x is None:
            raise ValueError(f"beta-binomial fit with loss {loss!r} failed from every start")
        alpha, beta = (float(v) for v in np.exp(best_x))
        at_bound = bool(np.any(np.abs(best_x) >= LOG_PARAM_BOUND - 1e-6))
    log_g = betabinom_logpmf(N, alpha, beta)
    present = p > 0
    kl = float(np.dot(p[present], np.log(p[present]) - log_g[present])) / _LN2
    r1 = abs(math.log(p[0]) - float(log_g[0])) / _LN2 if p[0] > 0 else math.inf
    return RankFit(
        loss=loss,
        alpha=alpha,
        beta=beta,
        KL_bits=max(0.0, kl),
        rank1_match_bits=r1,
        at_bound=at_bound,
        stats=srd_stats(np.exp(log_g)),
    )


def identity_posterior(scores: np.ndarray, p: np.ndarray) -> npt.NDArray[np.float64]:
    """P(identity h | scores) = p[rank(h) − 1]: scores (..., N), p (N,) → (..., N).

    Tied identities share the mass of the ranks they jointly occupy, so every row sums to 1.
    """
    q = _normalise(p, "p")
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim < 1 or s.shape[-1] != q.size:
        raise ValueError(f"scores have shape {s.shape}; the last axis must be N = {q.size}")
    start, end = tie_groups(s)
    cumulative = np.concatenate(([0.0], np.cumsum(q)))
    return cast(npt.NDArray[np.float64], (cumulative[end] - cumulative[start]) / (end - start))


def joint_posterior(posteriors: np.ndarray) -> npt.NDArray[np.float64]:
    """Normalised product of F independent features' posteriors (F, N) → (N,)."""
    P = np.asarray(posteriors, dtype=np.float64)
    if P.ndim != 2 or P.shape[0] < 1 or P.shape[1] < 1:
        raise ValueError(f"posteriors must have shape (F, N) with F, N >= 1, got {P.shape}")
    if not np.isfinite(P).all() or (P < 0).any():
        raise ValueError("posteriors must be finite and non-negative")
    with np.errstate(divide="ignore"):
        log_joint = np.log(P).sum(axis=0)
    if not np.isfinite(log_joint).any():
        raise ValueError("every identity has probability 0 under some feature: no joint posterior")
    return cast(npt.NDArray[np.float64], np.exp(log_joint - logsumexp(log_joint)))
