"""Calibrations per feature and per evidence-length bucket (DESIGN §13), and how they are fitted.

A :class:`CalibrationSet` maps each feature (``f0``, ``phone``, ``embedding`` and ``combined``)
to buckets of test speech (3, 6, 12, … seconds). A bucket holds the beta-binomial rank model
(α, β) of §1.7 and the LID logistic (w, b, log prior odds) of §2.3, fitted on a labelled dev
corpus with the eq. 6 protocol. At run time the bucket is the largest one ≤ the seconds of
evidence; outside the calibrated range the nearest bucket is used and flagged as extrapolated.

``combined`` is the fused score Σ_f w_f·z_f (z_f = row-z-normalised similarities of feature f),
treated as one more feature (DESIGN summary and §12). The weights w_f are fitted jointly on the
dev trials (:func:`fit_fusion_weights`) and stored in the ``combined`` bucket; the daemon gets
them from :meth:`CalibrationSet.fusion_weights` and builds the score with :func:`fuse_scores`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from monitor.calibration.protocol import (
    PooledTrials,
    Trials,
    describe_template,
    plan_splits,
    pool_trials,
    scored_trials,
    speech_listing,
)
from monitor.calibration.tracking import (
    SHORT_BUCKETS,
    TRACKING_LENGTHS,
    Crops,
    cosine_statistics,
    crop_speakers,
    crop_trials,
)
from monitor.corpus.speakers import (
    MIN_SPEECH_SECONDS,
    CorpusSpeakers,
    SpeakerUtterances,
    load_speakers,
)
from monitor.disclosure.lid import LidCalibration
from monitor.errors import InputError
from monitor.features.base import embedding_backend
from monitor.jsonsafe import jsonable

if TYPE_CHECKING:
    from distributed import Client

logger = logging.getLogger(__name__)

COMBINED = "combined"
"""Name of the fused feature."""

FORMAT = "voxmeter-calibration"
FORMAT_VERSION = 1
LOSSES: tuple[str, ...] = ("ll", "ms", "wms", "rwms", "cll")
DEFAULT_BUCKETS: tuple[float, ...] = (1.0, 2.0, 3.0, 6.0, 12.0, 24.0, 48.0, 96.0)
"""Test-speech seconds per bucket; the corpus decides how many are kept (§13). The 1 s and 2 s
buckets are fitted on crops of utterances (:mod:`monitor.calibration.tracking`): short windows
end at a turn."""
DEFAULT_TEMPLATE_SECONDS = 12.0
"""Speech behind each template in calibration trials (an enrolment of a few utterances)."""
DEFAULT_PATH = Path(__file__).resolve().parent / "shipped" / "calibration.json"
"""The shipped calibration, package data so an installed voxmeter finds it (``make calibration``
writes it)."""


@dataclass(frozen=True)
class BucketCalibration:
    """Calibration of one feature for test evidence of ``seconds`` (lower edge) of speech.

    ``alpha``/``beta``: (rank − 1) ~ BetaBinomial(N − 1, α, β), fitted with ``loss``.
    ``lid_weight``/``lid_bias``/``log_prior_odds``: LLR = w·z + b − log_prior_odds (nats, §2.3).
    The rest documents the fit: ``n_identities`` (N of the dev histogram), ``n_trials``,
    ``mean_test_seconds`` (speech behind the average test), ``template_seconds`` (speech behind
    the average template) and ``max_seconds`` (longest test used; the upper edge of the last
    bucket, beyond which a lookup is extrapolated). ``fusion`` (``combined`` buckets only) holds
    the weights w_f of the fused score Σ_f w_f·z_f.
    """

    seconds: float
    alpha: float
    beta: float
    loss: str
    lid_weight: float
    lid_bias: float
    log_prior_odds: float
    n_identities: int = 0
    n_trials: int = 0
    mean_test_seconds: float = math.nan
    template_seconds: float = math.nan
    max_seconds: float = math.nan
    fusion: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fusion", {str(k): float(v) for k, v in self.fusion.items()})
        if not all(math.isfinite(v) for v in self.fusion.values()):
            raise ValueError(f"fusion weights must be finite, got {dict(self.fusion)}")
        if not self.seconds > 0:
            raise ValueError(f"bucket seconds must be > 0, got {self.seconds!r}")
        if not (self.alpha > 0 and self.beta > 0):
            raise ValueError(f"alpha and beta must be > 0, got ({self.alpha!r}, {self.beta!r})")
        if self.loss not in LOSSES:
            raise ValueError(f"unknown loss {self.loss!r}; known: {', '.join(LOSSES)}")
        for name in ("lid_weight", "lid_bias", "log_prior_odds"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite, got {getattr(self, name)!r}")

    @property
    def upper_seconds(self) -> float:
        """Longest evidence this bucket was fitted on (2 × seconds when not recorded)."""
        return self.max_seconds if math.isfinite(self.max_seconds) else 2.0 * self.seconds


@dataclass(frozen=True)
class CalibrationSet:
    """Buckets per feature (sorted by seconds) plus provenance (corpus, protocol, date, …)."""

    features: Mapping[str, tuple[BucketCalibration, ...]]
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ordered: dict[str, tuple[BucketCalibration, ...]] = {}
        for name, buckets in self.features.items():
            if not buckets:
                raise ValueError(f"calibration for {name!r} has no buckets")
            ordered[name] = tuple(sorted(buckets, key=lambda b: b.seconds))
            seconds = [b.seconds for b in ordered[name]]
            if len(set(seconds)) != len(seconds):
                raise ValueError(f"calibration for {name!r} repeats a bucket: {seconds}")
        object.__setattr__(self, "features", ordered)
        object.__setattr__(self, "metadata", dict(self.metadata))

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(self.features)

    @property
    def embedding_backend(self) -> str | None:
        """The embedding backend the fit used (None when not recorded: older files)."""
        value = self.metadata.get("embedding_backend")
        return value if isinstance(value, str) else None

    def check_embedding_backend(self, source: str, backend: str | None = None) -> None:
        """LID weights of one embedding do not fit another's scores: refuse a calibration
        fitted with a different backend than ``backend`` (default: the selected one)."""
        wanted = backend or embedding_backend()
        fitted = self.embedding_backend
        if fitted is not None and fitted != wanted:
            raise InputError(
                source,
                f"calibration fitted with the {fitted} embedding, not {wanted}: "
                f"fit one with `voxmeter calibrate --embedding {wanted}`",
            )

    def buckets(self, feature: str) -> tuple[BucketCalibration, ...]:
        if feature not in self.features:
            known = ", ".join(self.features) or "none"
            raise ValueError(f"no calibration for feature {feature!r}; calibrated: {known}")
        return self.features[feature]

    def lookup(self, feature: str, seconds: float) -> tuple[BucketCalibration, bool]:
        """Bucket for ``seconds`` of test speech: the largest bucket ≤ seconds.

        Returns ``(bucket, extrapolated)``; ``extrapolated`` is true below the first bucket
        (the first is used) and beyond the longest evidence the last bucket was fitted on.
        """
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"seconds must be finite and >= 0, got {seconds!r}")
        buckets = self.buckets(feature)
        edges = np.array([b.seconds for b in buckets])
        index = int(np.searchsorted(edges, seconds, side="right")) - 1
        if index < 0:
            return buckets[0], True
        bucket = buckets[index]
        return bucket, index == len(buckets) - 1 and seconds > bucket.upper_seconds

    def fusion_weights(self, seconds: float, features: Iterable[str]) -> dict[str, float]:
        """Coefficients w_f of ``combined`` = Σ_f w_f·z_f at ``seconds``.

        The jointly fitted weights stored in the ``combined`` bucket when they cover exactly
        ``features``; otherwise (another feature set, or an older file) each feature's own LID
        weight, the naive-Bayes fusion.
        """
        names = list(features)
        if COMBINED in self.features:
            fusion = self.lookup(COMBINED, seconds)[0].fusion
            if fusion and set(fusion) == set(names):
                return {name: fusion[name] for name in names}
        return {name: self.lookup(name, seconds)[0].lid_weight for name in names}

    def to_json(self) -> str:
        """Stable, human-readable JSON (``from_json`` reads it back exactly)."""
        document = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "metadata": jsonable(self.metadata),
            "features": {
                name: [jsonable(asdict(b)) for b in buckets]
                for name, buckets in self.features.items()
            },
        }
        return json.dumps(document, indent=2, allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, text: str, *, source: str = "<calibration>") -> CalibrationSet:
        """Parse :meth:`to_json` output; problems raise ``InputError`` naming the key."""
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            raise InputError(source, f"not JSON: {error.msg}", line=error.lineno) from error
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise InputError(source, f"not a voxmeter calibration (key 'format' != {FORMAT!r})")
        if document.get("version") != FORMAT_VERSION:
            raise InputError(
                source,
                f"calibration format version {document.get('version')!r} is not supported "
                f"(this voxmeter reads version {FORMAT_VERSION})",
            )
        raw = document.get("features")
        if not isinstance(raw, dict) or not raw:
            raise InputError(source, "key 'features' must map feature names to bucket lists")
        features: dict[str, tuple[BucketCalibration, ...]] = {}
        for name, buckets in raw.items():
            if not isinstance(buckets, list) or not buckets:
                raise InputError(source, f"key 'features.{name}' must be a non-empty list")
            parsed = []
            for i, entry in enumerate(buckets):
                try:
                    parsed.append(BucketCalibration(**_from_jsonable(entry)))
                except (TypeError, ValueError) as error:
                    raise InputError(source, f"key 'features.{name}[{i}]': {error}") from error
            features[name] = tuple(parsed)
        try:
            return cls(features, document.get("metadata") or {})
        except ValueError as error:
            raise InputError(source, str(error)) from error

    def save(self, path: str | Path) -> None:
        """Write JSON to ``path`` atomically (parent folders created; InputError if it cannot)."""
        from monitor.outputs import write_text_atomic

        write_text_atomic(path, self.to_json())

    @classmethod
    def load_default(cls) -> CalibrationSet:
        """The shipped calibration of the selected backend (the module's :func:`load_default`)."""
        return load_default()

    @classmethod
    def load(cls, path: str | Path) -> CalibrationSet:
        target = Path(path)
        try:
            text = target.read_text(encoding="utf-8")
        except OSError as error:
            raise InputError(str(target), f"cannot read calibration: {error.strerror}") from error
        return cls.from_json(text, source=str(target))


def default_path(backend: str | None = None) -> Path:
    """The shipped calibration for an embedding backend (default: the selected one):
    ``shipped/calibration.json`` for ecapa (``make calibration`` rebuilds it), else
    ``shipped/calibration-<backend>.json`` (package data beside this module)."""
    backend = backend or embedding_backend()
    return (
        DEFAULT_PATH
        if backend == "ecapa"
        else DEFAULT_PATH.with_name(f"calibration-{backend}.json")
    )


def load_default(backend: str | None = None) -> CalibrationSet:
    """The shipped calibration of ``backend`` (default: the selected one), checked to be its."""
    path = default_path(backend)
    calibration = CalibrationSet.load(path)
    calibration.check_embedding_backend(str(path), backend)
    return calibration


def fuse_scores(scores: Mapping[str, np.ndarray], weights: Mapping[str, float]) -> np.ndarray:
    """``combined`` score Σ_f w_f·znorm_rows(S_f): (T, N) per feature -> (T, N).

    The sum of calibrated per-feature LLRs up to per-row constants (which cancel in ranks and
    in the softmax of §2.4), i.e. naive-Bayes fusion of independent features.
    """
    from monitor.disclosure.lid import znorm_rows

    missing = sorted(set(scores) - set(weights))
    if missing:
        raise ValueError(f"no fusion weight for feature(s) {missing}")
    if not scores:
        raise ValueError("fuse_scores needs at least one feature")
    shapes = {np.shape(s) for s in scores.values()}
    if len(shapes) != 1:
        raise ValueError(f"score matrices differ in shape: {sorted(shapes)}")
    return sum(
        (
            float(weights[name]) * znorm_rows(np.asarray(s, dtype=np.float64))
            for name, s in scores.items()
        ),
        start=np.zeros(shapes.pop()),
    )


def fusion_sums(
    scores: Mapping[str, np.ndarray], truth: np.ndarray, w: np.ndarray
) -> npt.NDArray[np.float64]:
    """Sums over the rows of one block of the fusion objective's terms: (1 + F,) with
    Σ_t ln softmax_j(s_tj)[m_t] and, per feature f, Σ_t (z_f[t, m_t] − Σ_j p_tj·z_f[t, j]), for
    s = Σ_f w_f·z_f and p = softmax(s). Per-row arithmetic only, so a block's sums are the same
    wherever it is computed (this process or a Dask worker)."""
    from scipy.special import log_softmax

    from monitor.disclosure.lid import znorm_rows

    Z = [znorm_rows(np.asarray(S, dtype=np.float64)) for S in scores.values()]
    rows = np.arange(Z[0].shape[0])
    s = Z[0] * w[0]
    for weight, z in zip(w[1:], Z[1:], strict=True):
        s += weight * z
    log_p = log_softmax(s, axis=1)
    p = np.exp(log_p)
    out = np.empty(1 + len(Z))
    out[0] = log_p[rows, truth].sum()
    for f, z in enumerate(Z, start=1):
        out[f] = (z[rows, truth] - np.einsum("tn,tn->t", p, z)).sum()
    return out


FusionSums = Callable[[np.ndarray], list[npt.NDArray[np.float64]]]
"""w (F,) -> :func:`fusion_sums` of every row block of the dev trials, in row order."""


def fusion_blocks(T: int, N: int) -> list[tuple[int, int]]:
    """The row blocks of the fusion objective: the LID fit's row groups (bounded in size)."""
    from monitor.disclosure.lid import fit_layout

    return fit_layout(N).groups(T)


def fit_fusion_sums(names: Sequence[str], T: int, block_sums: FusionSums) -> dict[str, float]:
    """:func:`fit_fusion_weights` from the objective's per-block sums (``block_sums``), added
    in row order: the same weights whether the blocks run here or on Dask workers."""
    from scipy.optimize import minimize

    def objective(w: np.ndarray) -> tuple[float, np.ndarray]:
        total = sum(block_sums(w), np.zeros(1 + len(names)))
        value = -float(total[0]) / T
        grad = -total[1:] / T
        return value + 1e-6 * float(w @ w), grad + 2e-6 * w

    result = minimize(objective, np.ones(len(names)), jac=True, method="L-BFGS-B")
    return {name: float(w) for name, w in zip(names, result.x, strict=True)}


def fit_fusion_weights(scores: Mapping[str, np.ndarray], truth: np.ndarray) -> dict[str, float]:
    """Weights w_f maximising the mean log posterior of the true identity under
    softmax_j(Σ_f w_f·z_f) on dev trials: {f: (T, N)} scores, truth (T,) → {f: w_f}.

    This is the multinomial (1-of-N) logistic fusion of the z-normalised scores: the LID
    objective of §2.4 itself, concave in w, so correlated features are not double-counted as
    they are when each feature's separately fitted weight is used. The objective is summed
    over fixed row blocks (:func:`fusion_blocks`), as Dask workers sum it.
    """
    names = list(scores)
    if not names:
        raise ValueError("fit_fusion_weights needs at least one feature")
    shapes = {np.shape(scores[n]) for n in names}
    if len(shapes) != 1:
        raise ValueError(f"score matrices differ in shape: {sorted(shapes)}")
    T, N = shapes.pop()
    m = np.asarray(truth)
    if m.shape != (T,):
        raise ValueError(f"truth has shape {m.shape}, expected ({T},)")
    if N < 2 or T < 1:
        raise ValueError(f"fusion needs N >= 2 identities and trials, got (T, N) = ({T}, {N})")
    blocks = fusion_blocks(T, N)

    def block_sums(w: np.ndarray) -> list[npt.NDArray[np.float64]]:
        return [fusion_sums({n: scores[n][g0:g1] for n in names}, m[g0:g1], w) for g0, g1 in blocks]

    return fit_fusion_sums(names, T, block_sums)


SeparableNotes = dict[str, list[float]]
"""feature -> test lengths (seconds) whose dev scores were perfectly separable."""


def fit_lid_noting(
    name: str, S: np.ndarray, truth: np.ndarray, seconds: float, notes: SeparableNotes | None
) -> LidCalibration:
    """``fit_lid_calibration`` that records a separable fit under the feature's name in
    ``notes`` (reported once per feature by :func:`warn_separable`) instead of warning each
    time; without ``notes`` it warns as usual."""
    from monitor.disclosure.lid import fit_lid_calibration

    return lid_noting(name, seconds, notes, lambda: fit_lid_calibration(S, truth))


def lid_noting(
    name: str, seconds: float, notes: SeparableNotes | None, fit: Callable[[], LidCalibration]
) -> LidCalibration:
    """``fit()`` (an LID fit) with a separable fit noted as :func:`fit_lid_noting` does."""
    from monitor.disclosure.lid import SeparableWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calibration = fit()
    for warning in caught:
        if notes is not None and issubclass(warning.category, SeparableWarning):
            lengths = notes.setdefault(name, [])
            if seconds not in lengths:
                lengths.append(seconds)
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    return calibration


def warn_separable(notes: SeparableNotes) -> None:
    """One warning naming every feature (and length) whose LID fit was separable."""
    if notes:
        listed = "; ".join(
            f"{name} at {', '.join(f'{s:g}' for s in sorted(lengths))} s"
            for name, lengths in notes.items()
        )
        logger.warning(
            "LID calibration: the dev scores are perfectly separable for %s: the "
            "maximum-likelihood weight is infinite, so the L2 penalty sets it (more or harder "
            "dev speakers give a real fit)",
            listed,
        )


def fit_trials(
    trials: Trials,
    *,
    seconds: float,
    loss: str = "ll",
    features: Sequence[str] | None = None,
    separable: SeparableNotes | None = None,
) -> dict[str, BucketCalibration]:
    """One bucket per feature and for ``combined`` from the trials of one length setting.

    Per feature: rank histogram (fractional ties) → beta-binomial fit with ``loss``; LID
    logistic on the z-normalised rows (§2.3). ``combined`` fuses the features' z-scores with
    weights from :func:`fit_fusion_weights` and is then fitted the same way.
    """
    from monitor.disclosure.ranks import rank_histogram

    names = list(features if features is not None else trials.scores)
    scores = {name: trials.scores[name] for name in names}
    calibrations: dict[str, BucketCalibration] = {}

    def fit_one(
        name: str, S: np.ndarray, fusion: Mapping[str, float] | None = None
    ) -> BucketCalibration:
        histogram = rank_histogram(S, trials.truth)
        lid = fit_lid_noting(name, S, trials.truth, seconds, separable)
        return fitted_bucket(trials, seconds, loss, histogram, lid, fusion)

    for name in names:
        calibrations[name] = fit_one(name, scores[name])
    if len(names) > 1:
        weights = fit_fusion_weights(scores, trials.truth)
        calibrations[COMBINED] = fit_one(COMBINED, fuse_scores(scores, weights), weights)
    return calibrations


def fitted_bucket(
    trials: Trials | PooledTrials,
    seconds: float,
    loss: str,
    histogram: np.ndarray,
    lid: LidCalibration,
    fusion: Mapping[str, float] | None = None,
) -> BucketCalibration:
    """The bucket of a feature from its rank histogram (beta-binomial fit with ``loss``) and
    LID fit on the trials of one length setting."""
    from monitor.disclosure.srd import fit_rank_model

    rank_fit = fit_rank_model(histogram, loss=loss)  # type: ignore[arg-type]
    return BucketCalibration(
        seconds=float(seconds),
        alpha=rank_fit.alpha,
        beta=rank_fit.beta,
        loss=loss,
        lid_weight=float(lid.weight),
        lid_bias=float(lid.bias),
        log_prior_odds=float(lid.log_prior_odds),
        n_identities=trials.N,
        n_trials=trials.T,
        mean_test_seconds=float(np.mean(trials.test_seconds)),
        template_seconds=float(np.mean(trials.template_seconds)),
        max_seconds=float(np.max(trials.test_seconds)),
        fusion=dict(fusion or {}),
    )


def calibrate_speakers(
    speakers: Sequence[SpeakerUtterances],
    *,
    buckets: Sequence[float] = DEFAULT_BUCKETS,
    template_seconds: float | None = DEFAULT_TEMPLATE_SECONDS,
    loss: str = "ll",
    features: Sequence[str],
    min_speakers_fraction: float = 0.5,
    metadata: Mapping[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
    client: Client | None = None,
    crops: Mapping[str, Crops] | None = None,
) -> CalibrationSet:
    """Fit every bucket the speakers allow: a bucket is kept while at least
    ``min_speakers_fraction`` of the speakers (and at least 2) have enough speech for it.
    The short buckets (:data:`SHORT_BUCKETS`) are fitted on ``crops`` of the utterances, and
    skipped without them (unless the typical utterance is shorter than the bucket: then whole
    utterances are pooled to its length, as for every other bucket).

    With a Dask ``client`` the score matrices are computed and fitted by its workers in row
    groups (:mod:`monitor.calibration.cluster`), never whole here; the calibration is the
    single-process one, bit for bit.
    """
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; known: {', '.join(LOSSES)}")
    if len(speakers) < 2:
        raise ValueError(f"calibration needs at least 2 speakers, got {len(speakers)}")
    per_feature: dict[str, list[BucketCalibration]] = {}
    used: list[dict[str, Any]] = []
    separable: SeparableNotes = {}
    typical = float(np.median(np.concatenate([s.speech_seconds for s in speakers])))
    for seconds in sorted_buckets(buckets):
        # a crop stands for a short test where utterances are longer than the bucket; where they
        # are shorter (single digits), whole utterances pooled to the length still serve
        short = seconds in SHORT_BUCKETS and typical > seconds
        if short and crops is None:
            continue
        usable = len(plan_splits(speakers, seconds, template_seconds)[0])
        if usable < max(2.0, min_speakers_fraction * len(speakers)):
            break
        if short:
            pooled = crop_trials(
                speakers,
                crops or {},
                seconds=seconds,
                template_seconds=template_seconds,
                features=features,
            )
        else:
            pooled = pool_trials(
                speakers, test_seconds=seconds, template_seconds=template_seconds, features=features
            )
        if progress is not None:
            progress(f"bucket {seconds:g} s: N = {pooled.N}, {pooled.T} trials")
        if client is None or short:
            fitted = fit_trials(
                scored_trials(pooled),
                seconds=seconds,
                loss=loss,
                features=features,
                separable=separable,
            )
        else:
            from monitor.calibration.cluster import fit_on_workers

            fitted = fit_on_workers(
                client, pooled, seconds=seconds, loss=loss, features=features, separable=separable
            )
        for name, bucket in fitted.items():
            per_feature.setdefault(name, []).append(bucket)
        used.append(
            {"seconds": seconds, "N": pooled.N, "trials": pooled.T, "dropped": len(pooled.dropped)}
        )
    warn_separable(separable)
    if not per_feature:
        shortest = min(buckets)
        raise ValueError(
            f"too few speakers have {shortest:g} s of test speech plus "
            f"{describe_template(template_seconds)} of template speech for the shortest bucket; "
            f"speech per speaker: {speech_listing(speakers)}; try a shorter --template-seconds "
            "or --buckets"
        )
    info = {
        "protocol": {
            "name": "paper 000 eq. 6, K-fold over start utterances",
            "delta": "floor((K - T - D) / 2)",
            "test_seconds": [u["seconds"] for u in used],
            "template_seconds": template_seconds,
            "segments": "consecutive utterances, fewest reaching the length in speech seconds; "
            "1 and 2 s: the first seconds of speech of the first test utterance",
            "ties": "fractional",
            "lid": "unweighted logistic on row z-norm, eq. 3 prior term",
            "combined": "sum_f w_f * znorm_rows(S_f), w maximising the dev mean log posterior "
            "of the true identity (bucket 'fusion'), then fitted as a feature",
        },
        "buckets": used,
        "loss": loss,
        "speakers": len(speakers),
        "created": datetime.now(UTC).replace(microsecond=0).isoformat(),
        **dict(metadata or {}),
    }
    return CalibrationSet({k: tuple(v) for k, v in per_feature.items()}, info)


def calibrate_corpus(
    root: str | Path,
    *,
    split: str | None = None,
    features: Sequence[str] = ("f0", "phone", "embedding"),
    buckets: Sequence[float] = DEFAULT_BUCKETS,
    template_seconds: float | None = DEFAULT_TEMPLATE_SECONDS,
    loss: str = "ll",
    cache_dir: str | Path | None = None,
    jobs: int = 1,
    scheduler: str | None = None,
    extraction_progress: Callable[[int, int, str], None] | None = None,
    progress: Callable[[str], None] | None = None,
    min_speech_seconds: float = MIN_SPEECH_SECONDS,
) -> tuple[CalibrationSet, tuple[tuple[str, str], ...]]:
    """Extract (through the cache) a labelled dev corpus and fit every bucket it allows.

    Returns the calibration (metadata: corpus, split, protocol, date, speakers, skipped count)
    and the (file or speaker, reason) pairs that were skipped.
    """
    from monitor.cluster import dask_client, shared_scheduler

    with contextlib.ExitStack() as stack:
        address = stack.enter_context(shared_scheduler(jobs, scheduler))
        client = None if address is None else stack.enter_context(dask_client(jobs, address))
        loaded = load_speakers(
            root,
            split=split,
            features=features,
            cache_dir=cache_dir,
            jobs=jobs,
            scheduler=address,
            progress=extraction_progress,
            min_speech_seconds=min_speech_seconds,
        )
        crops = _crops(loaded, split, features, buckets, cache_dir, progress)
        calibration, skipped = _calibrate_loaded(
            loaded, root, split, features, buckets, template_seconds, loss, progress, client, crops
        )
    if "embedding" in features:
        tracking = cosine_statistics(loaded.speakers, crops, template_seconds=template_seconds)
        calibration = CalibrationSet(
            calibration.features, {**calibration.metadata, "tracking": tracking}
        )
    return calibration, skipped


def _crops(
    loaded: CorpusSpeakers,
    split: str | None,
    features: Sequence[str],
    buckets: Sequence[float],
    cache_dir: str | Path | None,
    progress: Callable[[str], None] | None,
) -> dict[str, Crops]:
    """Crops for the short buckets asked for (every feature) and the tracker's window lengths
    (the embedding), of every loaded utterance."""
    from monitor.corpus.scan import scan_corpus

    lengths: dict[float, list[str]] = {}
    for seconds in SHORT_BUCKETS:
        if seconds in buckets:
            lengths[seconds] = list(features)
    if "embedding" in features:
        for seconds in TRACKING_LENGTHS:
            wanted = lengths.setdefault(seconds, [])
            if "embedding" not in wanted:
                wanted.append("embedding")
    lengths = {k: v for k, v in lengths.items() if v}
    if not lengths:
        return {}
    corpus = scan_corpus(loaded.root, split=split)
    paths = {(u.speaker, u.path.stem): u.path for u in corpus.utterances}

    def note(done: int, total: int) -> None:
        if progress is not None and (done % 250 == 0 or done == total):
            progress(f"crops: {done}/{total} utterances")

    return crop_speakers(loaded.speakers, paths, lengths, cache_dir=cache_dir, progress=note)


def _calibrate_loaded(
    loaded: CorpusSpeakers,
    root: str | Path,
    split: str | None,
    features: Sequence[str],
    buckets: Sequence[float],
    template_seconds: float | None,
    loss: str,
    progress: Callable[[str], None] | None,
    client: Client | None,
    crops: Mapping[str, Crops] | None = None,
) -> tuple[CalibrationSet, tuple[tuple[str, str], ...]]:
    """:func:`calibrate_corpus` once the corpus is loaded (and its cluster, if any, is up)."""
    try:
        calibration = calibrate_speakers(
            loaded.speakers,
            buckets=buckets,
            template_seconds=template_seconds,
            loss=loss,
            features=features,
            progress=progress,
            client=client,
            crops=crops or None,
            metadata={
                "corpus": Path(loaded.root).name,
                "corpus_path": str(root),  # as given (the shipped file stays machine-neutral)
                "split": split,
                "features": list(features),
                **({"embedding_backend": embedding_backend()} if "embedding" in features else {}),
                "files": loaded.files,
                "skipped": len(loaded.skipped),
                # corpus speaker ids (aliases, never names): lets an audit check that its
                # speakers are disjoint from these
                "dev_speakers": [s.alias for s in loaded.speakers],
            },
        )
    except ValueError as error:
        raise InputError(loaded.root, str(error)) from error
    return calibration, loaded.skipped


def _from_jsonable(entry: Any) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise TypeError(f"expected an object, got {type(entry).__name__}")
    out: dict[str, Any] = {}
    for key, value in entry.items():
        if value is None:
            value = math.nan
        elif value in ("inf", "-inf"):
            value = float(value)
        out[key] = value
    return out


def sorted_buckets(seconds: Sequence[float]) -> tuple[float, ...]:
    """Validated, sorted, unique bucket edges (seconds > 0)."""
    values = sorted({float(s) for s in seconds})
    if not values or values[0] <= 0:
        raise ValueError(f"bucket seconds must be positive, got {list(seconds)}")
    return tuple(values)
