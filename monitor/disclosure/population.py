"""Disclosure against a declared population of N_pop identities, from the templates present.

The figures of :mod:`monitor.scoring.scorer` are "how far this speech narrows down who speaks
among the N templates present", at most log2 N bits. This module states the same figures (LID,
SRD and the rank-1 rate) against a population of any size N_pop, with only the N templates
present in hand, through one model per feature and evidence length: the distribution of an
impostor's score, normalised by the row it appears in.

The model (one :class:`PopulationModel` per feature and calibration bucket)
    For a window scored against N reference templates, the N − 1 impostor scores s_j give a
    row mean μ and standard deviation σ; z_j = (s_j − μ)/σ has mean 0 and deviation 1 in every
    row, so the z of many windows of many reference speakers pool into one sample of
    "an impostor's z". The model keeps that sample as a quantile grid (``z``, ``survival``
    = P(Z > z)) with an exponential tail beyond its last point (``tail_rate``), and the
    smallest survival the sample can vouch for (``validated_survival``: a few distinct
    speaker pairs above it, not a few scores, since one pair's windows are dependent).

The figures for one window (:func:`population_figures`), with the subject's z_i = (s_i − μ)/σ
    - SRD and rank-1 (Grother & Phillips): the subject's relative rank is x = P(Z > z_i); its
      rank among N_pop is 1 + Binomial(N_pop − 1, x), P(rank 1) = (1 − x)^(N_pop − 1), and SRD
      is log2(N_pop·E[γ_rank]) under the calibrated beta-binomial γ (α, β of the bucket).
      The rank model is fitted on ranks among the calibration's N' identities and says
      nothing about relative ranks finer than 1/N' (where every dev trial is rank 1, β runs
      to its bound): against a larger population SRD is the rank model's at the subject's
      relative rank among N' identities, at most log2 N' bits, never −10³ bits.
    - LID (paper 003's softmax over N_pop identities): the row z-norm of N_pop scores and the
      softmax denominator over N_pop − 1 impostors, Σ e^(w·z_j), taken as its typical value:
      (N_pop − 1) times the mean of e^(w·z) below the 1/(N_pop − 1) quantile (the sum's bulk),
      plus, with the probability that one occurs, one impostor from beyond it (the sum's
      largest term), and never above (N_pop − 1)·e^(−b'), where w·z + b' is the bucket's
      calibrated LLR (paper 003's eq. 3): an impostor's LR averages 1 (paper 001), and a sum
      of positive terms lies typically below its mean. The sample's own mean of e^(w·z) is no
      such bound: w (≈ 4) is about twice the tail's rate (≈ 2), so the mean is infinite in
      the model and set by the reference's few closest impostor pairs in the sample (for the
      ECAPA backends e^5–e^7 above the calibrated one, every figure 8–10 bits too low). LID
      then tends to log2 LR: P(true) ≈ LR/(LR + N_pop − 1). Nothing loops over N_pop: the
      cost is O(N + K) per window, K grid points.
    - Beyond the reference: the sample vouches for survivals down to ``validated_survival``,
      i.e. for populations up to ``validated_population``. A subject above ``validated_z``
      in a larger population is stronger than anything the reference can compare it with:
      the figures then show what the sample does vouch for — the subject among the top
      share p_valid, log2 N − log2(1 + (N − 1)·p_valid) bits of LID — a lower bound, "at
      least X bits" (``lid_at_least_bits``), with ``beyond_reference`` set.
      ``lid_bits``/``srd_bits`` stay the model's estimate everywhere: the figure that ranks
      windows and that a budget compares (a budget must not be escaped because the reference
      is small), shown beside what the reference vouches for.

The templates present are members of the population (``templates_in_population``, the
daemon's case): their scores count as they are — a household member whose voice is close to
another's is a real neighbour, not a statistic — and only the N_pop − N others are modelled,
so at N_pop = N the figures are the scorer's own. Those of them that are a random sample of the
population (``sample``: the shipped reference speakers) also say how dense this window's own
neighbourhood is: where at least ``MIN_SAMPLE`` of them find it denser than the model's
average window, their sum scaled to the N_pop − N modelled impostors stands for the modelled
sum (the empirical exceedance among the reference, the model beyond it).

Public API (pure math, no I/O; arrays in, frozen dataclasses out; the model's data lives in
:mod:`monitor.disclosure.population_model` and is re-exported here)
    fit_population_model(scores (T, N), truth (T,), *, seconds) -> PopulationModel
        ``scores``: similarities (or the fused ``combined`` score) of T windows of reference
        speakers of about ``seconds`` of speech against the N reference templates; ``truth``:
        each window's own template (a window whose speaker has no template: −1, all N are
        impostors). One bucket of one feature.
    fit_population_set({feature: scores (T, N)}, truth (T,), seconds (T,), *, buckets=
        {feature: calibration bucket edges}) -> PopulationSet: every feature and bucket at
        once (the shipped population's fit: windows and day pools of the reference speakers).
    PopulationSet({feature: (model, ...)}) — ``lookup(feature, seconds)`` picks a bucket as
        CalibrationSet.lookup does; ``to_arrays()`` → ``dict[str, np.ndarray]`` (a few KB,
        ``np.savez``-able) and ``PopulationSet.from_arrays(mapping)`` reads it back, checking
        shapes and finiteness (``ValueError`` naming the key).
    population_figures(scores (R, N) or (N,), subject (R,) or int, *, model, population,
        lid_weight, alpha, beta, templates_in_population=True) -> PopulationFigures with
        (R,) arrays: ``lid_bits``,
        ``srd_bits`` (the model's figures),
        ``lid_at_least_bits``, ``rank1_probability``,
        ``ceiling_probability`` (within ``margin_bits``, default 0.05, of the ceiling),
        ``expected_rank``, ``subject_z``, ``beyond_reference``; scalars ``ceiling_bits``
        = log2 N_pop and ``tail_decides`` (N_pop above ``validated_population``: claims about
        impostors rarer than the sample holds rest on the model). ``lid_weight`` / ``alpha`` /
        ``beta`` are the calibration bucket's (``BucketCalibration``). The budget's figure
        is the one of its (feature, measure); ``combined`` takes the scorer's fused row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.special import betaln

from monitor.disclosure.population_model import (
    MAX_POPULATION,
    MIN_IMPOSTORS,
    VALIDATING_PAIRS,
    PopulationModel,
    PopulationSet,
    fit_population_model,
    fit_population_set,
    impostor_moments,
)

__all__ = [
    "MAX_POPULATION",
    "MIN_IMPOSTORS",
    "VALIDATING_PAIRS",
    "PopulationFigures",
    "PopulationModel",
    "PopulationSet",
    "fit_population_model",
    "fit_population_set",
    "population_figures",
]

FloatArray = npt.NDArray[np.float64]
LN2 = math.log(2.0)
MIN_SAMPLE = 30
"""Fewest sampled reference templates whose neighbourhood of a window is read as the
population's (fewer say too little about a population of millions)."""
_POISSON_TERMS = 24  # ranks summed exactly for SRD while the expected rank is small
_POISSON_LIMIT = 6.0  # expected impostors above the subject below which the sum is used


