"""Ranks of the true identity and rank histograms.

A score matrix ``S`` has shape (T, N): T trials scored against N templates, larger = more similar.
Ranks are 1-based (rank 1 = most similar). Ranks are found by counting, per row, the scores above
and equal to the true score, one block of rows at a time, so a 10⁴ × 10⁴ matrix needs only a few
tens of MB beyond the matrix itself (no argsort, no (T, N) temporaries).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Literal, cast

import numpy as np

try:  # arrives with librosa → scikit-learn; everything works without it, only slower
    from threadpoolctl import ThreadpoolController
except ImportError:  # pragma: no cover
    ThreadpoolController = None

TieRule = Literal["fractional", "optimistic", "pessimistic", "random"]
TIE_RULES: tuple[str, ...] = ("fractional", "optimistic", "pessimistic", "random")

# About 4 M scores (32 MB of float64) per block: large enough to amortise Python overhead,
# small enough that a handful of block-sized temporaries stay well under 4 GB.
CHUNK_ELEMENTS = 1 << 22


def chunk_rows(n_columns: int) -> int:
    """Rows per block for a matrix with ``n_columns`` columns."""
    return max(1, CHUNK_ELEMENTS // max(1, n_columns))


@functools.cache
def _blas_controller() -> object | None:
    return ThreadpoolController() if ThreadpoolController is not None else None


def single_threaded_blas() -> contextlib.AbstractContextManager[object]:
    """Limit BLAS to one thread: L-BFGS-B on 2 parameters makes thousands of tiny BLAS calls, and
    OpenBLAS threads spinning on a busy machine made each fit 5–40× slower."""
    controller = _blas_controller()
    if controller is None:
        return contextlib.nullcontext()
    limited = controller.limit(limits=1, user_api="blas")  # type: ignore[attr-defined]
    return cast(contextlib.AbstractContextManager[object], limited)


def check_scores(scores: np.ndarray, *, name: str = "scores") -> np.ndarray:
    """Return ``scores`` as a 2-D float array with at least one column; shape errors raise."""
    S = np.asarray(scores)
    if S.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (T, N) matrix, got shape {S.shape}")
    if S.shape[1] < 1:
        raise ValueError(f"{name} has N = 0 identities; at least one template is needed")
    if not np.issubdtype(S.dtype, np.number) or np.iscomplexobj(S):
        raise ValueError(f"{name} must be real numbers, got dtype {S.dtype}")
    return S


def check_truth(truth: np.ndarray, n_trials: int, n_identities: int) -> np.ndarray:
    """Return ``truth`` as an int64 (T,) array of indices in [0, N)."""
    m = np.asarray(truth)
    if m.ndim != 1 or m.shape[0] != n_trials:
        raise ValueError(f"truth must have shape ({n_trials},), got {m.shape}")
    integral = np.issubdtype(m.dtype, np.integer)
    if m.size and not integral and not np.all(np.equal(np.mod(m, 1), 0)):
        raise ValueError(f"truth must hold integer identity indices, got dtype {m.dtype}")
    m = m.astype(np.int64, copy=False)
    if m.size:
        bad = (m < 0) | (m >= n_identities)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"truth[{i}] = {int(m[i])} is outside [0, {n_identities})")
    return m


def reject_non_finite(block: np.ndarray, row0: int = 0) -> None:
    """Raise ``ValueError`` naming the first NaN/inf of a block whose first row is ``row0``."""
    finite = np.isfinite(block)
    if not finite.all():
        i, j = np.argwhere(~finite)[0]
        raise ValueError(
            f"scores[{row0 + int(i)}, {int(j)}] = {block[i, j]}: NaN/inf scores are not allowed"
        )


def true_rank_counts(scores: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per trial, how many other templates score above / equal to the true one.

    scores (T, N), truth (T,) → (above (T,), ties (T,)) int64; the optimistic rank is
    ``1 + above``. NaN or inf anywhere in ``scores`` raises ``ValueError``.
    """
    S = check_scores(scores)
    T, N = S.shape
    m = check_truth(truth, T, N)
    above = np.empty(T, dtype=np.int64)
    ties = np.empty(T, dtype=np.int64)
    step = chunk_rows(N)
    for r0 in range(0, T, step):
        block = S[r0 : r0 + step]
        reject_non_finite(block, r0)
        target = block[np.arange(block.shape[0]), m[r0 : r0 + step]][:, None]
        above[r0 : r0 + step] = np.count_nonzero(block > target, axis=1)
        ties[r0 : r0 + step] = np.count_nonzero(block == target, axis=1) - 1
    return above, ties


