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
    - LID (paper 003's softmax over N_pop identities): the row z-norm of N_pop scores and the
      softmax denominator over N_pop − 1 impostors, Σ e^(w·z_j), taken as its typical value:
      (N_pop − 1) times the mean of e^(w·z) below the 1/(N_pop − 1) quantile (the sum's bulk),
      plus, with the probability that one occurs, one impostor from beyond it (the sum's
      largest term). Past the sample's size the bulk is (N_pop − 1) times the sample's mean,
      so the LR e^(w·z_i)/mean is calibrated on the reference (E[LR | impostor] = 1, paper
      001) and LID tends to log2 LR: P(true) ≈ LR/(LR + N_pop − 1). Nothing loops over N_pop:
      the cost is O(N + K) per window, K grid points.
    - Beyond the reference: the sample vouches for survivals down to ``validated_survival``,
      i.e. for populations up to ``validated_population``. A subject above ``validated_z``
      in a larger population is stronger than anything the reference can compare it with:
      the figures then show what the sample does vouch for — the subject among the top
      share p_valid, log2 N − log2(1 + (N − 1)·p_valid) bits of LID (SRD at x = p_valid) —
      a lower bound, "at least X bits" (``*_at_least_bits``), with ``beyond_reference`` set.
      ``lid_bits``/``srd_bits`` stay the model's estimate everywhere: the figure that ranks
      windows and that a budget compares (a budget must not be escaped because the reference
      is small), shown beside what the reference vouches for.

Public API (pure math, no I/O; arrays in, frozen dataclasses out)
    fit_population_model(scores (T, N), truth (T,), *, seconds) -> PopulationModel
        ``scores``: similarities (or the fused ``combined`` score) of T windows of reference
        speakers of about ``seconds`` of speech against the N reference templates; ``truth``:
        each window's own template (a window whose speaker has no template: −1, all N are
        impostors). Fit one model per feature and calibration bucket.
    PopulationSet({feature: (model, ...)}) — ``lookup(feature, seconds)`` picks a bucket as
        CalibrationSet.lookup does; ``to_arrays()`` → ``dict[str, np.ndarray]`` (a few KB,
        ``np.savez``-able) and ``PopulationSet.from_arrays(mapping)`` reads it back, checking
        shapes and finiteness (``ValueError`` naming the key).
    population_figures(scores (R, N) or (N,), subject (R,) or int, *, model, population,
        lid_weight, alpha, beta) -> PopulationFigures with (R,) arrays: ``lid_bits``,
        ``srd_bits`` (the model's figures),
        ``lid_at_least_bits``, ``srd_at_least_bits``, ``rank1_probability``,
        ``ceiling_probability`` (within ``margin_bits``, default 0.05, of the ceiling),
        ``expected_rank``, ``subject_z``, ``beyond_reference``; scalars ``ceiling_bits``
        = log2 N_pop and ``tail_decides`` (N_pop above ``validated_population``: claims about
        impostors rarer than the sample holds rest on the model). ``lid_weight`` / ``alpha`` /
        ``beta`` are the calibration bucket's (``BucketCalibration``). The budget's figure
        is the one of its (feature, measure); ``combined`` takes the scorer's fused row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.special import betaln

FloatArray = npt.NDArray[np.float64]
LN2 = math.log(2.0)
MIN_IMPOSTORS = 2
"""Fewest impostor scores in a row: μ and σ need two (fewer than ~30 make them noisy)."""
MAX_POPULATION = 1e10
"""Largest population a figure is stated against (the world is 8·10⁹)."""
VALIDATING_PAIRS = 10
"""Distinct (speaker, impostor) pairs that must lie above a survival for the sample to vouch
for it: the windows of one pair are not independent evidence about the impostor tail."""
_BODY_POINTS = 128  # grid points spread evenly in probability over the body
_TAIL_POINTS = 128  # grid points spread geometrically in survival over the upper tail
_TAIL_SHARE = 0.05  # survival below which the grid is geometric
_TAIL_FIT_SHARE = 0.01  # the exponential tail's rate is fitted on the top share of the sample
_POISSON_TERMS = 24  # ranks summed exactly for SRD while the expected rank is small
_POISSON_LIMIT = 6.0  # expected impostors above the subject below which the sum is used


@dataclass(frozen=True)
class PopulationModel:
    """Pooled impostor z of one feature at one evidence length (``seconds``, the bucket edge).

    ``z`` (K,) increasing and ``survival`` (K,) decreasing from 1: P(Z > z_k); beyond z[-1]
    survival[-1]·e^(−tail_rate·(z − z[-1])). ``validated_survival``: smallest P(Z > z) the
    sample vouches for. ``speakers``/``windows``/``scores``: what the fit saw.
    """

    seconds: float
    z: FloatArray
    survival: FloatArray
    tail_rate: float
    validated_survival: float
    speakers: int
    windows: int
    scores: int

    def __post_init__(self) -> None:
        z = np.asarray(self.z, dtype=np.float64)
        s = np.asarray(self.survival, dtype=np.float64)
        if z.ndim != 1 or z.shape != s.shape or z.size < 2:
            raise ValueError(
                f"z and survival must be (K,) arrays, K >= 2; got {z.shape}, {s.shape}"
            )
        if not (np.isfinite(z).all() and np.isfinite(s).all()):
            raise ValueError("z and survival must be finite")
        if np.any(np.diff(z) < 0) or np.any(np.diff(s) > 0) or s[0] != 1.0 or not s[-1] > 0:
            raise ValueError("z must increase and survival decrease from 1 to a positive value")
        if not (math.isfinite(self.tail_rate) and self.tail_rate > 0):
            raise ValueError(f"tail_rate must be finite and > 0, got {self.tail_rate!r}")
        if not 0 < self.validated_survival <= 1:
            raise ValueError(f"validated_survival must be in (0, 1], got {self.validated_survival}")
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise ValueError(f"seconds must be > 0, got {self.seconds!r}")
        object.__setattr__(self, "z", z)
        object.__setattr__(self, "survival", s)

    @property
    def validated_z(self) -> float:
        """The largest subject z the sample can compare with other speakers' scores."""
        return float(self.quantile(np.array([self.validated_survival]))[0])

    @property
    def validated_population(self) -> float:
        """N_pop up to which the impostors' sample covers the softmax denominator's bulk."""
        return 1.0 + 1.0 / self.validated_survival

    def survival_of(self, z: FloatArray) -> FloatArray:
        """P(Z > z) for any z (R,): the grid (log-linear), then the exponential tail."""
        z = np.asarray(z, dtype=np.float64)
        log_s = np.interp(z, self.z, np.log(self.survival), left=0.0)
        beyond = z > self.z[-1]
        log_s[beyond] = math.log(self.survival[-1]) - self.tail_rate * (z[beyond] - self.z[-1])
        return np.exp(log_s)

    def quantile(self, survival: FloatArray) -> FloatArray:
        """The z (R,) with P(Z > z) = survival (R,) in (0, 1]; the inverse of survival_of."""
        p = np.asarray(survival, dtype=np.float64)
        log_p = np.log(p)
        low = math.log(self.survival[-1])
        z = np.interp(-log_p, -np.log(self.survival), self.z)
        deep = log_p < low
        z[deep] = self.z[-1] + (low - log_p[deep]) / self.tail_rate
        return z

    def denominator(self, t: FloatArray, impostors: float) -> tuple[FloatArray, FloatArray, float]:
        """Typical Σ_j e^(t·z_j) over ``impostors`` draws, per slope t (R,): see the module doc.

        Returns ln of the bulk, n·E[e^(tZ); P(Z > z) ≥ 1/n] (a sum of many small terms
        concentrates), ln of the largest term (one impostor at the median of those beyond
        that quantile), each (R,), and the probability that such a term occurs at all. Past
        the sample's own size the bulk is n times the sample's mean and no term is apart (the
        law of large numbers): the fitted tail never enters the denominator, which is what
        keeps E[LR | impostor] = 1 on the reference sample (paper 001's framing)."""
        t = np.asarray(t, dtype=np.float64)
        n = float(impostors)
        q = 1.0 / n
        p_last = float(self.survival[-1])
        s_hi = np.maximum(self.survival, q)
        s_lo = np.append(np.maximum(self.survival[1:], q), q if q > p_last else 0.0)
        mass = s_hi - s_lo  # (K,) probability of each interval above survival q; the top
        kept = mass > 0  # point carries the sample's last 1/n_sample
        at = np.append(0.5 * (self.z[:-1] + self.z[1:]), self.z[-1])[kept]
        bulk = np.logaddexp.reduce(t[:, None] * at[None, :] + np.log(mass[kept])[None, :], axis=1)
        bulk += math.log(n)
        if q <= p_last:
            return bulk, np.full(t.shape, -np.inf), 0.0
        largest = t * float(self.quantile(np.array([max(0.5 * q, p_last)]))[0])
        p_any = -math.expm1(n * math.log1p(-q)) if q < 1 else 1.0
        return bulk, largest, p_any

    def to_arrays(self, prefix: str = "") -> dict[str, FloatArray]:
        """The model as named arrays (``prefix`` + name) for ``np.savez``; see from_arrays."""
        scalars = (self.seconds, self.tail_rate, self.validated_survival)
        counts = (self.speakers, self.windows, self.scores)
        return {
            f"{prefix}z": self.z,
            f"{prefix}survival": self.survival,
            f"{prefix}scalars": np.array(scalars, dtype=np.float64),
            f"{prefix}counts": np.array(counts, dtype=np.float64),
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, npt.ArrayLike], prefix: str = "") -> PopulationModel:
        """Read :meth:`to_arrays` back; a missing, misshapen or non-finite array raises
        ``ValueError`` naming its key."""
        values: dict[str, FloatArray] = {}
        for name, shape in (("z", None), ("survival", None), ("scalars", (3,)), ("counts", (3,))):
            key = prefix + name
            if key not in arrays:
                raise ValueError(f"population model: array {key!r} is missing")
            value = np.asarray(arrays[key], dtype=np.float64)
            if (shape is not None and value.shape != shape) or not np.isfinite(value).all():
                raise ValueError(f"population model: array {key!r} is misshapen or not finite")
            values[name] = value
        seconds, rate, validated = (float(v) for v in values["scalars"])
        speakers, windows, scores = (int(v) for v in values["counts"])
        try:
            return cls(
                seconds, values["z"], values["survival"], rate, validated, speakers, windows, scores
            )
        except ValueError as error:
            raise ValueError(f"population model {prefix or 'arrays'}: {error}") from error


def fit_population_model(
    scores: npt.ArrayLike, truth: npt.ArrayLike, *, seconds: float
) -> PopulationModel:
    """Pool the row-normalised impostor scores of T reference windows into a model.

    ``scores`` (T, N): each window against the N reference templates; ``truth`` (T,): the
    window's own template, or −1 when its speaker has none. Rows whose impostors all score the
    same say nothing about the population's spread and are left out.
    """
    S = np.asarray(scores, dtype=np.float64)
    m = np.asarray(truth, dtype=np.int64)
    if S.ndim != 2 or m.shape != (S.shape[0],):
        raise ValueError(f"scores must be (T, N) and truth (T,); got {S.shape} and {m.shape}")
    if not np.isfinite(S).all():
        raise ValueError("scores must be finite")
    T, N = S.shape
    if np.any((m < -1) | (m >= N)):
        raise ValueError(f"truth must hold template indices in [-1, {N})")
    impostor = np.ones((T, N), dtype=bool)
    own = m >= 0
    impostor[np.flatnonzero(own), m[own]] = False
    count = impostor.sum(axis=1)
    if T == 0 or count.min() < MIN_IMPOSTORS:
        raise ValueError(f"every window needs >= {MIN_IMPOSTORS} impostor scores (N = {N})")
    mu, sigma = _impostor_moments(S, impostor, count)
    live = sigma > 0
    if not live.any():
        raise ValueError("every window's impostors score the same: nothing to fit")
    z = (S[live] - mu[live, None]) / sigma[live, None]
    sample = np.sort(z[impostor[live]])
    pairs = np.unique(m[live][own[live]]).size * (N - 1) + int(np.count_nonzero(~own[live])) * N
    return _grid_model(sample, seconds=seconds, speakers=N, windows=int(live.sum()), pairs=pairs)


def _impostor_moments(
    S: FloatArray, impostor: npt.NDArray[np.bool_], count: npt.NDArray[np.int64]
) -> tuple[FloatArray, FloatArray]:
    """Mean and standard deviation (ddof 0) of each row's impostor scores, (T,) each."""
    mu = np.where(impostor, S, 0.0).sum(axis=1) / count
    centred = np.where(impostor, S - mu[:, None], 0.0)
    sigma = np.sqrt(np.einsum("ij,ij->i", centred, centred) / count)
    return mu, sigma


def _grid_model(
    sample: FloatArray, *, seconds: float, speakers: int, windows: int, pairs: int
) -> PopulationModel:
    """Quantile grid and exponential tail of a sorted sample of impostor z."""
    n = sample.size
    p_last = 1.0 / n
    survival = np.unique(
        np.concatenate(
            (
                np.linspace(1.0, _TAIL_SHARE, _BODY_POINTS),
                np.geomspace(_TAIL_SHARE, p_last, _TAIL_POINTS),
            )
        )
    )[::-1]
    grid = np.quantile(sample, 1.0 - survival)
    grid[0] = sample[0]
    top = sample[math.floor((1.0 - _TAIL_FIT_SHARE) * n) :]
    excess = float(np.mean(top - top[0])) if top.size > 1 else 0.0
    rate = 1.0 / excess if excess > 0 else 1.0 / max(float(np.std(sample)), 1e-6)
    validated = min(1.0, max(VALIDATING_PAIRS / max(pairs, 1), p_last))
    return PopulationModel(
        seconds=float(seconds),
        z=np.maximum.accumulate(grid),
        survival=survival,
        tail_rate=rate,
        validated_survival=validated,
        speakers=speakers,
        windows=windows,
        scores=n,
    )


@dataclass(frozen=True)
class PopulationFigures:
    """Figures of R windows against a population of ``population`` identities (bits, (R,)).

    ``lid_bits``/``srd_bits`` are the model's figures (what a budget compares);
    ``*_at_least_bits`` what the reference vouches for: equal to them, except where
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
    srd_at_least_bits: FloatArray
    rank1_probability: FloatArray
    ceiling_probability: FloatArray
    expected_rank: FloatArray
    subject_z: FloatArray
    beyond_reference: npt.NDArray[np.bool_]
    tail_decides: bool


def _rows(
    scores: npt.ArrayLike, subject: npt.ArrayLike
) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """Subject score d above the impostor mean, the impostors' σ and rows whose impostors all
    score the same (they carry no evidence: d = 0, σ = 1), (R,) each; checks the input."""
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
    mu, sigma = _impostor_moments(S, impostor, np.full(R, N - 1))
    d = S[np.arange(R), i] - mu
    flat = sigma <= 1e-12 * np.maximum(np.abs(mu), 1.0)
    return np.where(flat, 0.0, d), np.where(flat, 1.0, sigma), flat


def _lid(
    model: PopulationModel, d: FloatArray, sigma: FloatArray, N: float, w: float, margin: float
) -> tuple[FloatArray, FloatArray]:
    """Typical log2(N·P(subject)) of the softmax over N identities, row z-norm included, and
    the probability that the figure is within ``margin`` bits of log2 N: that the bulk leaves
    room and no impostor of the N − 1 scores above the level that would take it away."""
    n = N - 1.0
    sd = np.sqrt(sigma**2 * n / N + d**2 * n / N**2)  # deviation of the N scores of the row
    a_subject = w * d * n / (N * sd)
    shift = w * d / (N * sd)  # impostor j: w·(σ·z_j − d/N)/sd = t·z_j − shift
    t = w * sigma / sd
    bulk, largest, p_any = model.denominator(t, n)
    with_largest = np.logaddexp(bulk, largest)
    lone = np.logaddexp(0.0, bulk - shift - a_subject)
    joint = np.logaddexp(0.0, with_largest - shift - a_subject)
    lid = np.asarray(math.log2(N) - ((1.0 - p_any) * lone + p_any * joint) / LN2)
    room = math.log(math.expm1(margin * LN2)) + a_subject + shift  # ln of the sum allowed
    free = room > bulk
    gap = np.where(free, room + np.log(-np.expm1(np.minimum(bulk - room, -1e-300))), 0.0)
    level = gap / np.where(t > 0, t, 1.0)  # the z one impostor may not exceed
    at_ceiling = np.exp(n * np.log1p(-np.minimum(model.survival_of(level), 1.0 - 1e-16)))
    return lid, np.where(free, at_ceiling, 0.0)


def _srd(x: FloatArray, N: float, alpha: float, beta: float) -> FloatArray:
    """log2(N·E[γ_rank]), rank − 1 ~ Binomial(N − 1, x), γ the beta-binomial of (α, β): the
    rank model's mass on the subject when its rank among N is uncertain."""
    n = N - 1.0
    lam = n * x

    def bits(j: FloatArray) -> FloatArray:
        # log2(N·γ_{j+1}) = [ln B(j+α, n−j+β) − ln B(j+1, n−j+1) − ln B(α, β)] / ln 2
        return np.asarray(
            (betaln(j + alpha, n - j + beta) - betaln(j + 1.0, n - j + 1.0) - betaln(alpha, beta))
            / LN2
        )

    point = bits(np.clip(lam, 0.0, n))
    k = np.arange(min(_POISSON_TERMS, int(n) + 1), dtype=np.float64)
    log_comb = -math.log(n + 1.0) - betaln(k + 1.0, n - k + 1.0)  # ln C(n, k)
    xs = np.clip(x, 1e-300, 1.0 - 1e-16)[:, None]
    log_w = log_comb[None, :] + k[None, :] * np.log(xs) + (n - k[None, :]) * np.log1p(-xs)
    weights = np.exp(log_w - np.logaddexp.reduce(log_w, axis=1, keepdims=True))
    summed = np.logaddexp.reduce(
        np.log(np.maximum(weights, 1e-300)) + bits(k)[None, :] * LN2, axis=1
    )
    return np.where(lam <= _POISSON_LIMIT, summed / LN2, point)


def _figures(
    model: PopulationModel,
    d: FloatArray,
    sigma: FloatArray,
    N: float,
    w: float,
    ab: tuple[float, float],
    margin: float,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """LID bits, P(LID at the ceiling), SRD bits, P(rank 1) and expected rank, (R,) each."""
    x = model.survival_of(d / sigma)
    n = N - 1.0
    rank1 = np.exp(n * np.log1p(-np.minimum(x, 1.0 - 1e-16)))
    lid, at_ceiling = _lid(model, d, sigma, N, w, margin)
    return lid, at_ceiling, _srd(x, N, *ab), rank1, 1.0 + n * x


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
) -> PopulationFigures:
    """Figures of R windows against ``population`` identities (see the module doc).

    ``scores`` (R, N) or (N,): each window against the N templates present (N >= 3);
    ``subject`` (R,) or an int: the template the figures are about.
    """
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
    d, sigma, flat = _rows(scores, subject)
    ab = (float(alpha), float(beta))
    lid, at_ceiling, srd, rank1, rank = _figures(model, d, sigma, N, float(lid_weight), ab, margin)
    z = d / sigma
    beyond = (z > model.validated_z) & (model.validated_population < N)
    # what the sample vouches for: the subject among the top share p_valid of N identities
    p_valid = model.validated_survival
    bound_lid = math.log2(N) - math.log2(1.0 + (N - 1.0) * p_valid)
    bound_srd = _srd(np.array([p_valid]), N, *ab)[0]
    shown_lid = np.where(beyond, np.minimum(lid, bound_lid), lid)
    shown_srd = np.where(beyond, np.minimum(srd, bound_srd), srd)
    if flat.any():  # no evidence: the uniform posterior, as the scorer gives a constant row
        lid, srd, shown_lid, shown_srd = (
            np.where(flat, 0.0, x) for x in (lid, srd, shown_lid, shown_srd)
        )
        rank1, rank = np.where(flat, 1.0 / N, rank1), np.where(flat, (N + 1.0) / 2.0, rank)
        at_ceiling = np.where(flat, 0.0, at_ceiling)
    return PopulationFigures(
        population=N,
        ceiling_bits=math.log2(N),
        lid_bits=lid,
        srd_bits=srd,
        lid_at_least_bits=shown_lid,
        srd_at_least_bits=shown_srd,
        rank1_probability=rank1,
        ceiling_probability=at_ceiling,
        expected_rank=rank,
        subject_z=z,
        beyond_reference=beyond,
        tail_decides=model.validated_population < N,
    )


@dataclass(frozen=True)
class PopulationSet:
    """Models per feature (``f0``, ``phone``, ``embedding``, ``combined``), one per bucket."""

    features: Mapping[str, tuple[PopulationModel, ...]]

    def __post_init__(self) -> None:
        ordered = {}
        for name, models in self.features.items():
            edges = [m.seconds for m in models]
            if not models or len(set(edges)) != len(edges):
                raise ValueError(f"population models of {name!r}: none, or a bucket repeated")
            ordered[name] = tuple(sorted(models, key=lambda m: m.seconds))
        object.__setattr__(self, "features", ordered)

    def lookup(self, feature: str, seconds: float) -> PopulationModel:
        """The model of the largest bucket <= ``seconds`` (the first below it)."""
        if feature not in self.features:
            raise ValueError(f"no population model for feature {feature!r}")
        models = self.features[feature]
        index = int(np.searchsorted([m.seconds for m in models], seconds, side="right")) - 1
        return models[max(index, 0)]

    def to_arrays(self) -> dict[str, FloatArray]:
        """Every model's arrays under ``<feature>/<seconds>/`` keys (``np.savez``-able)."""
        out: dict[str, FloatArray] = {}
        for name, models in self.features.items():
            for model in models:
                out.update(model.to_arrays(f"{name}/{model.seconds:g}/"))
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, npt.ArrayLike]) -> PopulationSet:
        """Read :meth:`to_arrays` back (``ValueError`` naming a bad key)."""
        prefixes = sorted({key.rsplit("/", 1)[0] for key in arrays if key.count("/") == 2})
        if not prefixes:
            raise ValueError("population models: no '<feature>/<seconds>/z' arrays")
        features: dict[str, list[PopulationModel]] = {}
        for prefix in prefixes:
            features.setdefault(prefix.split("/")[0], []).append(
                PopulationModel.from_arrays(arrays, prefix + "/")
            )
        return cls({name: tuple(models) for name, models in features.items()})
