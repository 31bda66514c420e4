"""``combined``: the fused score Σ_f w_f·z_f and the fit of its weights on dev trials (summed
over fixed row blocks, so the weights are the same wherever the blocks run)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)


def fuse_scores(scores: Mapping[str, np.ndarray], weights: Mapping[str, float]) -> np.ndarray:
    """``combined`` score Σ_f w_f·znorm_rows(S_f): (T, N) per feature -> (T, N).

    The sum of calibrated per-feature LLRs up to per-row constants (which cancel in ranks and
    in the softmax), i.e. naive-Bayes fusion of independent features.
    """
    from monitor.disclosure.lid import znorm_rows

    missing = sorted(set(scores) - set(weights))
    if missing:
        raise ValueError(f"no fusion weight for feature(s) {missing}")
    if not scores:
        raise ValueError("fuse_scores needs at least one feature")
    shapes = {np.shape(s) for s in scores.values()}
    if len(shapes) != 1:
        raise ValueError(f"score matrices differ in shape: {sorted(shapes)}")
    return sum(
        (
            float(weights[name]) * znorm_rows(np.asarray(s, dtype=np.float64))
            for name, s in scores.items()
        ),
        start=np.zeros(shapes.pop()),
    )


def fusion_sums(
    scores: Mapping[str, np.ndarray], truth: np.ndarray, w: np.ndarray
) -> npt.NDArray[np.float64]:
    """Sums over the rows of one block of the fusion objective's terms: (1 + F,) with
    Σ_t ln softmax_j(s_tj)[m_t] and, per feature f, Σ_t (z_f[t, m_t] − Σ_j p_tj·z_f[t, j]), for
    s = Σ_f w_f·z_f and p = softmax(s). Per-row arithmetic only, so a block's sums are the same
    wherever it is computed (this process or a Dask worker)."""
    from scipy.special import log_softmax

    from monitor.disclosure.lid import znorm_rows

    Z = [znorm_rows(np.asarray(S, dtype=np.float64)) for S in scores.values()]
    rows = np.arange(Z[0].shape[0])
    s = Z[0] * w[0]
    for weight, z in zip(w[1:], Z[1:], strict=True):
        s += weight * z
    log_p = log_softmax(s, axis=1)
    p = np.exp(log_p)
    out = np.empty(1 + len(Z))
    out[0] = log_p[rows, truth].sum()
    for f, z in enumerate(Z, start=1):
        out[f] = (z[rows, truth] - np.einsum("tn,tn->t", p, z)).sum()
    return out


FusionSums = Callable[[np.ndarray], list[npt.NDArray[np.float64]]]
"""w (F,) -> :func:`fusion_sums` of every row block of the dev trials, in row order."""


def fusion_blocks(T: int, N: int) -> list[tuple[int, int]]:
    """The row blocks of the fusion objective: the LID fit's row groups (bounded in size)."""
    from monitor.calibration.lid_fit import fit_layout

    return fit_layout(N).groups(T)


def fit_fusion_sums(names: Sequence[str], T: int, block_sums: FusionSums) -> dict[str, float]:
    """:func:`fit_fusion_weights` from the objective's per-block sums (``block_sums``), added
    in row order: the same weights whether the blocks run here or on Dask workers."""
    from scipy.optimize import minimize

    def objective(w: np.ndarray) -> tuple[float, np.ndarray]:
        total = sum(block_sums(w), np.zeros(1 + len(names)))
        value = -float(total[0]) / T
        grad = -total[1:] / T
        return value + 1e-6 * float(w @ w), grad + 2e-6 * w

    bounds = [(0.0, None)] * len(names)
    result = minimize(objective, np.ones(len(names)), jac=True, method="L-BFGS-B", bounds=bounds)
    return {name: float(w) for name, w in zip(names, result.x, strict=True)}


def fit_fusion_weights(scores: Mapping[str, np.ndarray], truth: np.ndarray) -> dict[str, float]:
    """Weights w_f maximising the mean log posterior of the true identity under
    softmax_j(Σ_f w_f·z_f) on dev trials: {f: (T, N)} scores, truth (T,) → {f: w_f}.

    This is the multinomial (1-of-N) logistic fusion of the z-normalised scores: the LID
    objective itself, concave in w, so correlated features are not double-counted as
    they are when each feature's separately fitted weight is used. The objective is summed
    over fixed row blocks (:func:`fusion_blocks`), as Dask workers sum it.

    Every weight is held ≥ 0: a feature may be ignored, never subtracted. A negative weight
    would read "sounds like this speaker's phones → less likely this speaker", which no
    feature is evidence of: it is the optimiser exploiting the overlap of correlated features
    on the dev speakers (the phone network is trained on the same filterbanks as CAM++), a
    fit to those speakers that need not carry to others, and it would make ``combined``
    fall as a feature's own evidence for the true speaker rises.
    """
    names = list(scores)
    if not names:
        raise ValueError("fit_fusion_weights needs at least one feature")
    shapes = {np.shape(scores[n]) for n in names}
    if len(shapes) != 1:
        raise ValueError(f"score matrices differ in shape: {sorted(shapes)}")
    T, N = shapes.pop()
    m = np.asarray(truth)
    if m.shape != (T,):
        raise ValueError(f"truth has shape {m.shape}, expected ({T},)")
    if N < 2 or T < 1:
        raise ValueError(f"fusion needs N >= 2 identities and trials, got (T, N) = ({T}, {N})")
    blocks = fusion_blocks(T, N)

    def block_sums(w: np.ndarray) -> list[npt.NDArray[np.float64]]:
        return [fusion_sums({n: scores[n][g0:g1] for n in names}, m[g0:g1], w) for g0, g1 in blocks]

    return fit_fusion_sums(names, T, block_sums)
