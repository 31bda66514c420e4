"""The one protocol every speaker feature follows, and the registry that names them.

A feature turns a stretch of speech into an :class:`Observation` (a fixed-length vector plus
the speech seconds behind it), pools observations into a template, and scores observations
against a :class:`TemplateBatch` of all N templates at once. Code outside ``monitor.features``
uses only this protocol and the registry, never a specific extractor, so adding a feature
means adding one module and one line in :data:`_FACTORIES`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from monitor.features.similarity import neg_js_divergence
from monitor.vocabulary import SimilarityKind

FEATURE_NAMES: tuple[str, ...] = ("f0", "phone", "embedding")
"""Every feature, in the order reports and the database list them."""

# name -> "module:class"; imported on first use so torch and pocketsphinx load only when needed.
_FACTORIES: dict[str, str] = {
    "f0": "monitor.features.f0:F0Feature",
}

PHONE_BACKENDS: dict[str, str] = {
    "network": "monitor.features.phone_model:PhoneNetworkFeature",
    "pocketsphinx": "monitor.features.phone:PhoneFeature",
}
"""The ``phone`` feature's backends: the shipped phone network (on CAM++'s filterbanks, trained
on pocketsphinx's decoding) or pocketsphinx's all-phone decoder itself."""
DEFAULT_PHONE = "network"
"""The phone network: phone disclosure within 0.05 bits of pocketsphinx's at a fraction of its
CPU (bench/results/phone-model-disclosure.json); pocketsphinx stays for comparison."""
PHONE_ENV = "VOXMETER_PHONE"
"""Carries the selected phone backend to worker processes (as :data:`EMBEDDING_ENV`)."""
AUTO_PHONE = "auto"
"""``features.phone`` / ``$VOXMETER_PHONE`` meaning "the backend the calibration in use was
fitted with": a calibration's phone buckets and fusion weights hold for that backend's phone
evidence only (:meth:`monitor.calibration.buckets.CalibrationSet.resolve_phone_backend`)."""

EMBEDDING_BACKENDS: dict[str, str] = {
    "ecapa": "monitor.features.embedding:EcapaEmbedding",
    "campplus": "monitor.features.embedding:CampplusEmbedding",
    "ge2e": "monitor.features.embedding:GE2EEmbedding",
    "ecapa-int8": "monitor.features.embedding:EcapaInt8Embedding",
    "campplus-int8": "monitor.features.embedding:CampplusInt8Embedding",
}
"""The ``embedding`` feature's backends (default: ``campplus-int8``)."""
DEFAULT_EMBEDDING = "campplus-int8"
"""CAM++ as static int8, chosen by measurement (``python -m bench.bench_int8``,
bench/results/edge-int8-shipped.json): the lowest corpus EER of the graphs that fit a third of
the edge budget (0.01 of a core per speech second), well below ECAPA's at less than half its
CPU. ECAPA (float and int8) stays for comparison with VoicePrivacy results."""
EMBEDDING_ENV = "VOXMETER_EMBEDDING"
"""Carries the selected backend to worker processes (spawned children inherit it)."""
RUNTIME_ENV = "VOXMETER_EMBEDDING_RUNTIME"
"""Carries the embedding runtime (auto, onnx, torch: :mod:`monitor.features.embedding_onnx`)."""
DEFAULT_RUNTIME = "auto"


@dataclass(frozen=True)
class Observation:
    """What one stretch of speech says under one feature.

    ``values`` is (D,) float64: counts for histogram features (f0, phone), a unit vector for
    the embedding. ``seconds`` is the speech behind it, the pooling weight.
    """

    feature: str
    values: np.ndarray  # (D,) float64
    seconds: float  # speech seconds

    def __post_init__(self) -> None:
        values = np.asarray(self.values, dtype=np.float64)
        if values.ndim != 1:
            raise ValueError(f"Observation.values must be 1-D, got shape {values.shape}")
        if not np.all(np.isfinite(values)):
            raise ValueError(f"Observation.values for {self.feature!r} holds NaN or inf")
        if not self.seconds >= 0:
            raise ValueError(f"Observation.seconds must be >= 0, got {self.seconds!r}")
        values.setflags(write=False)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "seconds", float(self.seconds))


@dataclass(frozen=True)
class TemplateBatch:
    """All N templates of one feature as one (N, D) float64 matrix, rows in identity order."""

    feature: str
    matrix: np.ndarray  # (N, D) float64

    def __post_init__(self) -> None:
        matrix = np.asarray(self.matrix, dtype=np.float64)
        if matrix.ndim != 2:
            raise ValueError(f"TemplateBatch.matrix must be 2-D (N, D), got shape {matrix.shape}")
        matrix.setflags(write=False)
        object.__setattr__(self, "matrix", matrix)

    @classmethod
    def from_observations(cls, observations: Sequence[Observation]) -> TemplateBatch:
        """Stack templates (one per identity, in identity order) of a single feature."""
        if not observations:
            raise ValueError("TemplateBatch.from_observations needs at least one observation")
        names = {o.feature for o in observations}
        if len(names) != 1:
            raise ValueError(f"templates of several features in one batch: {sorted(names)}")
        return cls(names.pop(), np.stack([o.values for o in observations]))

    def __len__(self) -> int:
        return int(self.matrix.shape[0])


