"""A small real-corpus sample, extracted once per test session (shared by the corpus tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.corpus import scan_corpus
from monitor.features.extract import Extraction, FeatureCache, extract_many

SPEAKERS_PER_GENDER = 4
UTTERANCES_PER_SPEAKER = 4


@pytest.fixture(scope="session")
def adult_sample(
    corpus_root: Path,
    corpus_speakers: list[dict[str, str]],
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[dict[str, str], dict[str, list[str]], Extraction]:
    """(gender per speaker, utterance paths per speaker, their features) for 4 women and 4 men
    aged 18 or more: the first by speaker id, 4 utterances each."""
    adults = [row for row in corpus_speakers if int(row["age"]) >= 18]
    chosen = [
        row
        for gender in ("f", "m")
        for row in [r for r in adults if r["gender"] == gender][:SPEAKERS_PER_GENDER]
    ]
    corpus = scan_corpus(corpus_root)
    paths = {
        row["speaker"]: [
            str(u.path) for u in corpus.utterances_of(row["speaker"])[:UTTERANCES_PER_SPEAKER]
        ]
        for row in chosen
    }
    cache = FeatureCache(tmp_path_factory.mktemp("feature-cache"))
    extraction = extract_many([p for ps in paths.values() for p in ps], cache)
    return {row["speaker"]: row["gender"] for row in chosen}, paths, extraction
