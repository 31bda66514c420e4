"""The population model fitted on the corpus's train speakers predicts what is measured on its
test speakers (embedding only, a few speakers: seconds with a warm feature cache)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from monitor.calibration.buckets import load_default
from monitor.corpus import scan_corpus
from monitor.disclosure.lid import lid_per_trial
from monitor.disclosure.population import fit_population_model, population_figures
from monitor.features.base import TemplateBatch, get_feature
from monitor.features.extract import FeatureCache, default_cache_dir, extract_many
from monitor.scoring.scorer import PreparedTemplates

SPEAKERS, TEMPLATE, WINDOWS = 12, 4, 2


def scored(corpus: Path, speakers: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(W, S) cosine of each window to every speaker's template, its speaker, its seconds."""
    scanned = scan_corpus(corpus)
    paths = {
        s: [str(u.path) for u in scanned.utterances_of(s)[: TEMPLATE + WINDOWS]] for s in speakers
    }
    found = extract_many(
        [p for ps in paths.values() for p in ps], FeatureCache(default_cache_dir()),
        features=("embedding",),
    ).files  # fmt: skip
    feature = get_feature("embedding")
    files = {s: [found[str(Path(p).absolute())] for p in ps] for s, ps in paths.items()}
    templates = TemplateBatch.from_observations(
        [feature.pool([f.observations["embedding"] for f in files[s][:TEMPLATE]]) for s in speakers]
    )
    windows = [(k, f) for k, s in enumerate(speakers) for f in files[s][TEMPLATE:]]
    prepared = PreparedTemplates(feature, templates, dtype=np.float64)
    scores = np.array(prepared.similarities([f.observations["embedding"] for _, f in windows]))
    return (
        scores,
        np.array([k for k, _ in windows]),
        np.array([f.speech_seconds for _, f in windows]),
    )


@pytest.mark.corpus
def test_fit_on_train_speakers_predicts_test_speakers(
    corpus_speakers: list[dict[str, str]], corpus_root: Path
) -> None:
    train = sorted(r["speaker"] for r in corpus_speakers if r["original_split"] == "train")
    test = sorted(r["speaker"] for r in corpus_speakers if r["original_split"] == "test")
    S_train, truth, _ = scored(corpus_root, train[:SPEAKERS])
    model = fit_population_model(S_train, truth, seconds=3.0)
    bucket = load_default().lookup("embedding", 3.0)[0]
    S_both, who, _ = scored(corpus_root, test[:SPEAKERS] + train[:SPEAKERS])
    S_test, own = S_both[who < SPEAKERS], who[who < SPEAKERS]
    # measured: each test window against every test speaker's template (N = SPEAKERS)
    measured = lid_per_trial(S_test[:, :SPEAKERS], own, bucket.lid_weight)
    # predicted: the window against its own template and the train speakers' (the reference)
    rows = np.concatenate([S_test[np.arange(own.size), own][:, None], S_test[:, SPEAKERS:]], axis=1)
    got = population_figures(
        rows, 0, model=model, population=SPEAKERS, lid_weight=bucket.lid_weight,
        alpha=bucket.alpha, beta=bucket.beta, templates_in_population=False,
    )  # fmt: skip
    assert np.median(np.abs(got.lid_bits - measured)) <= 0.25
    rank1 = np.mean(S_test[:, :SPEAKERS].argmax(axis=1) == own)
    assert abs(float(np.mean(got.rank1_probability)) - rank1) <= 0.1
    ceiling = math.log2(SPEAKERS) - 0.05
    assert abs(np.mean(got.ceiling_probability) - np.mean(measured >= ceiling)) <= 0.15
    assert not got.beyond_reference.any()
