"""Scoring a track's evidence against all N templates.

:class:`Scorer` is the synchronous core: given the pooled observations of a track and the seconds
of speech behind them, it computes one similarity vector per feature against every template,
picks the calibration bucket of that length, builds the fused ``combined`` score, and
turns each into SRD (log2(N·γ_r)) and LID (log2(N·P(l|s))) figures.

Everything is O(N) per feature: the rank of one identity is a count of larger scores (tied
identities share the mass of their ranks, exactly as :func:`identity_posterior`), so 10⁵
templates need no sort. The heavy part, the similarities, reads each feature's templates once
per window for both the pooled evidence and the window alone, in float32 by default (scores
within ~1e-7 of float64; ``dtype=np.float64`` gives the library's figures to rounding).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from monitor.calibration.buckets import CalibrationSet
from monitor.disclosure.composition import kairouz_advanced, nats_to_bits, optimal
from monitor.disclosure.ranks import single_threaded_blas
from monitor.disclosure.srd import betabinom_pmf
from monitor.events.messages import CompositionBounds, Disclosure
from monitor.features.base import Feature, Observation, TemplateBatch
from monitor.scoring.population import PopulationView
from monitor.vocabulary import COMBINED, SimilarityKind

LN2 = math.log(2.0)
FloatArray = npt.NDArray[np.floating]  # float64 figures; float32 where templates are stored
Bits = dict[tuple[str, str], float]
_JsPlan = tuple[npt.NDArray[np.intp] | None, FloatArray, float, FloatArray]
"""One test's plan for :meth:`_js`: bins summed (None: all), scaled p there, −H(p), sums."""


@lru_cache(maxsize=64)
def _rank_cdf(N: int, alpha: float, beta: float) -> FloatArray:
    """(N+1,) cumulative γ with a leading 0: γ_k summed over ranks 1..k (read-only)."""
    cdf = np.concatenate(([0.0], np.cumsum(betabinom_pmf(N, alpha, beta))))
    cdf.flags.writeable = False
    return cdf