def rank_histogram(
    scores: np.ndarray,
    truth: np.ndarray,
    *,
    ties: TieRule = "fractional",
    rng: np.random.Generator | int | None = None,
) -> np.ndarray:
    """Histogram h (N,) of the true identity's rank; ``h[k-1]`` is the weight of rank k.

    ``ties``: "fractional" spreads each trial's unit weight evenly over the tied positions
    (the expected histogram under random tie-breaking), "optimistic" / "pessimistic" take the
    best / worst tied position, "random" draws one with ``rng`` (a Generator or seed; None → 0,
    so results are reproducible). T = 0 gives an all-zero histogram.
    """
    if ties not in TIE_RULES:
        raise ValueError(f"ties={ties!r}; expected one of {', '.join(TIE_RULES)}")
    S = check_scores(scores)
    above, n_tied = true_rank_counts(S, truth)
    return histogram_of_rank_counts(above, n_tied, S.shape[1], ties=ties, rng=rng)


def histogram_of_rank_counts(
    above: np.ndarray,
    n_tied: np.ndarray,
    N: int,
    *,
    ties: TieRule = "fractional",
    rng: np.random.Generator | int | None = None,
) -> np.ndarray:
    """Rank histogram (N,) from :func:`true_rank_counts` (T,), (T,): see :func:`rank_histogram`.
    Counts of row blocks concatenate, so blocks scanned apart give the same histogram."""
    if ties not in TIE_RULES:
        raise ValueError(f"ties={ties!r}; expected one of {', '.join(TIE_RULES)}")
    if ties == "optimistic":
        return np.bincount(above, minlength=N).astype(np.float64)
    if ties == "pessimistic":
        return np.bincount(above + n_tied, minlength=N).astype(np.float64)
    if ties == "random":
        generator = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng or 0)
        offset = generator.integers(0, n_tied + 1) if above.size else n_tied
        return np.bincount(above + offset, minlength=N).astype(np.float64)
    # Fractional: weight 1/(t+1) on 0-based positions above .. above + t, as a difference array.
    weight = 1.0 / (n_tied + 1.0)
    diff = np.bincount(above, weights=weight, minlength=N + 1)
    diff -= np.bincount(above + n_tied + 1, weights=weight, minlength=N + 1)
    # The running sum may end a run at -1e-16 instead of 0: a weight is never negative.
    return np.maximum(np.cumsum(diff[:N]), 0.0)


def rank_of(scores: np.ndarray, index: int) -> int:
    """Optimistic 1-based rank of identity ``index`` in one score vector (N,)."""
    s = np.asarray(scores)
    if s.ndim != 1:
        raise ValueError(f"scores must be a 1-D (N,) vector, got shape {s.shape}")
    above, _ = true_rank_counts(s[None, :], np.array([index]))
    return int(above[0]) + 1


def tie_groups(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """0-based start and end (exclusive) of each identity's tie group in descending order."""
    s = np.asarray(scores)
    if s.ndim < 1 or s.shape[-1] < 1:
        raise ValueError(f"scores must have shape (..., N) with N >= 1, got {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError("scores contain NaN/inf; they cannot be ranked")
    N = s.shape[-1]
    order = np.argsort(-s, axis=-1, kind="stable")
    ordered = np.take_along_axis(s, order, axis=-1)
    positions = np.broadcast_to(np.arange(N), ordered.shape)
    new_group = np.ones(ordered.shape, dtype=bool)
    new_group[..., 1:] = ordered[..., 1:] != ordered[..., :-1]
    start_sorted = np.maximum.accumulate(np.where(new_group, positions, 0), axis=-1)
    # End of a group = start of the next group, scanned from the right.
    last = np.ones(ordered.shape, dtype=bool)
    last[..., :-1] = new_group[..., 1:]
    end_rev = np.minimum.accumulate(np.where(last, positions + 1, N)[..., ::-1], axis=-1)
    end_sorted = end_rev[..., ::-1]
    start = np.empty_like(start_sorted)
    end = np.empty_like(end_sorted)
    np.put_along_axis(start, order, start_sorted, axis=-1)
    np.put_along_axis(end, order, end_sorted, axis=-1)
    return start, end


def identity_ranks(scores: np.ndarray) -> np.ndarray:
    """Optimistic 1-based rank of every identity: scores (..., N) → (..., N) int64."""
    start, _ = tie_groups(scores)
    return start + 1
