"""The reference population shipped with voxmeter: templates of people who are not the household.

A disclosure figure says how far speech narrows down who is speaking among the reference
voices. A household that enrols only itself would have a handful of voices, a ceiling of a few
bits and a figure that says nothing; voxmeter therefore ships, per embedding backend, the
templates of the train speakers of speechocean762 (CC BY 4.0, see ``NOTICE.md`` beside the
data): one template per speaker and feature, never audio. They join the templates of the
database at start: the household and any reference speakers the user enrols add to them.

One file per backend, ``data/population-<backend>.npz`` (built by
``scripts/build_population.py``), holds:

- ``speakers`` (N,): the corpus's speaker ids; in the daemon they read ``ref-<id>``;
- ``f0``, ``phone`` (N, D) float32: histograms normalised to sum 1 (the scorer normalises
  them anyway, so the counts' scale carries nothing);
- ``embedding``, ``embedding+narrow`` (N, D) float16: unit vectors (the wide-band template
  and its narrow-band copy, :mod:`monitor.enrolment.variants`); float16 moves a cosine by < 10⁻³;
- ``seconds`` (N,): speech seconds pooled into each template;
- ``models``: JSON, feature → the version that made its templates; ``facts``: JSON, where
  the data came from;
- ``model/<feature>/<seconds>/…``: the population model fitted on these speakers' utterances
  scored against these templates (:class:`~monitor.disclosure.population.PopulationSet`), per
  feature and ``combined``, per calibration bucket: what states a figure against N_pop.

A file that is missing, of another backend or version, of the wrong shape or not finite is a
one-line error: the daemon never scores against a population it cannot trust.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from monitor.disclosure.population import PopulationSet
from monitor.enrolment.variants import narrow_model, narrow_name
from monitor.errors import InputError
from monitor.features.base import TemplateBatch, embedding_class, get_feature

__all__ = [
    "ALIAS_PREFIX",
    "DATA_DIR",
    "ShippedPopulation",
    "join",
    "load_shipped",
    "shipped_count",
    "shipped_path",
]

DATA_DIR = Path(__file__).parent / "data"
ALIAS_PREFIX = "ref-"
"""A shipped speaker's alias in the daemon (``ref-0001``): never mistaken for an enrolled one."""
NARROW = narrow_name()
HISTOGRAMS = ("f0", "phone")
MODEL_PREFIX = "model/"
FIX = "reinstall voxmeter, or rebuild it with scripts/build_population.py"


def shipped_path(backend: str) -> Path:
    """Where the population of one embedding backend lives in the package."""
    return DATA_DIR / f"population-{backend}.npz"


@dataclass(frozen=True)
class ShippedPopulation:
    """The shipped templates of one backend, checked, as float64 matrices (rows = speakers)."""

    backend: str
    speakers: tuple[str, ...]
    templates: Mapping[str, npt.NDArray[np.float64]]  # feature (and embedding+narrow) → (N, D)
    seconds: npt.NDArray[np.float64]
    facts: Mapping[str, object]
    model: PopulationSet | None = None  # None only while the build script refits it

    @property
    def aliases(self) -> tuple[str, ...]:
        return tuple(ALIAS_PREFIX + speaker for speaker in self.speakers)

    def __len__(self) -> int:
        return len(self.speakers)


def shipped_count(backend: str) -> int:
    """Speakers of the shipped population of ``backend`` (0 when it cannot be read: the daemon
    says why, with one line, when it starts)."""
    try:
        with np.load(shipped_path(backend), allow_pickle=False) as data:
            return int(data["speakers"].shape[0])
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):
        return 0


def _expected_models(backend: str) -> dict[str, str]:
    """feature → the version this voxmeter extracts with (what the file must have been made by)."""
    embedding = embedding_class(backend).version
    models = {name: get_feature(name).version for name in HISTOGRAMS}
    return {**models, "embedding": embedding, NARROW: narrow_model(embedding)}


def _dimension(feature: str, backend: str) -> int:
    if feature in HISTOGRAMS:
        return int(get_feature(feature).dimension)
    return int(embedding_class(backend).dimension)