@dataclass(frozen=True)
class PopulationFigures:
    """Figures of R windows against a population of ``population`` identities (bits, (R,)).

    ``lid_bits``/``srd_bits`` are the model's figures (what a budget compares);
    ``lid_at_least_bits`` what the reference vouches for: equal to them, except where
    ``beyond_reference``, where they are the lower bound to state ("at least X bits").
    ``ceiling_probability``: that LID is within ``margin_bits`` of the ceiling (its mean over
    windows is the share at the ceiling). ``rank1_probability``
    and ``expected_rank`` are the subject's among the population; ``subject_z`` its score in
    impostor deviations. ``tail_decides``: N_pop is above the population the reference
    sample validates, so a window's figure may rest on impostors rarer than it holds.
    """

    population: float
    ceiling_bits: float
    lid_bits: FloatArray
    srd_bits: FloatArray
    lid_at_least_bits: FloatArray
    rank1_probability: FloatArray
    ceiling_probability: FloatArray
    expected_rank: FloatArray
    subject_z: FloatArray
    beyond_reference: npt.NDArray[np.bool_]
    tail_decides: bool


@dataclass(frozen=True)
class _Row:
    """One batch of rows: the subject's score d above the impostor mean, the impostors' σ,
    rows that carry no evidence (impostors all equal: d = 0, σ = 1), and the present
    impostors' z (R, N − 1) when they count as members of the population (else None)."""

    d: FloatArray
    sigma: FloatArray
    flat: npt.NDArray[np.bool_]
    present: FloatArray | None
    in_sample: npt.NDArray[np.bool_] | None = None  # (R, N − 1): present impostors sampled


