"""Vectorised similarity scores between T test vectors and N templates.

Histogram features (f0, phone) compare normalised count vectors by minus the Jensen-Shannon
divergence in bits (0 for identical, -1 for disjoint support); the embedding compares unit
vectors by cosine. Both return a (T, N) matrix computed without Python loops over pairs.
"""

from __future__ import annotations

import numpy as np

_CHUNK_ELEMENTS = 1 << 22  # T-chunk * N * D per block: ~32 MB of float64 at a time


def _as_rows(x: np.ndarray, name: str) -> np.ndarray:
    rows = np.atleast_2d(np.asarray(x, dtype=np.float64))
    if rows.ndim != 2:
        raise ValueError(f"{name} must be (rows, D), got shape {rows.shape}")
    if not np.all(np.isfinite(rows)):
        raise ValueError(f"{name} holds NaN or inf")
    return rows


def _normalise_counts(counts: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Rows divided by their sums, and a mask of rows that hold any mass."""
    if np.any(counts < 0):
        raise ValueError(f"{name} holds negative counts")
    totals = counts.sum(axis=1)
    nonempty = totals > 0
    safe = np.where(nonempty, totals, 1.0)
    return counts / safe[:, None], nonempty


def _xlogx(x: np.ndarray) -> np.ndarray:
    """x * log2(x) with 0 log 0 = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, x * np.log2(np.where(x > 0, x, 1.0)), 0.0)


def js_divergence(P: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """Jensen-Shannon divergence in bits between rows of P (T, D) and Q (N, D) -> (T, N).

    Rows are count vectors (normalised here). JS = H(M) - (H(P) + H(Q)) / 2 with M the mean
    of the two distributions, so it lies in [0, 1]. A row with no mass says nothing about the
    speaker: its divergence is 1 against every row (all pairs tie at the worst value).
    """
    p, p_ok = _normalise_counts(_as_rows(P, "P"), "P")
    q, q_ok = _normalise_counts(_as_rows(Q, "Q"), "Q")
    if p.shape[1] != q.shape[1]:
        raise ValueError(f"dimension mismatch: P has {p.shape[1]} bins, Q has {q.shape[1]}")
    neg_h_p = _xlogx(p).sum(axis=1)  # (T,) = -H(P)
    neg_h_q = _xlogx(q).sum(axis=1)  # (N,)
    T, D = p.shape
    N = q.shape[0]
    out = np.empty((T, N))
    step = max(1, _CHUNK_ELEMENTS // max(1, N * D))
    for start in range(0, T, step):  # chunks of tests keep the (t, N, D) block small
        m = 0.5 * (p[start : start + step, None, :] + q[None, :, :])
        neg_h_m = _xlogx(m).sum(axis=2)
        out[start : start + step] = 0.5 * (neg_h_p[start : start + step, None] + neg_h_q) - neg_h_m
    np.clip(out, 0.0, 1.0, out=out)
    out[~p_ok, :] = 1.0
    out[:, ~q_ok] = 1.0
    return out


def neg_js_divergence(P: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """Minus the JS divergence in bits, (T, D) x (N, D) -> (T, N): higher means more alike."""
    return -js_divergence(P, Q)


def cosine(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Cosine similarity of rows of A (T, D) and B (N, D) -> (T, N); a zero row scores 0."""
    a = _as_rows(A, "A")
    b = _as_rows(B, "B")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"dimension mismatch: A has {a.shape[1]} columns, B has {b.shape[1]}")
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    a = a / np.where(na > 0, na, 1.0)[:, None]
    b = b / np.where(nb > 0, nb, 1.0)[:, None]
    return np.clip(a @ b.T, -1.0, 1.0)
