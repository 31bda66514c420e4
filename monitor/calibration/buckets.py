"""Calibrations per feature and per evidence-length bucket: the calibration file.

A :class:`CalibrationSet` maps each feature (``f0``, ``phone``, ``embedding`` and ``combined``)
to buckets of test speech (3, 6, 12, … seconds). A bucket holds the beta-binomial rank model
(α, β) and the LID logistic (w, b, log prior odds), fitted on a labelled dev
corpus with the eq. 6 protocol. At run time the bucket is the largest one ≤ the seconds of
evidence; outside the calibrated range the nearest bucket is used and flagged as extrapolated.

``combined`` is the fused score Σ_f w_f·z_f (z_f = row-z-normalised similarities of feature f),
treated as one more feature. The weights w_f are fitted jointly on the
dev trials (:func:`fit_fusion_weights`) and stored in the ``combined`` bucket; the daemon gets
them from :meth:`CalibrationSet.fusion_weights` and builds the score with :func:`fuse_scores`.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from monitor.errors import ConfigError, InputError
from monitor.features.base import AUTO_PHONE, DEFAULT_EMBEDDING, embedding_backend
from monitor.jsonsafe import jsonable

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

COMBINED = "combined"
"""Name of the fused feature."""

FORMAT = "voxmeter-calibration"
FORMAT_VERSION = 1
LOSSES: tuple[str, ...] = ("ll", "ms", "wms", "rwms", "cll")
DEFAULT_BUCKETS: tuple[float, ...] = (1.0, 2.0, 3.0, 6.0, 12.0, 24.0, 48.0, 96.0)
"""Test-speech seconds per bucket; the corpus decides how many are kept. The 1 s and 2 s
buckets are fitted on crops of utterances (:mod:`monitor.calibration.crops`): short windows
end at a turn."""
DEFAULT_TEMPLATE_SECONDS = 12.0
"""Speech behind each template in calibration trials (an enrolment of a few utterances)."""
DEFAULT_PATH = Path(__file__).resolve().parent / "shipped" / "calibration.json"
"""The shipped calibration, package data so an installed voxmeter finds it (``make calibration``
writes it)."""
LEGACY_PHONE = "pocketsphinx"
"""The phone backend of a calibration that records none (:attr:`CalibrationSet.phone_backend`)."""


@dataclass(frozen=True)
class BucketCalibration:
    """Calibration of one feature for test evidence of ``seconds`` (lower edge) of speech.

    ``alpha``/``beta``: (rank − 1) ~ BetaBinomial(N − 1, α, β), fitted with ``loss``.
    ``lid_weight``/``lid_bias``/``log_prior_odds``: LLR = w·z + b − log_prior_odds (nats).
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

    @property
    def phone_backend(self) -> str:
        """The phone backend the fit used; a file that does not record one predates the
        choice, when pocketsphinx was the only backend."""
        value = self.metadata.get("phone_backend")
        return value if isinstance(value, str) else LEGACY_PHONE

    def resolve_phone_backend(
        self, source: str, requested: str, key: str = "features.phone"
    ) -> str:
        """The phone backend to run with this calibration: its own for ``auto``; an explicit
        ``requested`` other than its own is refused (``ConfigError`` on ``key``), as its phone
        buckets and fusion weights would misread the other backend's phone scores."""
        fitted = self.phone_backend
        if requested in (AUTO_PHONE, fitted):
            return fitted
        raise ConfigError(
            key,
            f"{requested!r}, but the calibration {source} was fitted with {fitted!r}: set "
            f'{key} = "{AUTO_PHONE}" (or "{fitted}"), or fit a calibration with '
            f"`VOXMETER_PHONE={requested} voxmeter calibrate`",
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
    ``shipped/calibration.json`` for the default backend (``make calibration`` rebuilds it),
    else ``shipped/calibration-<backend>.json`` (package data beside this module)."""
    backend = backend or embedding_backend()
    return (
        DEFAULT_PATH
        if backend == DEFAULT_EMBEDDING
        else DEFAULT_PATH.with_name(f"calibration-{backend}.json")
    )


def load_default(backend: str | None = None) -> CalibrationSet:
    """The shipped calibration of ``backend`` (default: the selected one), checked to be its."""
    path = default_path(backend)
    calibration = CalibrationSet.load(path)
    calibration.check_embedding_backend(str(path), backend)
    return calibration


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