def _rows(
    scores: npt.ArrayLike,
    subject: npt.ArrayLike,
    *,
    present: bool,
    sample: npt.ArrayLike | None = None,
) -> _Row:
    S = np.asarray(scores, dtype=np.float64)
    S = S[None, :] if S.ndim == 1 else S
    if S.ndim != 2 or S.shape[1] < MIN_IMPOSTORS + 1:
        raise ValueError(f"scores must be (R, N) with N >= {MIN_IMPOSTORS + 1}, got {S.shape}")
    if not np.isfinite(S).all():
        raise ValueError("scores must be finite")
    R, N = S.shape
    i = np.broadcast_to(np.asarray(subject, dtype=np.int64), (R,))
    if np.any((i < 0) | (i >= N)):
        raise ValueError(f"subject must index the N = {N} templates")
    impostor = np.ones((R, N), dtype=bool)
    impostor[np.arange(R), i] = False
    mu, sigma = impostor_moments(S, impostor, np.full(R, N - 1))
    d = S[np.arange(R), i] - mu
    flat = sigma <= 1e-12 * np.maximum(np.abs(mu), 1.0)
    sigma = np.where(flat, 1.0, sigma)
    z = (S[impostor].reshape(R, N - 1) - mu[:, None]) / sigma[:, None] if present else None
    in_sample = None
    if present and sample is not None:
        mask = np.asarray(sample, dtype=bool)
        if mask.shape != (N,):
            raise ValueError(f"sample must be a (N,) mask of the N = {N} templates")
        in_sample = np.broadcast_to(mask, (R, N))[impostor].reshape(R, N - 1)
    return _Row(np.where(flat, 0.0, d), sigma, flat, z, in_sample)


def _sampled(row: _Row, t: FloatArray, modelled: float) -> FloatArray:
    """ln of the modelled impostors' sum as the present sample of the population says it
    (−inf where the sample is too small): the sample's Σ e^(t·z_j) times modelled/sampled."""
    if row.in_sample is None or row.present is None or modelled < 1.0:
        return np.full(t.shape, -np.inf)
    count = row.in_sample.sum(axis=1)
    terms = np.where(row.in_sample, t[:, None] * row.present, -np.inf)
    scaled = np.logaddexp.reduce(terms, axis=1) + np.log(modelled / np.maximum(count, 1))
    return np.where(count >= MIN_SAMPLE, scaled, -np.inf)


def _lid(
    model: PopulationModel, row: _Row, N: float, lr: tuple[float, float | None], margin: float
) -> tuple[FloatArray, FloatArray]:
    """Typical log2(N·P(subject)) of the softmax over N identities, row z-norm included, and
    the probability that it is within ``margin`` bits of log2 N: that the impostors' sum
    leaves room and no modelled impostor scores above the level that would take it away.

    ``lr`` = (w, b'): with the calibrated LLR w·z + b' an impostor's LR averages 1, so the
    typical sum of the modelled impostors' e^(w·z) is at most their number times e^(−b')
    (a sum of positive terms lies typically below its mean; e^(w·z) of a mean-0 z averages
    at least 1, so a b' > 0 is no LLR of these scores and bounds nothing below that);
    None: the sample's own mean, which for w above the tail's rate is set by the
    reference's few closest impostor pairs."""
    w, llr_bias = lr
    d, sigma, n = row.d, row.sigma, N - 1.0
    sd = np.sqrt(sigma**2 * n / N + d**2 * n / N**2)  # deviation of the N scores of the row
    a_subject = w * d * n / (N * sd)
    shift = w * d / (N * sd)  # impostor j: w·(σ·z_j − d/N)/sd = t·z_j − shift
    t = w * sigma / sd
    known = np.full(d.shape, -np.inf)  # ln Σ e^(t·z_j) over the present impostors
    modelled = n
    if row.present is not None:
        known = np.logaddexp.reduce(t[:, None] * row.present, axis=1)
        modelled = N - 1.0 - row.present.shape[1]
    if modelled >= 1.0:
        bulk, largest, p_any = model.denominator(t, modelled)
        with_largest = np.logaddexp(bulk, largest)
        if llr_bias is not None:  # impostor j's LLR is t·z_j − shift + b' (the row's z-norm)
            cap = math.log(modelled) + shift + max(-llr_bias, 0.0)
            bulk, with_largest = np.minimum(bulk, cap), np.minimum(with_largest, cap)
    else:
        bulk, with_largest, p_any = np.full(d.shape, -np.inf), np.full(d.shape, -np.inf), 0.0
    sampled = _sampled(row, t, modelled)  # this window's own neighbourhood, when denser
    bulk, with_largest = np.maximum(bulk, sampled), np.maximum(with_largest, sampled)
    bulk = np.logaddexp(bulk, known)
    with_largest = np.logaddexp(with_largest, known)
    lone = np.logaddexp(0.0, bulk - shift - a_subject)
    joint = np.logaddexp(0.0, with_largest - shift - a_subject)
    lid = np.asarray(math.log2(N) - ((1.0 - p_any) * lone + p_any * joint) / LN2)
    room = math.log(math.expm1(margin * LN2)) + a_subject + shift  # ln of the sum allowed
    free = room > bulk
    gap = np.where(free, room + np.log(-np.expm1(np.minimum(bulk - room, -1e-300))), 0.0)
    level = gap / np.where(t > 0, t, 1.0)  # the z no modelled impostor may exceed
    exceed = np.minimum(model.survival_of(level), 1.0 - 1e-16)
    at_ceiling = np.exp(max(modelled, 0.0) * np.log1p(-exceed))
    return lid, np.where(free, at_ceiling, 0.0)


