"""ZEBRA: expected (D_ECE) and worst-case disclosure of pooled 1-to-1 trials (paper 001).

Scores are turned into likelihood ratios by PAV ("oracle") calibration. Exactly tied scores are
pooled into one block first, so the result never depends on the order in which targets and
non-targets were concatenated: constant scores give one block and zero evidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

from monitor.disclosure.blocks import ClassCounts, ScoreBlocks, pooled_blocks
from monitor.disclosure.pav import pav_of_counts, pav_segments

LN2 = math.log(2.0)
LN10 = math.log(10.0)

#: Tags of paper 001 Table 1: (lower bound of log10 l, tag), closed on the left.
TAG_BOUNDS: tuple[tuple[float, str], ...] = (
    (6.0, "F"),
    (5.0, "E"),
    (4.0, "D"),
    (2.0, "C"),
    (1.0, "B"),
    (0.0, "A"),
)


@dataclass(frozen=True)
class ZebraResult:
    """ZEBRA summary: expected disclosure, worst case and its categorical tag."""

    D_ECE: float  # bits, in [0, 1/ln 4]
    log10_lr_max: float  # log10 of the worst-case likelihood ratio (Laplace PAV)
    tag: str  # "0", "A".."F" (paper 001 Table 1)


@dataclass(frozen=True)
class PavBlocks:
    """Tie blocks (as :class:`TieBlocks`) with the fitted PAV P(target) of each block."""

    order: np.ndarray  # (n,) int
    block_of: np.ndarray  # (n,) int
    n_tar: np.ndarray  # (B,) float
    n_non: np.ndarray  # (B,) float
    posterior: np.ndarray  # (B,) float in [0, 1]


def finite_scores(values: np.ndarray | list[float], name: str) -> np.ndarray:
    """Scores as a flat float64 array; ValueError naming ``name`` if empty or not finite."""
    array = np.asarray(values, dtype=np.float64).ravel()
    if array.size == 0:
        raise ValueError(f"{name}: no scores")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name}: scores must be finite (found NaN or inf)")
    return array


@dataclass(frozen=True)
class TieBlocks:
    """Pooled scores sorted ascending and grouped into blocks of exactly tied scores."""

    order: np.ndarray  # (n,) int: sorts the pooled scores (targets first, then non-targets)
    block_of: np.ndarray  # (n,) int: block of each sorted score
    n_tar: np.ndarray  # (B,) float: targets per block
    n_non: np.ndarray  # (B,) float: non-targets per block


def tie_blocks(tar: np.ndarray, non: np.ndarray) -> TieBlocks:
    """Sort the pooled scores once and count each class per tie block (the shared core of
    PAV, ROCCH, D_ECE and min Cllr). Order inside a tie block does not matter, so the sort
    need not be stable."""
    tar = finite_scores(tar, "targets")
    non = finite_scores(non, "non-targets")
    scores = np.concatenate([tar, non])
    order = np.argsort(scores)
    sorted_scores = scores[order]
    new_block = np.empty(sorted_scores.size, dtype=bool)
    new_block[0] = True
    np.not_equal(sorted_scores[1:], sorted_scores[:-1], out=new_block[1:])
    block_of = np.cumsum(new_block) - 1
    n_blocks = int(block_of[-1]) + 1
    n_tar = np.bincount(block_of, weights=order < tar.size, minlength=n_blocks)
    n_all = np.bincount(block_of, minlength=n_blocks).astype(np.float64)
    return TieBlocks(order, block_of, n_tar, n_all - n_tar)


def class_counts(tar: np.ndarray, non: np.ndarray) -> ClassCounts:
    """Checked scores → counts per non-empty block of the sorted core (targets sorted once)."""
    return pooled_blocks(finite_scores(tar, "targets"), finite_scores(non, "non-targets")).counts()


def pav_posterior(
    blocks: TieBlocks | ClassCounts, *, laplace: bool = False
) -> npt.NDArray[np.float64]:
    """PAV P(target) per tie block (B,); ``laplace`` adds the toolkit's 4 dummies.

    The dummy pair [target, non-target] at each end always pools into one block of mean 1/2 and
    weight 2 (a descending adjacent pair is equal in the isotonic solution), so it enters PAV as
    that block (one target, one non-target); it is dropped from the result.
    """
    n_tar, n_non = blocks.n_tar, blocks.n_non
    if laplace:
        n_tar = np.concatenate([[1.0], n_tar, [1.0]])
        n_non = np.concatenate([[1.0], n_non, [1.0]])
    posterior = pav_of_counts(n_tar, n_non)
    if laplace:
        posterior = posterior[1:-1]
    return cast(npt.NDArray[np.float64], np.clip(posterior, 0.0, 1.0))


def pav_pooled(blocks: TieBlocks | ClassCounts) -> tuple[ClassCounts, npt.NDArray[np.float64]]:
    """The blocks pooled into PAV's segments (runs of equal fitted posterior), with that
    posterior (S,): every block of a segment has the same LLR, so D_ECE, min Cllr and the ROC
    hull are sums over a few segments instead of every tie block."""
    ends, posterior = pav_segments(blocks.n_tar, blocks.n_non)
    starts = np.concatenate([[0], ends[:-1]])
    pooled = ClassCounts(
        np.add.reduceat(blocks.n_tar, starts), np.add.reduceat(blocks.n_non, starts)
    )
    return pooled, np.clip(posterior, 0.0, 1.0)


def pav_blocks(tar: np.ndarray, non: np.ndarray, *, laplace: bool = False) -> PavBlocks:
    """Tie blocks of the pooled scores with their PAV posteriors."""
    blocks = tie_blocks(tar, non)
    posterior = pav_posterior(blocks, laplace=laplace)
    return PavBlocks(blocks.order, blocks.block_of, blocks.n_tar, blocks.n_non, posterior)


def block_llr(blocks: TieBlocks | PavBlocks | ClassCounts, posterior: np.ndarray) -> np.ndarray:
    """LLR per block (B,): logit(P) - ln(|A|/|B|) with the real class counts."""
    prior = math.log(float(blocks.n_tar.sum()) / float(blocks.n_non.sum()))
    return _logit(posterior) - prior


def _logit(p: np.ndarray) -> npt.NDArray[np.float64]:
    with np.errstate(divide="ignore"):
        return cast(npt.NDArray[np.float64], np.log(p) - np.log1p(-p))


def pav_llr(
    tar: np.ndarray, non: np.ndarray, *, laplace: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """PAV-calibrated natural-log LLRs for every target and non-target score.

    ``LLR = logit(P) - ln(|A|/|B|)`` with the real class counts; P = 0 gives -inf and P = 1
    gives +inf (only without ``laplace``). Shapes: (n_tar,), (n_non,) in input order.
    """
    tar = finite_scores(tar, "targets")
    non = finite_scores(non, "non-targets")
    blocks = tie_blocks(tar, non)
    per_block = block_llr(blocks, pav_posterior(blocks, laplace=laplace))
    llr = np.empty(tar.size + non.size)
    llr[blocks.order] = per_block[blocks.block_of]
    return llr[: tar.size], llr[tar.size :]


def z_of_log(lam: np.ndarray) -> np.ndarray:
    """ZEBRA's Z(x) as a function of lam = ln x, stable for all lam.

    Z = 1/4 + (lam - u) / (2 u²), u = e^lam - 1; near lam = 0 the series lam/6 - lam²/24 avoids
    cancellation; Z(+inf) = 1/4 and Z(-inf) = -inf.
    """
    lam = np.asarray(lam, dtype=np.float64)
    small = np.abs(lam) < 1e-4
    # Beyond lam = 700 e^lam overflows; Z is then 1/4 to double precision anyway.
    safe = np.clip(np.where(small | ~np.isfinite(lam), 1.0, lam), -np.inf, 700.0)
    u = np.expm1(safe)
    z = 0.25 + (safe / u - 1.0) / (2.0 * u)
    tiny = np.where(small, lam, 0.0)
    z = np.where(small, tiny / 6.0 - tiny * tiny / 24.0, z)
    z = np.where(lam == np.inf, 0.25, z)
    return np.where(lam == -np.inf, -np.inf, z)


def d_ece_from_llr(llr_tar: np.ndarray, llr_non: np.ndarray) -> float:
    """D_ECE in bits from calibrated LLRs: (mean Z(a) + mean Z(1/b)) / ln 2."""
    llr_tar = np.asarray(llr_tar, dtype=np.float64)
    llr_non = np.asarray(llr_non, dtype=np.float64)
    return float((np.mean(z_of_log(llr_tar)) + np.mean(z_of_log(-llr_non))) / LN2)


def _d_ece_blocks(blocks: TieBlocks | ClassCounts) -> float:
    blocks, posterior = pav_pooled(blocks)
    llr = block_llr(blocks, posterior)
    # A block without targets may have LLR -inf (Z = -inf): weight 0 must give 0, not NaN.
    z_tar = np.where(blocks.n_tar > 0, z_of_log(llr), 0.0)
    z_non = np.where(blocks.n_non > 0, z_of_log(-llr), 0.0)
    mean_tar = float(np.dot(blocks.n_tar, z_tar) / blocks.n_tar.sum())
    mean_non = float(np.dot(blocks.n_non, z_non) / blocks.n_non.sum())
    return (mean_tar + mean_non) / LN2


def d_ece(tar: np.ndarray, non: np.ndarray) -> float:
    """Expected disclosure D_ECE [bits] of PAV-calibrated scores, without Laplace."""
    return _d_ece_blocks(class_counts(tar, non))


def zebra_tag(log10_lr: float) -> str:
    """Categorical tag of a worst-case log10 l, closed on the left (paper 001 Table 1)."""
    value = abs(float(log10_lr))
    if math.isnan(value):
        raise ValueError("log10_lr is NaN")
    if value < 1e-12:
        return "0"
    for bound, tag in TAG_BOUNDS:
        if value >= bound:
            return tag
    raise AssertionError("unreachable: value >= 0 always matches the last bound")


def _worst_case_blocks(blocks: TieBlocks | ClassCounts) -> float:
    llr = block_llr(blocks, pav_posterior(blocks, laplace=True))
    return float(np.max(np.abs(llr))) / LN10


def worst_case_log10_lr(tar: np.ndarray, non: np.ndarray) -> float:
    """log10 of the largest |LLR'| over all trials with the Laplace-padded PAV."""
    return _worst_case_blocks(class_counts(tar, non))


