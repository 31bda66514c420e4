"""Eq. 6 splits, splits by speech seconds, vectorised pooling and trial scoring."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.calibration.protocol import (
    NotEnoughSpeakersError,
    SpeakerUtterances,
    length_split,
    pool_groups,
    pool_trials,
    protocol_splits,
    score_trials,
)
from monitor.features.base import Feature, Observation, TemplateBatch, get_feature
from tests.calibration.synthetic import synthetic_speakers

FEATURES = ("f0", "phone", "embedding")


def test_design_example_k20_t1_d1() -> None:
    splits = protocol_splits(20, 1, 1)
    assert len(splits) == 20
    for start, (test, template) in enumerate(splits):
        assert test.tolist() == [start]
        assert template.tolist() == [(start + 10) % 20]  # Δ = 9


@pytest.mark.parametrize(
    ("K", "T", "D"), [(10, 1, 1), (10, 3, 5), (10, 5, 5), (7, 2, 4), (20, 5, 1)]
)
def test_blocks_never_overlap_and_are_consecutive(K: int, T: int, D: int) -> None:
    delta = (K - T - D) // 2
    for start, (test, template) in enumerate(protocol_splits(K, T, D)):
        assert not set(test) & set(template)
        assert test.tolist() == [(start + t) % K for t in range(T)]
        assert template.tolist() == [(start + T + delta + d) % K for d in range(D)]


@pytest.mark.parametrize(("K", "T", "D"), [(1, 1, 1), (5, 3, 3), (5, 0, 1), (5, 1, 0)])
def test_impossible_splits_raise(K: int, T: int, D: int) -> None:
    with pytest.raises(ValueError, match=r"eq\. 6"):
        protocol_splits(K, T, D)


def test_length_split_counts_speech_seconds() -> None:
    seconds = np.full(10, 3.0)
    test, template = length_split(seconds, 0, 6.0, 9.0)
    assert test.tolist() == [0, 1]  # 2 × 3 s reach 6 s
    assert template.tolist() == [4, 5, 6]  # D = 3, Δ = floor((10 - 2 - 3) / 2) = 2
    test, template = length_split(seconds, 8, 4.0, None)
    assert test.tolist() == [8, 9]  # 3 s is not enough for 4 s
    assert sorted(template.tolist()) == list(range(8))  # every other utterance
    assert length_split(seconds, 0, 20.0, 12.0) is None  # 7 + 4 utterances > 10
    assert length_split(np.array([5.0]), 0, 1.0, 1.0) is None


def test_length_split_uneven_lengths() -> None:
    seconds = np.array([1.0, 1.0, 4.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    test, template = length_split(seconds, 1, 5.0, 2.0)
    assert test.tolist() == [1, 2]
    assert seconds[test].sum() >= 5.0
    assert seconds[template].sum() >= 2.0
    assert not set(test) & set(template)


def test_pool_groups_matches_feature_pool(rng: np.random.Generator) -> None:
    seconds = rng.uniform(1, 4, 6)
    groups = np.array([[1, 1, 0, 0, 0, 0], [0, 0, 1, 0, 1, 1]], dtype=float)
    for name, values in (
        ("f0", rng.integers(0, 20, (6, 107)).astype(float)),
        ("embedding", rng.normal(size=(6, 256))),
    ):
        if name == "embedding":
            values /= np.linalg.norm(values, axis=1, keepdims=True)
        feature = get_feature(name)
        pooled = pool_groups(name, values, seconds, groups)
        for row, members in zip(pooled, groups.astype(bool), strict=True):
            observations = [
                Observation(name, v, s)
                for v, s in zip(values[members], seconds[members], strict=True)
            ]
            np.testing.assert_allclose(row, feature.pool(observations).values, atol=1e-12)


def _pool(feature: Feature, speaker: SpeakerUtterances, idx: np.ndarray) -> Observation:
    """Slow path: one Observation per utterance, pooled by the feature itself."""
    name = feature.name
    return feature.pool(
        [Observation(name, speaker.values[name][i], speaker.weights[name][i]) for i in idx]
    )


def test_score_trials_against_a_slow_reference(rng: np.random.Generator) -> None:
    speakers = synthetic_speakers(rng, n_speakers=5, n_utterances=6)
    trials = score_trials(speakers, test_seconds=3.0, template_seconds=5.0, features=FEATURES)
    assert trials.N == 5 and trials.T == 5 * 6
    np.testing.assert_array_equal(trials.truth, np.tile(np.arange(5), 6))
    start = 4
    for name in FEATURES:
        feature = get_feature(name)
        tests, templates = [], []
        for speaker in speakers:
            test_idx, template_idx = length_split(speaker.speech_seconds, start, 3.0, 5.0)

            tests.append(_pool(feature, speaker, test_idx))
            templates.append(_pool(feature, speaker, template_idx))
        batch = TemplateBatch.from_observations(templates)
        expected = np.stack([feature.similarity(t, batch) for t in tests])
        rows = trials.start == start
        np.testing.assert_allclose(trials.scores[name][rows], expected, atol=1e-12)
    assert np.all(trials.test_seconds >= 3.0)
    assert np.all(trials.template_seconds >= 5.0)


def test_short_speakers_are_dropped_and_listed(rng: np.random.Generator) -> None:
    speakers = synthetic_speakers(rng, n_speakers=4, n_utterances=6, seconds=(3.0, 4.0))
    short = synthetic_speakers(rng, n_speakers=1, n_utterances=3, seconds=(1.0, 1.5))[0]
    short = SpeakerUtterances(
        "short", short.utterances, short.speech_seconds, short.values, short.weights
    )
    trials = score_trials(
        [*speakers, short], test_seconds=3.0, template_seconds=6.0, features=("f0",)
    )
    assert trials.dropped == ("short",)
    assert "short" not in trials.aliases and trials.N == 4
    with pytest.raises(NotEnoughSpeakersError, match="only 0 speaker"):
        score_trials(speakers, test_seconds=30.0, template_seconds=6.0, features=("f0",))


def test_pool_groups_takes_a_sparse_membership(rng: np.random.Generator) -> None:
    from scipy import sparse

    seconds = rng.uniform(1, 4, 6)
    groups = np.array([[1, 1, 0, 0, 0, 0], [0, 0, 1, 0, 1, 1]], dtype=float)
    values = rng.normal(size=(6, 192))
    values /= np.linalg.norm(values, axis=1, keepdims=True)
    dense = pool_groups("embedding", values, seconds, groups)
    np.testing.assert_allclose(
        pool_groups("embedding", values, seconds, sparse.csr_array(groups)), dense, atol=1e-15
    )


def test_pooling_memory_does_not_grow_with_speakers_times_utterances(
    rng: np.random.Generator,
) -> None:
    """A dense (K·N, U) membership matrix would be 72 MB here (N = 300, K = 10): the pooling
    holds far less, so corpora of many speakers pool in the memory of their observations."""
    import tracemalloc

    N, K = 300, 10
    speakers = []
    for i in range(N):
        seconds = rng.uniform(1.5, 4.0, K)
        speakers.append(
            SpeakerUtterances(
                alias=f"s{i}",
                utterances=tuple(f"u{k}" for k in range(K)),
                speech_seconds=seconds,
                values={"f0": rng.integers(0, 30, (K, 107)).astype(float)},
                weights={"f0": seconds},
            )
        )
    tracemalloc.start()
    pooled = pool_trials(speakers, test_seconds=3.0, template_seconds=12.0, features=("f0",))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    dense_membership = (K * N) * (K * N) * 8
    assert pooled.tests["f0"].shape == (K * N, 107)
    assert peak < dense_membership / 4
