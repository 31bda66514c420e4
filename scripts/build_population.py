"""Build the reference population shipped with voxmeter, one file per embedding backend.

    python scripts/build_population.py [CORPUS] [--embedding BACKEND ...] [--jobs 2]

Pools each of the corpus's *train* speakers' utterances (speakers.tsv ``original_split`` =
train) into one template per feature as ``voxmeter enroll`` does (all their utterances, the
narrow-band copy included; per-file features come from the feature cache where it has them),
and fits the population model on those utterances (alone and pooled) scored against the
templates, then writes both, never audio, to
``monitor/population/data/population-<backend>.npz`` (:mod:`monitor.population.shipped`
describes the file). ``--refit`` keeps a shipped file's templates and fits the model again.
The test speakers are never in it: every test and benchmark measures speakers the shipped
population has not seen.

speechocean762 is CC BY 4.0: ``monitor/population/data/NOTICE.md`` carries the attribution.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench.common import CORPUS  # noqa: E402
from monitor.calibration.buckets import load_default  # noqa: E402
from monitor.disclosure.population import PopulationSet, fit_population_set  # noqa: E402
from monitor.enrolment.variants import narrow_model  # noqa: E402
from monitor.features.base import (  # noqa: E402
    DEFAULT_EMBEDDING,
    EMBEDDING_BACKENDS,
    Observation,
    TemplateBatch,
    get_feature,
    set_embedding_backend,
    set_phone_backend,
)
from monitor.population.shipped import (  # noqa: E402
    HISTOGRAMS,
    MODEL_PREFIX,
    NARROW,
    load_shipped,
    shipped_path,
)
from monitor.vocabulary import COMBINED  # noqa: E402

CORPUS_NAME = "speechocean762"
SOURCE = "https://www.openslr.org/101/"
FEATURES = (*HISTOGRAMS, "embedding")
NAMES = (*FEATURES, COMBINED)


def train_files(corpus: Path) -> dict[str, list[str]]:
    """Each train speaker's utterances (absolute paths, the feature cache's keys)."""
    from monitor.corpus import scan_corpus

    scanned = scan_corpus(corpus, split="train")
    return {
        speaker: [str(Path(u.path).absolute()) for u in scanned.utterances_of(speaker)]
        for speaker in sorted(scanned.speakers)
    }


def _pooled(feature: str, observations: list[Observation]) -> Observation:
    """The feature's pool over the files that carry evidence for it, as enrolment pools."""
    kept = [o for o in observations if np.any(o.values != 0)] or observations
    return get_feature(feature).pool(kept)


def templates(
    files: dict[str, list[str]], jobs: int
) -> tuple[dict[str, np.ndarray], np.ndarray, dict[str, str]]:
    """feature → (N, D) templates of the speakers (all their utterances pooled, as
    ``voxmeter enroll`` pools them), the speech seconds behind each, feature → version."""
    from monitor.corpus.jobs import CorpusJob
    from monitor.enrolment.variants import narrow_templates
    from monitor.features.extract import FeatureCache, default_cache_dir, extract_many

    paths = [p for ps in files.values() for p in ps]
    extraction = extract_many(paths, FeatureCache(default_cache_dir()), jobs=jobs)
    if extraction.errors:
        first = next(iter(extraction.errors.values()))
        raise SystemExit(f"cannot extract {len(extraction.errors)} files: {first}")
    features = FEATURES
    matrices = {f: np.zeros((len(files), get_feature(f).dimension)) for f in features}
    seconds = np.zeros(len(files))
    for row, speaker in enumerate(files):
        results = [extraction.files[p] for p in files[speaker]]
        for feature in features:
            pooled = _pooled(feature, [r.observations[feature] for r in results])
            matrices[feature][row] = pooled.values
            if feature == "embedding":
                seconds[row] = pooled.seconds
    narrow = narrow_templates(files, CorpusJob(jobs=jobs))
    matrices[NARROW] = np.stack([narrow[speaker].values for speaker in files])
    return matrices, seconds, _versions()


def _versions() -> dict[str, str]:
    """feature → the version that makes its templates (the selected backend's embedding)."""
    models = {f: get_feature(f).version for f in FEATURES}
    models[NARROW] = narrow_model(models["embedding"])
    return models


POOLS = (1, 2, 4, 8)
"""The evidence the model is fitted on: each train utterance alone (about one daemon window)
and pools of 2, 4 and 8 of a speaker's utterances (the longer evidence of a day)."""
MIN_ROWS = 40
"""Fewest pieces of evidence a calibration bucket's model is fitted on; a bucket with fewer is
served by the model below it (PopulationSet.lookup)."""


