"""Scoring a track's evidence against all N templates (DESIGN §12 steps 1–5).

:class:`Scorer` is the synchronous core: given the pooled observations of a track and the seconds
of speech behind them, it computes one similarity vector per feature against every template,
picks the calibration bucket of that length (§13), builds the fused ``combined`` score, and
turns each into SRD (log2(N·γ_r), §1.4) and LID (log2(N·P(l|s)), §2.5) figures.

Everything is O(N) per feature: the rank of one identity is a count of larger scores (tied
identities share the mass of their ranks, exactly as :func:`identity_posterior`), so 10⁵
templates need no sort. The heavy part, the similarities, is one vectorised call per feature.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from monitor.calibration.fit import COMBINED, CalibrationSet, fuse_scores
from monitor.daemon.events import CompositionBounds, Disclosure
from monitor.disclosure.composition import kairouz_advanced, nats_to_bits, optimal
from monitor.disclosure.lid import lid_log_posteriors
from monitor.disclosure.srd import betabinom_pmf
from monitor.features.base import Feature, Observation, TemplateBatch

LN2 = math.log(2.0)


@lru_cache(maxsize=64)
def _rank_cdf(N: int, alpha: float, beta: float) -> np.ndarray:
    """(N+1,) cumulative γ with a leading 0: γ_k summed over ranks 1..k (read-only)."""
    cdf = np.concatenate(([0.0], np.cumsum(betabinom_pmf(N, alpha, beta))))
    cdf.flags.writeable = False
    return cdf


def _xlogx(x: np.ndarray) -> np.ndarray:
    """x·log2(x) with 0·log 0 = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, x * np.log2(np.where(x > 0, x, 1.0)), 0.0)


_BLOCK = 4096  # templates per block in the histogram similarity
_JS_FEATURES = frozenset({"f0", "phone"})  # −JS divergence (monitor.features.similarity)
_COSINE_FEATURES = frozenset({"embedding"})  # cosine


class PreparedTemplates:
    """Templates of one feature laid out once for fast scoring of one test at a time.

    The figures are those of :mod:`monitor.features.similarity` (−JS divergence in bits for
    histograms, cosine for embeddings) up to rounding; template-side work (normalising rows,
    their entropies) is done here once instead of at every window. For histograms, JS =
    H(M) − (H(P) + H(Q))/2 needs logarithms only on the test's non-empty bins: where p_d = 0,
    m_d log m_d = ½ q_d log q_d − ½ q_d, which sums from the precomputed row entropy. Other
    features fall back to ``Feature.similarity``.
    """

    def __init__(self, feature: Feature, batch: TemplateBatch) -> None:
        self.feature = feature
        self.n = len(batch)
        matrix = batch.matrix
        if feature.name in _JS_FEATURES:
            totals = matrix.sum(axis=1)
            self.rows_ok = totals > 0
            q = matrix / np.where(self.rows_ok, totals, 1.0)[:, None]
            self.kind = "js"
            self.q_by_bin = np.ascontiguousarray(q.T)  # (D, N): a bin's column is one row
            self.qlogq_by_bin = _xlogx(self.q_by_bin)  # (D, N): no logarithm of q at run time
            self.neg_h_q = self.qlogq_by_bin.sum(axis=0)  # (N,)
        elif feature.name in _COSINE_FEATURES:
            norms = np.linalg.norm(matrix, axis=1)
            self.rows_ok = norms > 0
            self.kind = "cosine"
            self.unit = matrix / np.where(self.rows_ok, norms, 1.0)[:, None]
        else:
            self.kind = "generic"
            self.batch = batch

    def similarity(self, test: Observation) -> np.ndarray:
        """(N,) similarity of one observation to every template."""
        values = np.asarray(test.values, dtype=np.float64)
        if self.kind == "js":
            return -self._js(values)
        if self.kind == "cosine":
            norm = float(np.linalg.norm(values))
            if norm == 0:
                return np.zeros(self.n)
            out = self.unit @ (values / norm)
            out[~self.rows_ok] = 0.0
            return np.clip(out, -1.0, 1.0, out=out)
        return np.asarray(self.feature.similarity(test, self.batch), dtype=np.float64)

    def _js(self, counts: np.ndarray) -> np.ndarray:
        if counts.shape[0] != self.q_by_bin.shape[0]:
            raise ValueError(f"test has {counts.shape[0]} bins, templates {self.q_by_bin.shape[0]}")
        if np.any(counts < 0) or not np.all(np.isfinite(counts)):
            raise ValueError("test counts must be finite and non-negative")
        total = counts.sum()
        if total <= 0:
            return np.ones(self.n)
        p = counts / total
        support = np.flatnonzero(p)
        ps = p[support]
        half_p = 0.5 * ps[:, None]
        neg_h_m = np.empty(self.n)
        # blocks of templates small enough to stay in cache: ~4 passes over (S, block)
        for start in range(0, self.n, _BLOCK):
            stop = min(start + _BLOCK, self.n)
            qs = self.q_by_bin[support, start:stop]  # (S, block) copy
            q_support = qs.sum(axis=0)
            qlogq_support = self.qlogq_by_bin[support, start:stop].sum(axis=0)
            qs *= 0.5
            qs += half_p  # m = (p + q)/2 > 0 on the test's support
            logm = np.log2(qs)
            neg_h_m[start:stop] = (
                np.einsum("sn,sn->n", qs, logm)
                + 0.5 * (self.neg_h_q[start:stop] - qlogq_support)
                - 0.5 * (1.0 - q_support)
            )
        neg_h_p = float((ps * np.log2(ps)).sum())
        js = 0.5 * (neg_h_p + self.neg_h_q) - neg_h_m
        np.clip(js, 0.0, 1.0, out=js)
        js[~self.rows_ok] = 1.0
        return js