def _srd(
    x: FloatArray, above: FloatArray, N: float, modelled: float, ab: tuple[float, float]
) -> FloatArray:
    """log2(N·E[γ_rank]), rank − 1 = above + Binomial(modelled, x), γ the beta-binomial of
    (α, β): the rank model's mass on the subject when its rank among N is uncertain."""
    alpha, beta = ab
    n = N - 1.0
    lam = modelled * x

    def bits(j: FloatArray) -> FloatArray:
        # log2(N·γ_{j+1}) = [ln B(j+α, n−j+β) − ln B(j+1, n−j+1) − ln B(α, β)] / ln 2
        j = np.clip(j, 0.0, n)
        return np.asarray(
            (betaln(j + alpha, n - j + beta) - betaln(j + 1.0, n - j + 1.0) - betaln(alpha, beta))
            / LN2
        )

    point = bits(above + lam)
    if modelled < 1.0:
        return point
    k = np.arange(min(_POISSON_TERMS, int(modelled) + 1), dtype=np.float64)
    log_comb = -math.log(modelled + 1.0) - betaln(k + 1.0, modelled - k + 1.0)  # ln C(m, k)
    xs = np.clip(x, 1e-300, 1.0 - 1e-16)[:, None]
    log_w = log_comb[None, :] + k[None, :] * np.log(xs) + (modelled - k[None, :]) * np.log1p(-xs)
    log_w -= np.logaddexp.reduce(log_w, axis=1, keepdims=True)
    summed = np.logaddexp.reduce(log_w + bits(above[:, None] + k[None, :]) * LN2, axis=1) / LN2
    return np.where(lam <= _POISSON_LIMIT, summed, point)


@dataclass(frozen=True)
class _Bucket:
    """One calibration bucket as the figures use it: the LID weight w, the rank model's (α, β),
    the calibrated LLR's intercept b' (LLR = w·z + b') and the identities the rank model was
    fitted among (None: neither is known, the figures rest on the sample alone)."""

    w: float
    ab: tuple[float, float]
    llr_bias: float | None
    rank_identities: float | None