def zebra(tar: np.ndarray, non: np.ndarray) -> ZebraResult:
    """ZEBRA tuple (D_ECE bits, worst-case log10 l, tag) of target and non-target scores."""
    return zebra_of_blocks(
        pooled_blocks(finite_scores(tar, "targets"), finite_scores(non, "non-targets"))
    )


def zebra_of_blocks(blocks: ScoreBlocks) -> ZebraResult:
    """ZEBRA tuple from the sorted core's blocks (e.g. of a whole score matrix)."""
    counts = blocks.counts()
    log10_l = _worst_case_blocks(counts)
    return ZebraResult(D_ECE=_d_ece_blocks(counts), log10_lr_max=log10_l, tag=zebra_tag(log10_l))


def _ece(
    llr_tar: np.ndarray, llr_non: np.ndarray, prior_log_odds: np.ndarray
) -> npt.NDArray[np.float64]:
    """ECE(pi) in bits for LLRs and prior log-odds t = logit(pi), vectorised over t."""
    t = prior_log_odds[:, None]
    pi = 1.0 / (1.0 + np.exp(-prior_log_odds))
    tar_term = np.mean(np.logaddexp(0.0, -(llr_tar[None, :] + t)), axis=1) / LN2
    non_term = np.mean(np.logaddexp(0.0, llr_non[None, :] + t), axis=1) / LN2
    return cast(npt.NDArray[np.float64], pi * tar_term + (1.0 - pi) * non_term)


def ece_curve(
    tar: np.ndarray, non: np.ndarray, prior_log_odds: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ECE plot data over prior log-odds (K,): (ece of the scores read as LLRs, ECE_0 = H2(pi),
    ece after PAV calibration). All in bits, shape (K,)."""
    tar = finite_scores(tar, "targets")
    non = finite_scores(non, "non-targets")
    t = np.asarray(prior_log_odds, dtype=np.float64).ravel()
    zero = np.zeros(1)
    return _ece(tar, non, t), _ece(zero, zero, t), _ece(*pav_llr(tar, non), t)
