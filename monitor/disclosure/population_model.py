"""The population model's data: pooled impostor z of the reference, fitted and serialised.

See :mod:`monitor.disclosure.population` for what the model is and the figures it gives; this
module holds the fit (:func:`fit_population_model`), one bucket's model
(:class:`PopulationModel`) and a model per feature and bucket (:class:`PopulationSet`), with
their arrays for package data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
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
    mu, sigma = impostor_moments(S, impostor, count)
    live = sigma > 0
    if not live.any():
        raise ValueError("every window's impostors score the same: nothing to fit")
    z = (S[live] - mu[live, None]) / sigma[live, None]
    sample = np.sort(z[impostor[live]])
    pairs = np.unique(m[live][own[live]]).size * (N - 1) + int(np.count_nonzero(~own[live])) * N
    return _grid_model(sample, seconds=seconds, speakers=N, windows=int(live.sum()), pairs=pairs)


def impostor_moments(
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


MIN_BUCKET_WINDOWS = 40
"""Fewest windows a bucket's own model is fitted on; a bucket with fewer takes its neighbour's
(PopulationSet.lookup: the largest bucket at or below the length, else the first)."""


def fit_population_set(
    scores: Mapping[str, npt.ArrayLike],
    truth: npt.ArrayLike,
    seconds: npt.ArrayLike,
    *,
    buckets: Mapping[str, npt.ArrayLike],
) -> PopulationSet:
    """A model per feature and calibration bucket from T windows of reference speakers.

    ``scores``: feature → (T, N) scores of each window against the N reference templates (for
    ``combined``, the scorer's fused row); ``truth`` (T,) each window's template (−1: none);
    ``seconds`` (T,) speech behind each window; ``buckets``: feature → the calibration's
    bucket edges (seconds, ascending). Windows of every length a day pools are welcome: each
    bucket is fitted on the windows that fall in it, as the scorer picks a bucket.
    """
    m = np.asarray(truth, dtype=np.int64)
    length = np.asarray(seconds, dtype=np.float64)
    if m.ndim != 1 or length.shape != m.shape:
        raise ValueError(f"truth and seconds must be (T,) arrays; got {m.shape}, {length.shape}")
    features: dict[str, tuple[PopulationModel, ...]] = {}
    for name, S in scores.items():
        matrix = np.asarray(S, dtype=np.float64)
        edges = np.sort(np.asarray(buckets[name], dtype=np.float64))
        if edges.size == 0:
            raise ValueError(f"no bucket edges for feature {name!r}")
        index = np.maximum(np.searchsorted(edges, length, side="right") - 1, 0)
        models = [
            fit_population_model(matrix[index == k], m[index == k], seconds=float(edges[k]))
            for k in range(edges.size)
            if np.count_nonzero(index == k) >= MIN_BUCKET_WINDOWS
        ]
        if not models:  # too few windows for any bucket alone: one model from all of them
            models = [fit_population_model(matrix, m, seconds=float(edges[index.min()]))]
        features[name] = tuple(models)
    return PopulationSet(features)