@runtime_checkable
class Feature(Protocol):
    """A speaker feature: observe speech, pool observations, score against templates."""

    name: str
    dimension: int
    version: str  # bumped whenever observe() would give different values (cache key)
    similarity_kind: SimilarityKind  # how the daemon's scorer compares observations (no names)

    def observe(self, audio: np.ndarray, rate: int) -> Observation:
        """Observation of float32 mono audio in [-1, 1] at ``rate`` Hz (speech only)."""
        ...

    def pool(self, observations: Sequence[Observation]) -> Observation:
        """One observation standing for all of ``observations`` (a template or a track)."""
        ...

    def similarity(self, test: Observation, templates: TemplateBatch) -> np.ndarray:
        """(N,) similarity of one observation to every template; higher is more alike."""
        ...

    def similarities(self, tests: np.ndarray, templates: TemplateBatch) -> np.ndarray:
        """(T, D) test values against (N, D) templates -> (T, N) similarities."""
        ...

    def describe(self, observation: Observation) -> dict[str, Any]:
        """A JSON-ready summary of an observation (what ``voxmeter features`` prints)."""
        ...


class FeatureStream(Protocol):
    """One window's observation computed while the window fills: :meth:`feed` blocks of
    16 kHz float32 speech as they arrive, :meth:`finish` once at the window's end. The result
    equals ``observe`` of the concatenated blocks (tests hold each extractor to it)."""

    def feed(self, audio: np.ndarray) -> None: ...

    def finish(self) -> Observation: ...


class BufferedStream:
    """The stream of a feature that cannot work ahead: it keeps the blocks, observes at the end."""

    def __init__(self, feature: Feature, rate: int) -> None:
        self.feature, self.rate = feature, rate
        self._blocks: list[np.ndarray] = []

    def feed(self, audio: np.ndarray) -> None:
        self._blocks.append(np.asarray(audio, dtype=np.float32))

    def finish(self) -> Observation:
        audio = np.concatenate(self._blocks) if self._blocks else np.zeros(0, np.float32)
        return self.feature.observe(audio, self.rate)


def open_stream(feature: Feature, rate: int) -> FeatureStream:
    """A stream of ``feature``: its own if it can work ahead (an optional ``stream(rate)``
    method returning one, or None where it cannot), else a :class:`BufferedStream`."""
    opener = getattr(feature, "stream", None)
    stream = opener(rate) if opener is not None else None
    return stream if stream is not None else BufferedStream(feature, rate)


_INSTANCES: dict[str, Feature] = {}


def _check_backend(backend: str) -> str:
    if backend not in EMBEDDING_BACKENDS:
        raise ValueError(
            f"unknown embedding backend {backend!r}; known: {', '.join(EMBEDDING_BACKENDS)}"
        )
    return backend


def embedding_backend() -> str:
    """The process's embedding backend: the last :func:`set_embedding_backend`, else the
    default (:data:`DEFAULT_EMBEDDING`)."""
    return _check_backend(os.environ.get(EMBEDDING_ENV) or DEFAULT_EMBEDDING)


def set_embedding_backend(backend: str) -> None:
    """Select the backend behind ``get_feature("embedding")`` in this process and in the
    worker processes it starts from now on (through :data:`EMBEDDING_ENV`)."""
    os.environ[EMBEDDING_ENV] = _check_backend(backend)


def requested_phone_backend() -> str:
    """The phone backend asked for (``$VOXMETER_PHONE``): a backend, or :data:`AUTO_PHONE`
    when unset, for the caller to resolve against its calibration."""
    backend = os.environ.get(PHONE_ENV) or AUTO_PHONE
    if backend != AUTO_PHONE and backend not in PHONE_BACKENDS:
        known = ", ".join((AUTO_PHONE, *PHONE_BACKENDS))
        raise ValueError(f"unknown phone backend {backend!r}; known: {known}")
    return backend


def phone_backend() -> str:
    """The process's phone backend: the last :func:`set_phone_backend`, else the default (a
    fit with no calibration to follow, such as ``voxmeter calibrate``, uses the default)."""
    backend = requested_phone_backend()
    return DEFAULT_PHONE if backend == AUTO_PHONE else backend