def _figures(
    model: PopulationModel, row: _Row, N: float, bucket: _Bucket, margin: float
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """LID bits, P(LID at the ceiling), SRD bits, P(rank 1) and expected rank, (R,) each.

    The rank model (α, β) is fitted on ranks among ``rank_identities``: it says nothing about
    relative ranks finer than that (β runs to its bound when every dev trial is rank 1), so
    against a larger population SRD is the rank model's at the subject's relative rank among
    the identities it was fitted on, at most log2 of their number."""
    z = row.d / row.sigma
    x = model.survival_of(z)
    above = np.zeros(z.shape)
    modelled = N - 1.0
    if row.present is not None:  # the present impostors above the subject are counted
        above = (row.present > z[:, None]).sum(axis=1) + 0.5 * (row.present == z[:, None]).sum(
            axis=1
        )
        modelled = max(N - 1.0 - row.present.shape[1], 0.0)
    rank1 = np.where(above == 0, np.exp(modelled * np.log1p(-np.minimum(x, 1.0 - 1e-16))), 0.0)
    lid, at_ceiling = _lid(model, row, N, (bucket.w, bucket.llr_bias), margin)
    fitted = bucket.rank_identities
    if fitted is not None and fitted < N:
        share = (above + modelled * x) / (N - 1.0)  # the subject's relative rank
        srd = _srd(share, np.zeros(z.shape), fitted, fitted - 1.0, bucket.ab)
    else:
        srd = _srd(x, above, N, modelled, bucket.ab)
    return lid, at_ceiling, srd, rank1, 1.0 + above + modelled * x


def _checked(
    population: float, lid_weight: float, alpha: float, beta: float, margin_bits: float
) -> tuple[float, float]:
    """N_pop and the margin as floats; a value out of range raises ValueError naming it."""
    N = float(population)
    if not (math.isfinite(N) and 2 <= N <= MAX_POPULATION):
        raise ValueError(f"population must be in [2, {MAX_POPULATION:g}], got {population!r}")
    if not (math.isfinite(lid_weight) and alpha > 0 and beta > 0):
        raise ValueError(
            f"need a finite LID weight and α, β > 0; got {lid_weight}, {alpha}, {beta}"
        )
    margin = float(margin_bits)
    if not (math.isfinite(margin) and margin > 0):
        raise ValueError(f"margin_bits must be > 0, got {margin_bits!r}")
    return N, margin


def _bucket(
    w: float,
    ab: tuple[float, float],
    bias: float | None,
    prior: float | None,
    identities: float | None,
) -> _Bucket:
    """The bucket's parameters checked: b' = b − ln(prior odds) when both are given, the
    rank model's identities from ``identities`` or else from the prior odds (−ln(N − 1))."""
    known = [v for v in (bias, prior, identities) if v is not None]
    if not all(math.isfinite(float(v)) for v in known):
        raise ValueError(f"lid_bias, log_prior_odds and rank_identities must be finite: {known}")
    if identities is None and prior is not None:
        identities = 1.0 + math.exp(-float(prior))
    if identities is not None and not float(identities) >= 3:
        raise ValueError(f"rank_identities must be >= 3, got {identities!r}")
    llr_bias = None if bias is None or prior is None else float(bias) - float(prior)
    rank = None if identities is None else float(identities)
    return _Bucket(float(w), (float(ab[0]), float(ab[1])), llr_bias, rank)


def population_figures(
    scores: npt.ArrayLike,
    subject: npt.ArrayLike,
    *,
    model: PopulationModel,
    population: float,
    lid_weight: float,
    alpha: float,
    beta: float,
    margin_bits: float = 0.05,
    templates_in_population: bool = True,
    lid_bias: float | None = None,
    log_prior_odds: float | None = None,
    rank_identities: float | None = None,
    sample: npt.ArrayLike | None = None,
) -> PopulationFigures:
    """Figures of R windows against ``population`` identities (see the module doc).

    ``scores`` (R, N) or (N,): each window against the N templates present (N >= 3);
    ``subject`` (R,) or an int: the template the figures are about. With
    ``templates_in_population`` (the daemon's case) the N templates present are N of the
    population's members: their scores count as they are and only the N_pop − N others are
    modelled, so at N_pop = N the figures are the scorer's; without it (a check on held-out
    speakers) all N_pop − 1 impostors are modelled and the templates only give μ and σ.
    ``lid_bias``, ``log_prior_odds`` (LLR = w·z + b − log_prior_odds) and ``rank_identities``
    (default: the prior odds' N) bound the sum by the calibrated LR and SRD by the rank
    model's resolution (none: the sample alone). ``sample`` (N,): the templates present that
    are a random sample of the population (the shipped reference speakers)."""
    N, margin = _checked(population, lid_weight, alpha, beta, margin_bits)
    row = _rows(scores, subject, present=templates_in_population, sample=sample)
    if row.present is not None and row.present.shape[1] + 1 > N:
        raise ValueError(
            f"population {population!r} is below the {row.present.shape[1] + 1} templates present"
        )
    bucket = _bucket(lid_weight, (alpha, beta), lid_bias, log_prior_odds, rank_identities)
    lid, at_ceiling, srd, rank1, rank = _figures(model, row, N, bucket, margin)
    z = row.d / row.sigma
    beyond = (z > model.validated_z) & (model.validated_population < N)
    # what the sample vouches for: the subject among the top share p_valid of N identities
    p_valid = model.validated_survival
    bound_lid = math.log2(N) - math.log2(1.0 + (N - 1.0) * p_valid)
    at_least_lid = np.where(beyond, np.minimum(lid, bound_lid), lid)
    flat = row.flat
    if flat.any():  # no evidence: the uniform posterior, as the scorer gives a constant row
        lid, srd, at_least_lid = (np.where(flat, 0.0, v) for v in (lid, srd, at_least_lid))
        rank1, rank = np.where(flat, 1.0 / N, rank1), np.where(flat, (N + 1.0) / 2.0, rank)
        at_ceiling = np.where(flat, 0.0, at_ceiling)
    return PopulationFigures(
        population=N,
        ceiling_bits=math.log2(N),
        lid_bits=lid,
        srd_bits=srd,
        lid_at_least_bits=at_least_lid,
        rank1_probability=rank1,
        ceiling_probability=at_ceiling,
        expected_rank=rank,
        subject_z=z,
        beyond_reference=beyond,
        tail_decides=model.validated_population < N,
    )
