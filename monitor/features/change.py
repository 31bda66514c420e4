"""A change of speaker inside a window, scored on its log-mel filterbank frames.

The embedding network's front end already computes a window's 80 log-mel frames every 10 ms
(:mod:`monitor.features.fbank`); a change of speaker shows in them as a change of the spectral
envelope's mean. Each frame's cepstrum (the DCT of its log-mel energies, coefficients 1..C:
the envelope without the frame's loudness) is projected on the directions where speakers
differ most against how one speaker's own seconds differ (a linear discriminant fitted on the
corpus train split, :func:`fit_projection`, whitened so one speaker's 1 s means have identity
covariance). In that space a change at frame ``t`` is a change of mean with a known
covariance, and its generalised likelihood ratio (GLR; Gish et al. 1991, the BIC of Chen &
Gopalakrishnan 1998 without its size penalty) is, with n₁ frames [0, t) and n₂ frames [t, T),

    GLR(t) = ½ · n₁ n₂ / (n₁ + n₂) · ‖μ₁ − μ₂‖² / F       (F frames per second),

about ½ χ²ₖ when one speaker speaks. Every candidate's means come from one cumulative sum of
the frames: no loop over frames or candidates. (Per-frame Gaussian GLRs on raw cepstra, full or
diagonal, separated one from two speakers far worse on this corpus: AUC 0.80–0.85 against
0.93; ``scripts/calibrate_turns.py``.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FRAMES_PER_SECOND = 100
"""Filterbank frames per second of speech (10 ms hop, both embedding front ends)."""


def cepstra(fbank: npt.ArrayLike, count: int) -> npt.NDArray[np.float64]:
    """(T, count) DCT-II coefficients 1..count of (T, bands) log-mel frames (c0, the frame's
    loudness, left out: a voice's level changes within a turn)."""
    frames = np.asarray(fbank, dtype=np.float64)
    if frames.ndim != 2:
        raise ValueError(f"fbank must be (frames, bands), got shape {frames.shape}")
    bands = frames.shape[1]
    if not 1 <= count < bands:
        raise ValueError(f"count must be in [1, {bands - 1}], got {count}")
    k = np.arange(1, count + 1)[:, None]
    basis = np.cos(np.pi * k * (np.arange(bands)[None, :] + 0.5) / bands)  # (count, bands)
    out: npt.NDArray[np.float64] = frames @ basis.T
    return out


@dataclass(frozen=True)
class ChangeScores:
    """GLR change scores of one window's candidate points."""

    frames: npt.NDArray[np.int64]  # (K,) candidate t: a change between frame t − 1 and t
    scores: npt.NDArray[np.float64]  # (K,) GLR, nats

    def best(self) -> tuple[int, float]:
        """(frame, score) of the highest-scoring candidate; (-1, 0.0) without candidates."""
        if self.scores.size == 0:
            return -1, 0.0
        k = int(np.argmax(self.scores))
        return int(self.frames[k]), float(self.scores[k])


def mean_shift_scores(
    projected: npt.ArrayLike,
    *,
    min_side: int = FRAMES_PER_SECOND // 2,
    per_second: int = FRAMES_PER_SECOND,
) -> ChangeScores:
    """GLR of a change of mean at every candidate t in [min_side, T − min_side] of (T, k)
    projected frames (see the module), the covariance of one speaker's 1 s means the identity."""
    z = np.asarray(projected, dtype=np.float64)
    if z.ndim != 2:
        raise ValueError(f"projected must be (frames, dims), got shape {z.shape}")
    if min_side < 1:
        raise ValueError(f"min_side must be >= 1, got {min_side}")
    total = z.shape[0]
    t = np.arange(min_side, total - min_side + 1)
    if t.size == 0:
        return ChangeScores(np.zeros(0, np.int64), np.zeros(0))
    sums = np.concatenate([np.zeros((1, z.shape[1])), np.cumsum(z - z.mean(axis=0), axis=0)])
    n1, n2 = t.astype(np.float64), (total - t).astype(np.float64)
    gap = sums[t] / n1[:, None] - (sums[total] - sums[t]) / n2[:, None]
    scores = 0.5 * (n1 * n2 / (n1 + n2)) * np.sum(gap**2, axis=1) / per_second
    return ChangeScores(t.astype(np.int64), scores)


def segment_means(features: npt.ArrayLike, length: int) -> npt.NDArray[np.float64]:
    """(T // length, d) means of consecutive ``length``-frame segments of (T, d) features."""
    x = np.asarray(features, dtype=np.float64)
    count = x.shape[0] // length
    out: npt.NDArray[np.float64] = x[: count * length].reshape(count, length, -1).mean(axis=1)
    return out


def fit_projection(
    means: npt.ArrayLike, speakers: npt.ArrayLike, dims: int
) -> npt.NDArray[np.float64]:
    """(d, dims) linear discriminant of 1 s segment means (M, d) labelled by speaker (M,): the
    directions of most between-speaker against within-speaker variance, scaled so that one
    speaker's projected segment means have identity covariance (:func:`mean_shift_scores`)."""
    from scipy.linalg import eigh

    x = np.asarray(means, dtype=np.float64)
    names, index = np.unique(np.asarray(speakers), return_inverse=True)
    if names.size < 2 or not 1 <= dims <= x.shape[1]:
        raise ValueError(f"need two speakers and 1 <= dims <= {x.shape[1]}, got dims={dims}")
    counts = np.bincount(index).astype(np.float64)
    centres = np.zeros((names.size, x.shape[1]))
    np.add.at(centres, index, x)
    centres /= counts[:, None]
    within = x - centres[index]
    w = within.T @ within / (x.shape[0] - names.size)
    spread = centres - centres.mean(axis=0)
    b = spread.T @ spread / (names.size - 1)
    _, vectors = eigh(b, w)  # ascending; vᵀ w v = I
    projection: npt.NDArray[np.float64] = vectors[:, ::-1][:, :dims]
    return projection