@dataclass(frozen=True)
class FeatureScores:
    """One feature's view of some evidence: scores and the calibrated posteriors they imply."""

    feature: str
    scores: np.ndarray  # (N,) similarity (or fused score for combined)
    log_posterior: np.ndarray  # (N,) LID ln P(i | s), nats
    rank_cdf: np.ndarray  # (N+1,) cumulative γ of the SRD model for this length
    extrapolated: bool

    def srd_bits(self, index: int) -> float:
        """log2(N·P_srd(index)); ties share the mass of the ranks they occupy (§1.2, §1.5)."""
        s = self.scores
        above = int(np.count_nonzero(s > s[index]))
        tied = int(np.count_nonzero(s == s[index]))
        mass = (self.rank_cdf[above + tied] - self.rank_cdf[above]) / tied
        N = s.size
        return math.log2(N * mass) if mass > 0 else -math.inf

    def lid_bits(self, index: int) -> float:
        """log2(N·P_lid(index)) bits (§2.5)."""
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
            name: PreparedTemplates(f, templates[name]) for name, f in features.items()
        }
        self.calibration = calibration
        self.features = dict(features)
        self.delta = float(delta)

    @property
    def n(self) -> int:
        return len(self.aliases)

    @property
    def ceiling_bits(self) -> float:
        return math.log2(self.n)

    def _feature_scores(self, name: str, scores: np.ndarray, seconds: float) -> FeatureScores:
        bucket, extrapolated = self.calibration.lookup(name, seconds)
        return FeatureScores(
            feature=name,
            scores=scores,
            log_posterior=lid_log_posteriors(scores[None, :], bucket.lid_weight)[0],
            rank_cdf=_rank_cdf(self.n, bucket.alpha, bucket.beta),
            extrapolated=extrapolated,
        )

    def evaluate(self, observations: Mapping[str, Observation], seconds: float) -> Evidence:
        """Scores of evidence holding ``seconds`` of speech (observations keyed by feature)."""
        raw = {name: self.prepared[name].similarity(observations[name]) for name in self.features}
        scored = {name: self._feature_scores(name, s, seconds) for name, s in raw.items()}
        weights = self.calibration.fusion_weights(seconds, raw)
        fused = fuse_scores({k: v[None, :] for k, v in raw.items()}, weights)[0]
        scored[COMBINED] = self._feature_scores(COMBINED, fused, seconds)
        return Evidence(seconds=float(seconds), features=scored)

    def bounds(self, windows: int, max_window_bits: float) -> CompositionBounds:
        """Bounds after ``windows`` windows, the largest disclosing ``max_window_bits`` (§5.7)."""
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
    cumulative = scorer.evaluate(pooled, pooled_seconds)
    alone = scorer.evaluate(window, window_seconds)
    if identity is not None:
        if identity not in scorer.index:
            raise ValueError(f"identity {identity!r} has no templates")
        subject = scorer.index[identity]
        gain = top = top_bits = None
    else:
        subject = cumulative.top_candidate()
        gain = cumulative.information_gain_bits()
        top = scorer.aliases[subject]
        top_bits = cumulative.features[COMBINED].lid_bits(subject)
    total = cumulative.disclosure_bits(subject)
    last = alone.disclosure_bits(subject)
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
    )