def load_shipped(
    backend: str, path: Path | None = None, *, check_model: bool = True
) -> ShippedPopulation:
    """The shipped population of ``backend`` (from ``path``, default the package's file);
    InputError (one line naming the file) when it is missing or damaged. ``check_model``
    false (the build script's refit) leaves the population model out."""
    path = shipped_path(backend) if path is None else path
    if not path.is_file():
        raise InputError(str(path), f"the shipped reference population is missing: {FIX}")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: np.asarray(data[key]) for key in data.files}
        models = json.loads(str(arrays.pop("models")))
        facts = json.loads(str(arrays.pop("facts")))
        speakers = tuple(str(s) for s in arrays.pop("speakers"))
        seconds = arrays.pop("seconds").astype(np.float64)
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise InputError(
            str(path), f"damaged shipped reference population ({error}): {FIX}"
        ) from None
    expected = _expected_models(backend)
    templates: dict[str, npt.NDArray[np.float64]] = {}
    for feature, version in expected.items():
        problem = _problem(arrays.get(feature), len(speakers), _dimension(feature, backend))
        if problem is None and models.get(feature) != version:
            problem = f"made by {models.get(feature)!r}, this voxmeter extracts {version!r}"
        if problem is not None:
            raise InputError(
                str(path), f"shipped reference population, {feature}: {problem}: {FIX}"
            )
        templates[feature] = np.asarray(arrays[feature], dtype=np.float64)
    if len(set(speakers)) != len(speakers) or seconds.shape != (len(speakers),):
        raise InputError(str(path), f"shipped reference population: speakers damaged: {FIX}")
    model = _model(arrays, path) if check_model else None
    return ShippedPopulation(backend, speakers, templates, seconds, facts, model)


def _model(arrays: Mapping[str, np.ndarray], path: Path) -> PopulationSet:
    """The population model stored beside the templates (one per feature and ``combined``)."""
    stored = {k[len(MODEL_PREFIX) :]: v for k, v in arrays.items() if k.startswith(MODEL_PREFIX)}
    try:
        model = PopulationSet.from_arrays(stored)
    except ValueError as error:
        raise InputError(str(path), f"shipped reference population: {error}: {FIX}") from None
    missing = sorted({*HISTOGRAMS, "embedding", "combined"} - set(model.features))
    if missing:
        raise InputError(str(path), f"shipped population model lacks {missing}: {FIX}")
    return model


def _problem(matrix: np.ndarray | None, rows: int, dimension: int) -> str | None:
    """What is wrong with one stored matrix (None when it is usable)."""
    if matrix is None:
        return "no templates"
    if matrix.shape != (rows, dimension) or rows < 1:
        return f"shape {matrix.shape}, not ({rows}, {dimension})"
    if not np.issubdtype(matrix.dtype, np.floating):
        return f"values of type {matrix.dtype}, not numbers"
    if not np.isfinite(matrix).all():
        return "values that are not finite"
    if not (np.linalg.norm(matrix.astype(np.float64), axis=1) > 0).all():
        return "a template of zeros"
    return None


def join(
    stored: Sequence[str],
    batch: TemplateBatch | None,
    shipped: ShippedPopulation | None,
    feature: str,
) -> tuple[tuple[str, ...], TemplateBatch]:
    """The database's templates of ``feature`` (``stored`` aliases, rows of ``batch``; none
    in an empty database) followed by the shipped ones. A shipped speaker the database also
    holds (enrolled from the same corpus under its own id) is left out: one voice, one row.

    ValueError when there is nothing at all to score against."""
    rows: list[npt.NDArray[np.float64]] = []
    aliases = list(stored)
    if batch is not None:
        rows.append(batch.matrix)
    if shipped is not None:
        present = set(stored)
        keep = np.array(
            [s not in present and ALIAS_PREFIX + s not in present for s in shipped.speakers]
        )
        rows.append(shipped.templates[feature][keep])
        aliases += [a for a, k in zip(shipped.aliases, keep, strict=True) if k]
    if not aliases:
        raise ValueError(f"no {feature!r} templates")
    return tuple(aliases), TemplateBatch(feature=feature, matrix=np.concatenate(rows, axis=0))