def _xlogx(x: FloatArray) -> FloatArray:
    """x·log2(x) with 0·log 0 = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, x * np.log2(np.where(x > 0, x, 1.0)), 0.0)


def _znorm(scores: FloatArray) -> FloatArray:
    """z-scores of one row (ddof 0), 0 where all are equal: monitor.disclosure.lid.znorm_rows."""
    z: FloatArray = scores - scores.mean()  # numpy's stubs give array arithmetic as Any
    if scores.max() == scores.min():
        z[:] = 0.0
        return z
    z /= math.sqrt(float(np.einsum("i,i->", z, z)) / z.size)  # not BLAS: no spinning threads
    return z


def _log_softmax(z: FloatArray, weight: float) -> FloatArray:
    """ln P(j) = log-softmax_j(w·z_j) (nats): lid_log_posteriors of a row already z-normed."""
    a: FloatArray = float(weight) * z
    a -= a.max()
    a -= math.log(float(np.exp(a).sum()))
    return a


_BLOCK = 8192  # templates per block (3.5 MB at 107 bins): fastest of 2048–8192 measured
_COSINE_BLOCK = 1024  # embedding rows per block (1 MB in float32)
_FULL_SUPPORT = 0.65  # above this share of non-empty bins take every bin (break-even ~0.65–0.7)
_FLOOR = 2.0**-60  # stored instead of q = 0: r·log2 r stays finite, normal, and ≈ 5e-17


def _sum_rows(a: FloatArray) -> FloatArray:
    """Column sums of ``a`` (K, B) by pairwise halving, in place: the rounding error grows as
    log2 K instead of K, which is what keeps float32 sums of ~100 bins near 1e-7."""
    k = a.shape[0]
    while k > 1:
        half = k // 2
        a[:half] += a[k - half : k]
        k -= half
    total: FloatArray = a[0]  # an integer index is typed Any by numpy's stubs
    return total


class PreparedTemplates:
    """Templates of one feature laid out once for fast scoring of a few tests at a time.

    The figures are those of :mod:`monitor.features.similarity` (−JS divergence in bits for
    histograms, cosine for embeddings) up to rounding in ``dtype``: float32 halves the memory
    read per window and its SIMD logarithm is ~3× faster; scores then differ from float64 by
    < 1e-6, far below differences that matter for ranks or posteriors (tests check both).

    Histograms use JS = 1 + ½(Σ p log2 p + Σ q log2 q − Σ r log2 r) with r = p + q (m = r/2),
    so per window only Σ r log2 r needs logarithms; bins where p = 0 contribute q log2 q
    exactly, so either every bin is taken (r = q there and −H(Q) is precomputed) or, for a
    sparse test, only its support with the precomputed q log2 q subtracted. Every feature
    declares its ``similarity_kind`` (the Feature protocol), so no other layout is needed.
    """

    def __init__(self, feature: Feature, batch: TemplateBatch, *, dtype: type = np.float32) -> None:
        self.n = len(batch)
        self.dtype = np.dtype(dtype)
        matrix = batch.matrix
        kind: SimilarityKind = feature.similarity_kind
        if kind == "histogram":
            totals = matrix.sum(axis=1)
            self.rows_ok = totals > 0
            q = np.ascontiguousarray((matrix / np.where(self.rows_ok, totals, 1.0)[:, None]).T)
            self.kind = "js"
            self.neg_h_q = _xlogx(q).sum(axis=0)  # (N,) float64
            # stored ×2^k (exact) so r = p + q is near 1 and log2 r near 0, where float32
            # logarithms have the smallest absolute error; undone after the sums
            self.scale_exp = max(0, round(math.log2(q.shape[0] / 2)))
            q *= 2.0**self.scale_exp
            self.q_by_bin = np.maximum(q, _FLOOR).astype(self.dtype)  # (D, N): bins are rows
            self.qlogq_by_bin = _xlogx(q).astype(self.dtype)
        else:  # "embedding"
            norms = np.linalg.norm(matrix, axis=1)
            self.rows_ok = norms > 0
            self.kind = "cosine"
            self.unit = (matrix / np.where(self.rows_ok, norms, 1.0)[:, None]).astype(self.dtype)

    def similarity(self, test: Observation) -> FloatArray:
        """(N,) float64 similarity of one observation to every template."""
        return self.similarities([test])[0]

    def similarities(self, tests: Sequence[Observation]) -> list[FloatArray]:
        """(N,) float64 similarity of each observation; one pass over the templates for all."""
        values = [np.asarray(t.values, dtype=np.float64) for t in tests]
        if self.kind == "js":
            return [-js for js in self._js(values)]
        return self._cosine(values)

    def _cosine(self, tests: Sequence[FloatArray]) -> list[FloatArray]:
        norms = [float(np.linalg.norm(v)) for v in tests]
        live = [i for i, norm in enumerate(norms) if norm > 0]
        out: list[FloatArray] = [np.zeros(self.n) for _ in tests]
        if not live:
            return out
        vectors = [(tests[i] / norms[i]).astype(self.dtype) for i in live]
        products = np.empty((len(live), self.n), dtype=self.dtype)
        # one matrix-vector product per test on row blocks that stay in cache, so the matrix
        # is read from memory once (a (N, 2) matrix product is slower: BLAS packs the matrix);
        # single-threaded because a second BLAS thread only spins on a busy 2-core machine
        with single_threaded_blas():
            for start in range(0, self.n, _COSINE_BLOCK):
                rows = self.unit[start : start + _COSINE_BLOCK]
                for k, v in enumerate(vectors):
                    np.matmul(rows, v, out=products[k, start : start + _COSINE_BLOCK])
        for k, i in enumerate(live):
            cos = products[k].astype(np.float64)
            cos[~self.rows_ok] = 0.0
            out[i] = np.clip(cos, -1.0, 1.0, out=cos)
        return out

    def _scaled(self, p: FloatArray) -> FloatArray:
        """(K, 1) column of test probabilities in the stored scale and dtype."""
        return (p * 2.0**self.scale_exp).astype(self.dtype)[:, None]

    def _js_plan(self, counts: FloatArray) -> _JsPlan | None:
        """How one test is summed against every template: (bins summed — None for all of
        them, its scaled probabilities there, −H(p), the sums' row); None for an empty test.
        A test on few bins sums only those, far fewer than the templates' bins."""
        D, N = self.q_by_bin.shape
        if counts.shape[0] != D:
            raise ValueError(f"test has {counts.shape[0]} bins, templates {D}")
        if np.any(counts < 0) or not np.all(np.isfinite(counts)):
            raise ValueError("test counts must be finite and non-negative")
        total = counts.sum()
        if total <= 0:
            return None
        p = counts / total
        support = np.flatnonzero(p)
        ps = p[support]
        neg_h_p = float(ps @ np.log2(ps))
        if support.size >= _FULL_SUPPORT * D:
            return (None, self._scaled(p), neg_h_p, np.empty(N))
        return (support, self._scaled(ps), neg_h_p, np.empty(N))

    def _js(self, tests: Sequence[FloatArray]) -> list[FloatArray]:
        D, N = self.q_by_bin.shape
        plans = [self._js_plan(counts) for counts in tests]
        work = np.empty((D, _BLOCK), dtype=self.dtype)
        logs = np.empty((D, _BLOCK), dtype=self.dtype)
        for start in range(0, N, _BLOCK):
            stop = min(start + _BLOCK, N)
            width = stop - start
            for plan in plans:
                if plan is None:
                    continue
                rows, p_col, _, acc = plan
                if rows is None:  # every bin: r = q + p (q alone where p = 0)
                    r = np.add(self.q_by_bin[:, start:stop], p_col, out=work[:, :width])
                else:  # the test's support only; q log q of those bins subtracted below
                    r = self.q_by_bin[rows, start:stop]
                    r += p_col
                rlogr = np.log2(r, out=logs[: r.shape[0], :width])
                rlogr *= r
                if rows is not None:
                    rlogr -= self.qlogq_by_bin[rows, start:stop]
                acc[start:stop] = _sum_rows(rlogr)
        out: list[FloatArray] = []
        for plan in plans:
            if plan is None:
                out.append(np.ones(N))
                continue
            rows, _, neg_h_p, acc = plan
            # acc = Σ r' log2 r' over every bin, or Σ (r' log2 r' − q' log2 q') over the
            # support, with r' = 2^k r: 2^k (Σ r log2 r + k Σ r), Σ r = 2 (Σ_S r − Σ_S q = 1)
            k = self.scale_exp
            js = acc
            js *= 2.0**-k
            if rows is None:
                js -= 2 * k
                np.subtract(self.neg_h_q, js, out=js)
            else:
                js -= k
                np.negative(js, out=js)
            js += neg_h_p
            js *= 0.5
            js += 1.0
            np.clip(js, 0.0, 1.0, out=js)
            js[~self.rows_ok] = 1.0
            out.append(js)
        return out


@dataclass(frozen=True)
class FeatureScores:
    """One feature's view of some evidence: scores and the calibrated posteriors they imply."""

    feature: str
    scores: FloatArray  # (N,) similarity (or fused score for combined)
    log_posterior: FloatArray  # (N,) LID ln P(i | s), nats
    rank_cdf: FloatArray  # (N+1,) cumulative γ of the SRD model for this length
    extrapolated: bool

    def srd_bits(self, index: int) -> float:
        """log2(N·P_srd(index)); ties share the mass of the ranks they occupy."""
        s = self.scores
        above = int(np.count_nonzero(s > s[index]))
        tied = int(np.count_nonzero(s == s[index]))
        mass = (self.rank_cdf[above + tied] - self.rank_cdf[above]) / tied
        N = s.size
        return math.log2(N * mass) if mass > 0 else -math.inf

    def lid_bits(self, index: int) -> float:
        """log2(N·P_lid(index)) bits."""
        return (math.log(self.scores.size) + float(self.log_posterior[index])) / LN2


@dataclass(frozen=True)
class Evidence:
    """Scores of one piece of evidence (pooled or one window) under every feature + combined."""

    seconds: float
    features: Mapping[str, FeatureScores]  # feature name → scores, including "combined"

    def disclosure_bits(self, index: int) -> dict[tuple[str, str], float]:
        """(feature, measure) → bits about identity ``index``."""
        out: dict[tuple[str, str], float] = {}
        for name, scores in self.features.items():
            out[(name, "srd")] = scores.srd_bits(index)
            out[(name, "lid")] = scores.lid_bits(index)
        return out

    def information_gain_bits(self) -> float:
        """log2 N − H(P) of the combined LID posterior: what the evidence says about anyone."""
        logp = self.features[COMBINED].log_posterior
        p = np.exp(logp)
        entropy_nats = -float(np.sum(p * logp, where=p > 0))
        return (math.log(logp.size) - entropy_nats) / LN2

    def top_candidate(self) -> int:
        """Index of the identity with the largest combined posterior."""
        return int(np.argmax(self.features[COMBINED].log_posterior))


class Scorer:
    """All N templates of every enabled feature plus the calibration (synchronous core).

    ``aliases`` are the N identity aliases in template-row order (the same for every feature).
    """

    def __init__(
        self,
        aliases: Sequence[str],
        templates: Mapping[str, TemplateBatch],
        calibration: CalibrationSet,
        features: Mapping[str, Feature],
        *,
        delta: float = 1e-5,
        dtype: type = np.float32,
        population: PopulationView | None = None,
    ) -> None:
        if not aliases:
            raise ValueError("Scorer needs at least one template identity")
        for name, batch in templates.items():
            if len(batch) != len(aliases):
                raise ValueError(
                    f"{name}: {len(batch)} templates but {len(aliases)} identities "
                    "(every identity needs a template of every enabled feature)"
                )
        missing = sorted(set(features) - set(templates))
        if missing:
            raise ValueError(f"no templates for feature(s) {missing}")
        for name in (*features, COMBINED):
            calibration.buckets(name)  # raises ValueError naming an uncalibrated feature
        self.aliases = tuple(aliases)
        self.index = {alias: i for i, alias in enumerate(self.aliases)}
        self.prepared = {
            name: PreparedTemplates(f, templates[name], dtype=dtype) for name, f in features.items()
        }
        self.calibration = calibration
        self.features = dict(features)
        self.delta = float(delta)
        self.population = population

    @property
    def n(self) -> int:
        return len(self.aliases)

    @property
    def ceiling_bits(self) -> float:
        """log2 N_pop with a population model, else log2 N of the templates present."""
        return self.population.ceiling_bits if self.population else math.log2(self.n)

    @property
    def population_size(self) -> float:
        """N_pop the figures are stated against (N, the templates, without a model)."""
        return self.population.size if self.population else float(self.n)

    def disclosure(self, evidence: Evidence, index: int) -> tuple[Bits, Bits]:
        """(feature, measure) → bits about identity ``index``, and for the figures the
        reference population cannot vouch for, what it does vouch for ("at least")."""
        if self.population is None:
            return evidence.disclosure_bits(index), {}
        out: Bits = {}
        at_least: Bits = {}
        for name, scores in evidence.features.items():
            lid, srd = self.population.figures(
                scores.scores, index, name, evidence.seconds, self.calibration
            )
            out[(name, "lid")], out[(name, "srd")] = lid.bits, srd.bits
            if lid.at_least is not None:
                at_least[(name, "lid")] = lid.at_least
            if srd.at_least is not None:
                at_least[(name, "srd")] = srd.at_least
        return out, at_least

    def _feature_scores(
        self, name: str, scores: FloatArray, z: FloatArray, seconds: float
    ) -> FeatureScores:
        bucket, extrapolated = self.calibration.lookup(name, seconds)
        return FeatureScores(
            feature=name,
            scores=scores,
            log_posterior=_log_softmax(z, bucket.lid_weight),
            rank_cdf=_rank_cdf(self.n, bucket.alpha, bucket.beta),
            extrapolated=extrapolated,
        )

    def evaluate(self, observations: Mapping[str, Observation], seconds: float) -> Evidence:
        """Scores of evidence holding ``seconds`` of speech (observations keyed by feature)."""
        return self.evaluate_many([(observations, seconds)])[0]

    def evaluate_many(
        self, evidence: Sequence[tuple[Mapping[str, Observation], float]]
    ) -> list[Evidence]:
        """:meth:`evaluate` of several pieces of evidence, reading each template matrix once."""
        similarities = {
            name: prepared.similarities([observations[name] for observations, _ in evidence])
            for name, prepared in self.prepared.items()
        }
        return [
            self._evidence({name: s[i] for name, s in similarities.items()}, seconds)
            for i, (_, seconds) in enumerate(evidence)
        ]

    def _evidence(self, raw: dict[str, FloatArray], seconds: float) -> Evidence:
        # each row z-normalised once, for its own posterior and for the fusion (the figures of
        # lid_log_posteriors and fuse_scores, which z-normalise again inside: tests compare)
        z = {name: _znorm(s) for name, s in raw.items()}
        scored = {name: self._feature_scores(name, raw[name], z[name], seconds) for name in raw}
        weights = self.calibration.fusion_weights(seconds, raw)
        fused = np.zeros(self.n)
        for name, zf in z.items():
            fused += float(weights[name]) * zf
        scored[COMBINED] = self._feature_scores(COMBINED, fused, _znorm(fused), seconds)
        return Evidence(seconds=float(seconds), features=scored)

    def bounds(self, windows: int, max_window_bits: float) -> CompositionBounds:
        """Bounds after ``windows`` windows, the largest disclosing ``max_window_bits``."""
        eps = max(float(max_window_bits), 0.0) * LN2
        if windows < 1 or eps <= 0.0:
            zero = 0.0
            return CompositionBounds(max(windows, 0), eps, self.delta, zero, zero, zero)
        basic = windows * eps
        advanced = min(basic, float(kairouz_advanced(eps, windows, self.delta)))
        best = float(optimal(eps, windows, self.delta))
        return CompositionBounds(
            windows=windows,
            epsilon_nats=eps,
            delta=self.delta,
            basic_bits=float(nats_to_bits(basic)),
            advanced_bits=float(nats_to_bits(advanced)),
            optimal_bits=float(nats_to_bits(best)),
        )


@dataclass(frozen=True)
class TrackScore:
    """What the scorer says about one track after one window (before budget and ledger)."""

    disclosures: tuple[Disclosure, ...]
    bounds: CompositionBounds
    subject: str  # alias the figures are about (identity, or top candidate)
    information_gain_bits: float | None
    top_candidate: str | None
    top_candidate_bits: float | None
    extrapolated: dict[str, bool]
    window_bits: float  # the budget measure's figure for this window alone (composition input)
    at_least: Mapping[str, float] = field(default_factory=dict)  # "feature.measure" → vouched


def _same_evidence(
    a: Mapping[str, Observation], a_seconds: float, b: Mapping[str, Observation], b_seconds: float
) -> bool:
    """True when two pieces of evidence are the same (their figures are then equal)."""
    return (
        a_seconds == b_seconds
        and a.keys() == b.keys()
        and all(a[k] is b[k] or np.array_equal(a[k].values, b[k].values) for k in a)
    )


def score_track(
    scorer: Scorer,
    *,
    identity: str | None,
    pooled: Mapping[str, Observation],
    pooled_seconds: float,
    window: Mapping[str, Observation],
    window_seconds: float,
    windows: int,
    max_window_bits: float,
    measure: tuple[str, str],
) -> TrackScore:
    """Score pooled evidence and the last window for a local identity or an unknown track.

    ``max_window_bits`` is the largest window figure of the track's earlier windows in the
    period (−inf when none); ``windows`` counts this window too.
    """
    if _same_evidence(pooled, pooled_seconds, window, window_seconds):
        cumulative = alone = scorer.evaluate(pooled, pooled_seconds)  # a track's first window
    else:
        cumulative, alone = scorer.evaluate_many(
            [(pooled, pooled_seconds), (window, window_seconds)]
        )
    if identity is not None:
        if identity not in scorer.index:
            raise ValueError(f"identity {identity!r} has no templates")
        subject = scorer.index[identity]
        gain = top = top_bits = None
    else:
        subject = cumulative.top_candidate()
        gain = cumulative.information_gain_bits()
        top = scorer.aliases[subject]
    total, vouched = scorer.disclosure(cumulative, subject)
    last, _ = scorer.disclosure(alone, subject)
    if top is not None:  # the top candidate's figure, on the scale of every other figure
        top_bits = total[(COMBINED, "lid")]
    disclosures = tuple(
        Disclosure(feature, m, total[(feature, m)], last[(feature, m)]) for feature, m in total
    )
    window_bits = last[measure]
    bounds = scorer.bounds(windows, max(window_bits, max_window_bits))
    return TrackScore(
        disclosures=disclosures,
        bounds=bounds,
        subject=scorer.aliases[subject],
        information_gain_bits=gain,
        top_candidate=top,
        top_candidate_bits=top_bits,
        extrapolated={k: v.extrapolated for k, v in cumulative.features.items()},
        window_bits=window_bits,
        at_least={f"{feature}.{m}": bits for (feature, m), bits in vouched.items()},
    )