def set_phone_backend(backend: str) -> None:
    """Select the backend behind ``get_feature("phone")`` here and in the worker processes
    started from now on (through :data:`PHONE_ENV`)."""
    if backend not in PHONE_BACKENDS:
        raise ValueError(f"unknown phone backend {backend!r}; known: {', '.join(PHONE_BACKENDS)}")
    os.environ[PHONE_ENV] = backend


def embedding_runtime() -> str:
    """The process's embedding runtime: the last :func:`set_embedding_runtime`, else auto."""
    return os.environ.get(RUNTIME_ENV) or DEFAULT_RUNTIME


def set_embedding_runtime(runtime: str) -> None:
    """Run the embedding network on ``runtime`` (auto, onnx, torch) here and in the worker
    processes started from now on."""
    from monitor.features.embedding_onnx import RUNTIMES

    if runtime not in RUNTIMES:
        raise ValueError(f"unknown embedding runtime {runtime!r}; known: {', '.join(RUNTIMES)}")
    os.environ[RUNTIME_ENV] = runtime


def _factory(spec: str) -> Any:
    module_name, class_name = spec.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def embedding_class(backend: str) -> Any:
    """The class of one embedding backend (its ``version`` and ``dimension``, no weights)."""
    return _factory(EMBEDDING_BACKENDS[_check_backend(backend)])


def backend_of_version(version: str) -> str:
    """Which embedding backend a stored ``version`` comes from (the version itself if none)."""
    for backend in EMBEDDING_BACKENDS:
        if embedding_class(backend).version == version:
            return backend
    return version


def get_feature(name: str) -> Feature:
    """The (process-wide, lazily built) extractor called ``name``; for ``embedding``, the one
    of the selected backend (:func:`embedding_backend`)."""
    if name == "embedding":
        backend, runtime = embedding_backend(), embedding_runtime()
        key = f"embedding:{backend}:{runtime}"
        if key not in _INSTANCES:
            _INSTANCES[key] = embedding_class(backend)(runtime=runtime)
        return _INSTANCES[key]
    if name == "phone":
        key = f"phone:{phone_backend()}"
        if key not in _INSTANCES:
            _INSTANCES[key] = _factory(PHONE_BACKENDS[phone_backend()])()
        return _INSTANCES[key]
    if name not in _FACTORIES:
        raise ValueError(f"unknown feature {name!r}; known: {', '.join(FEATURE_NAMES)}")
    if name not in _INSTANCES:
        _INSTANCES[name] = _factory(_FACTORIES[name])()
    return _INSTANCES[name]


def all_features() -> dict[str, Feature]:
    """Every feature by name, in :data:`FEATURE_NAMES` order (models load on first use)."""
    return {name: get_feature(name) for name in FEATURE_NAMES}


def check_batch(test_values: np.ndarray, templates: TemplateBatch, feature: str) -> np.ndarray:
    """(T, D) test values checked against the batch's feature and dimension (shared helper)."""
    if templates.feature != feature:
        raise ValueError(f"templates are for {templates.feature!r}, not {feature!r}")
    tests = np.atleast_2d(np.asarray(test_values, dtype=np.float64))
    if tests.shape[1] != templates.matrix.shape[1]:
        raise ValueError(
            f"{feature}: test dimension {tests.shape[1]} != template dimension "
            f"{templates.matrix.shape[1]}"
        )
    return tests


def pool_counts(feature: str, observations: Sequence[Observation]) -> Observation:
    """Histogram pooling: counts and seconds add (f0 and phone)."""
    if not observations:
        raise ValueError(f"{feature}: cannot pool zero observations")
    for o in observations:
        if o.feature != feature:
            raise ValueError(f"{feature}: cannot pool an observation of {o.feature!r}")
    values = np.sum([o.values for o in observations], axis=0)
    return Observation(feature, values, sum(o.seconds for o in observations))


class HistogramFeature:
    """What the count-histogram features (f0, phone) share: an observation is the counts of
    :meth:`counts`, pooling adds counts, similarity is minus the JS divergence in bits."""

    name: str
    dimension: int
    version: str
    similarity_kind: SimilarityKind = "histogram"  # how the daemon's scorer compares them

    def counts(self, audio: np.ndarray, rate: int) -> np.ndarray:
        """(dimension,) counts of float32 mono speech at ``rate`` Hz."""
        raise NotImplementedError

    def observe(self, audio: np.ndarray, rate: int) -> Observation:
        return Observation(self.name, self.counts(audio, rate), len(audio) / rate)

    def pool(self, observations: Sequence[Observation]) -> Observation:
        return pool_counts(self.name, observations)

    def similarity(self, test: Observation, templates: TemplateBatch) -> np.ndarray:
        return self.similarities(test.values[None, :], templates)[0]

    def similarities(self, tests: np.ndarray, templates: TemplateBatch) -> np.ndarray:
        return neg_js_divergence(check_batch(tests, templates, self.name), templates.matrix)
