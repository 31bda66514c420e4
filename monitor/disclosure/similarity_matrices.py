"""Voice similarity matrices, DeID and GVD (paper 002).

A speaker-by-speaker matrix holds sigmoid(mean calibrated LLR) of every segment pair of two
speakers; DeID compares the diagonal dominance of original-vs-pseudonymised with
original-vs-original, GVD that of pseudonymised-vs-pseudonymised with original-vs-original.
"""

from __future__ import annotations

import math
import warnings
from typing import cast

import numpy as np
import numpy.typing as npt
from scipy.special import expit

from monitor.disclosure.zebra import pav_llr

#: D_diag at or below this counts as zero (a constant matrix up to rounding).
ZERO_DOMINANCE = 1e-12


def _speaker_codes(speaker_of: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    speaker_of = np.asarray(speaker_of)
    if speaker_of.shape != (n,):
        raise ValueError(f"speaker_of has shape {speaker_of.shape}, expected ({n},)")
    speakers, codes = np.unique(speaker_of, return_inverse=True)
    return speakers, codes


def _pair_mask(n: int, exclude_same: bool) -> np.ndarray:
    mask = np.ones((n, n), dtype=bool)
    if exclude_same:
        np.fill_diagonal(mask, False)
    return mask


def oracle_pair_llr(
    scores: np.ndarray, speaker_of: np.ndarray, *, exclude_same: bool = True
) -> np.ndarray:
    """PAV ("oracle") LLRs (n, n) of raw segment-pair scores, same speaker = target.

    Pairs on the diagonal (the same utterance) are left out of the calibration when
    ``exclude_same`` and come back as NaN; everything else gets its calibrated LLR in nats.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[0] != scores.shape[1]:
        raise ValueError(f"segment scores must be square (n, n), got {scores.shape}")
    _, codes = _speaker_codes(speaker_of, scores.shape[0])
    use = _pair_mask(scores.shape[0], exclude_same)
    same = (codes[:, None] == codes[None, :]) & use
    different = (codes[:, None] != codes[None, :]) & use
    if not same.any() or not different.any():
        raise ValueError("oracle calibration needs both same-speaker and different-speaker pairs")
    llr_same, llr_diff = pav_llr(scores[same], scores[different])
    llr = np.full(scores.shape, np.nan)
    llr[same] = llr_same
    llr[different] = llr_diff
    return llr


def speaker_similarity_matrix(
    llr: np.ndarray, speaker_of: np.ndarray, *, exclude_same: bool = True
) -> npt.NDArray[np.float64]:
    """M[i, j] = sigmoid(mean llr over segment pairs of speakers i and j), shape (N, N) (eqs. 1–2).

    ``llr`` (n, n) holds calibrated natural-log LLRs of segment pairs: rows and columns are the
    same n segments (M_OO, M_PP), or originals and their pseudonymised versions in the same
    order (M_OP), so the diagonal is always "the same utterance" and is dropped when
    ``exclude_same``. Speakers are ordered as ``np.unique(speaker_of)``. ±inf LLRs are allowed;
    a block mixing +inf and -inf has no mean and raises.
    """
    llr = np.asarray(llr, dtype=np.float64)
    if llr.ndim != 2 or llr.shape[0] != llr.shape[1]:
        raise ValueError(f"segment-pair LLRs must be square (n, n), got {llr.shape}")
    n = llr.shape[0]
    _, codes = _speaker_codes(speaker_of, n)
    use = _pair_mask(n, exclude_same)
    if np.any(np.isnan(llr) & use):
        raise ValueError("segment-pair LLRs contain NaN")
    onehot = np.zeros((n, int(codes.max()) + 1))
    onehot[np.arange(n), codes] = 1.0
    finite = np.where(use & np.isfinite(llr), llr, 0.0)
    counts = onehot.T @ use.astype(np.float64) @ onehot
    sums = onehot.T @ finite @ onehot
    n_pos = onehot.T @ (use & (llr == np.inf)).astype(np.float64) @ onehot
    n_neg = onehot.T @ (use & (llr == -np.inf)).astype(np.float64) @ onehot
    if np.any(counts == 0):
        i, j = np.argwhere(counts == 0)[0]
        raise ValueError(f"speakers {i} and {j} share no segment pair (one segment each?)")
    if np.any((n_pos > 0) & (n_neg > 0)):
        raise ValueError("a speaker pair mixes +inf and -inf LLRs: its mean is undefined")
    mean = np.where(n_pos > 0, np.inf, np.where(n_neg > 0, -np.inf, sums / counts))
    return cast(npt.NDArray[np.float64], expit(mean))


def diagonal_dominance(M: np.ndarray) -> float:
    """D_diag = |mean of the diagonal - mean of the off-diagonal| (eq. 3); needs N >= 2."""
    M = np.asarray(M, dtype=np.float64)
    if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] < 2:
        raise ValueError(f"D_diag needs a square matrix with N >= 2, got shape {M.shape}")
    off_diagonal = ~np.eye(M.shape[0], dtype=bool)
    return float(abs(np.mean(np.diag(M)) - np.mean(M[off_diagonal])))


def deid(M_oo: np.ndarray, M_op: np.ndarray) -> float:
    """De-identification 1 - D_diag(M_OP)/D_diag(M_OO) (eq. 4), a fraction.

    NaN with a warning when D_diag(M_OO) = 0; may be negative (also warned).
    """
    d_oo = diagonal_dominance(M_oo)
    d_op = diagonal_dominance(M_op)
    if d_oo <= ZERO_DOMINANCE:
        warnings.warn("DeID undefined: D_diag(M_OO) = 0", RuntimeWarning, stacklevel=2)
        return math.nan
    value = 1.0 - d_op / d_oo
    if value < 0.0:
        warnings.warn(
            f"DeID {value:.4f} < 0: D_diag(M_OP) exceeds D_diag(M_OO)", RuntimeWarning, stacklevel=2
        )
    return value


def gvd(M_oo: np.ndarray, M_pp: np.ndarray) -> float:
    """Gain of voice distinctiveness 10·log10(D_diag(M_PP)/D_diag(M_OO)) in dB (eq. 5).

    NaN with a warning when D_diag(M_OO) = 0; -inf when D_diag(M_PP) = 0.
    """
    d_oo = diagonal_dominance(M_oo)
    d_pp = diagonal_dominance(M_pp)
    if d_oo <= ZERO_DOMINANCE:
        warnings.warn("GVD undefined: D_diag(M_OO) = 0", RuntimeWarning, stacklevel=2)
        return math.nan
    if d_pp <= ZERO_DOMINANCE:
        return -math.inf
    return 10.0 * math.log10(d_pp / d_oo)