def evidence(
    files: dict[str, list[str]],
) -> tuple[list[dict[str, Observation]], list[float], list[int]]:
    """Each train speaker's utterances alone and pooled: observations, speech seconds, the
    speaker's row (from the feature cache the template step filled)."""
    from monitor.features.extract import FeatureCache, default_cache_dir, extract_many

    paths = [p for ps in files.values() for p in ps]
    extraction = extract_many(paths, FeatureCache(default_cache_dir()), features=FEATURES)
    rows: list[dict[str, Observation]] = []
    seconds: list[float] = []
    truth: list[int] = []
    for index, speaker in enumerate(files):
        results = [extraction.files[p] for p in files[speaker]]
        for size in POOLS:
            for start in range(0, len(results) - size + 1, size):
                part = results[start : start + size]
                rows.append({f: _pooled(f, [r.observations[f] for r in part]) for f in FEATURES})
                seconds.append(float(sum(r.speech_seconds for r in part)))
                truth.append(index)
    return rows, seconds, truth


def fit_models(
    backend: str, matrices: dict[str, np.ndarray], files: dict[str, list[str]]
) -> PopulationSet:
    """The population model of every feature and ``combined``, one per calibration bucket
    with enough evidence: the train evidence scored against the train templates as the
    daemon's scorer scores (float templates as shipped, the backend's calibration)."""
    from monitor.calibration.buckets import load_default
    from monitor.scoring.scorer import Scorer

    calibration = load_default(backend)
    features = {f: get_feature(f) for f in FEATURES}
    batches = {f: TemplateBatch(f, matrices[f].astype(np.float64)) for f in FEATURES}
    scorer = Scorer(tuple(files), batches, calibration, features)
    rows, seconds, truth = evidence(files)
    scored = scorer.evaluate_many(list(zip(rows, seconds, strict=True)))
    raw = {name: np.stack([e.features[name].scores for e in scored]) for name in NAMES}
    edges = {name: [b.seconds for b in calibration.buckets(name)] for name in NAMES}
    return fit_population_set(raw, np.array(truth), np.array(seconds), buckets=edges)


def write(
    backend: str,
    speakers: list[str],
    matrices: dict[str, np.ndarray],
    seconds: np.ndarray,
    models: dict[str, str],
    population: PopulationSet,
) -> Path:
    """The backend's shipped file: histograms normalised (float32), unit vectors (float16),
    the population model's arrays under ``model/``."""
    for feature in HISTOGRAMS:
        totals = matrices[feature].sum(axis=1, keepdims=True)
        matrices[feature] = (matrices[feature] / totals).astype(np.float32)
    for feature in ("embedding", NARROW):
        unit = matrices[feature] / np.linalg.norm(matrices[feature], axis=1, keepdims=True)
        matrices[feature] = unit.astype(np.float16)
    facts = {
        "corpus": CORPUS_NAME,
        "source": SOURCE,
        "licence": "CC BY 4.0",
        "split": "train",
        "speakers": len(speakers),
        "backend": backend,
    }
    target = shipped_path(backend)
    target.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, Any] = {
        "speakers": np.array(speakers),
        "seconds": seconds.astype(np.float32),
        "models": np.array(json.dumps(models, sort_keys=True)),
        "facts": np.array(json.dumps(facts, sort_keys=True)),
        **matrices,
        **{f"{MODEL_PREFIX}{k}": v for k, v in population.to_arrays().items()},
    }
    np.savez_compressed(target, **arrays)
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=CORPUS)
    parser.add_argument(
        "--embedding", action="append", choices=sorted(EMBEDDING_BACKENDS), help="repeatable"
    )
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument(
        "--refit", action="store_true", help="keep the shipped templates, fit the model again"
    )
    args = parser.parse_args(argv)
    files = train_files(args.corpus)
    for backend in args.embedding or [DEFAULT_EMBEDDING]:
        set_embedding_backend(backend)
        # the phone templates as the daemon extracts them with this backend's calibration
        set_phone_backend(load_default(backend).phone_backend)
        if args.refit:  # the shipped templates as they are; only the model is fitted again
            shipped = load_shipped(backend, check_model=False)
            if list(shipped.speakers) != list(files):
                raise SystemExit(f"{shipped_path(backend)}: other speakers than the corpus's")
            matrices = dict(shipped.templates)
            seconds, models = shipped.seconds, _versions()
        else:
            matrices, seconds, models = templates(files, args.jobs)
        population = fit_models(backend, matrices, files)
        target = write(backend, list(files), matrices, seconds, models, population)
        print(f"{target}: {len(files)} speakers, {target.stat().st_size} bytes", flush=True)


if __name__ == "__main__":
    main()
