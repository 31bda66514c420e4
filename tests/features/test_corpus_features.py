"""The three features on real speech: they must separate what they claim to separate."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from monitor.features.base import TemplateBatch, get_feature
from monitor.features.extract import Extraction
from monitor.features.f0 import median_hz

pytestmark = pytest.mark.corpus

Sample = tuple[dict[str, str], dict[str, list[str]], Extraction]


def test_every_file_extracted_without_error(adult_sample: Sample) -> None:
    _, paths, extraction = adult_sample
    assert not extraction.errors
    assert len(extraction.files) == sum(len(p) for p in paths.values()) == 32
    for result in extraction.files.values():
        assert 0 < result.speech_seconds <= result.duration_seconds
        assert set(result.timing_seconds) >= {"read", "vad", "f0", "phone", "embedding"}


def test_adult_women_speak_well_above_adult_men(adult_sample: Sample) -> None:
    genders, paths, extraction = adult_sample
    f0 = get_feature("f0")
    per_speaker = {
        speaker: median_hz(f0.pool([extraction.files[p].observations["f0"] for p in ps]).values)
        for speaker, ps in paths.items()
    }
    women = np.median([hz for s, hz in per_speaker.items() if genders[s] == "f"])
    men = np.median([hz for s, hz in per_speaker.items() if genders[s] == "m"])
    assert 150 < women < 300 and 80 < men < 180, per_speaker
    assert women - men > 50, per_speaker


def test_embeddings_prefer_the_same_speaker(adult_sample: Sample) -> None:
    _, paths, extraction = adult_sample
    speakers = [s for s, ps in paths.items() for _ in ps]
    vectors = np.stack(
        [extraction.files[p].observations["embedding"].values for ps in paths.values() for p in ps]
    )
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    feature = get_feature("embedding")
    S = feature.similarities(vectors, TemplateBatch("embedding", vectors))
    same = np.equal.outer(speakers, speakers)
    # every (anchor, same-speaker other, different-speaker) triple: is the same speaker closer?
    wins = []
    for a, b in itertools.permutations(range(len(speakers)), 2):
        if same[a, b]:
            wins.append(S[a, b] > S[a, ~same[a]])
    fraction = float(np.mean(np.concatenate(wins)))
    assert fraction > 0.8, fraction


def test_phone_histograms_are_full_and_differ_between_speakers(adult_sample: Sample) -> None:
    _, paths, extraction = adult_sample
    phone = get_feature("phone")
    pooled = [
        phone.pool([extraction.files[p].observations["phone"] for p in ps]) for ps in paths.values()
    ]
    for ps in paths.values():
        for p in ps:
            assert extraction.files[p].observations["phone"].values.sum() >= 5
    batch = TemplateBatch.from_observations(pooled)
    S = phone.similarities(batch.matrix, batch)
    off_diagonal = S[~np.eye(len(pooled), dtype=bool)]
    assert np.allclose(np.diag(S), 0.0)
    # no two speakers share a phone histogram (the network's expected counts are smoother
    # than decoded ones: its closest pair of these 8 speakers is 0.0075 bits apart)
    assert np.all(off_diagonal < -0.005)
    assert np.all((batch.matrix > 0).sum(axis=1) >= 15)  # many distinct phones per speaker
