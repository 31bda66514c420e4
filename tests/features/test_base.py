"""The protocol, registry, data classes and pooling rules."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.features.base import (
    FEATURE_NAMES,
    Feature,
    Observation,
    TemplateBatch,
    all_features,
    get_feature,
    pool_counts,
)
from monitor.features.embedding import GE2EEmbedding


def test_registry_names_every_feature_lazily() -> None:
    features = all_features()
    assert tuple(features) == FEATURE_NAMES == ("f0", "phone", "embedding")
    for name, feature in features.items():
        assert isinstance(feature, Feature)
        assert feature.name == name and feature.version
    assert (features["f0"].dimension, features["phone"].dimension) == (107, 39)
    assert features["embedding"].dimension == 192  # the default backend, ECAPA-TDNN
    assert get_feature("f0") is features["f0"]
    with pytest.raises(ValueError, match="unknown feature 'pitch'"):
        get_feature("pitch")


def test_observation_is_frozen_and_checked() -> None:
    obs = Observation("f0", [1, 2, 3], 2)
    assert obs.values.dtype == np.float64 and obs.seconds == 2.0
    with pytest.raises(ValueError):
        obs.values[0] = 5.0  # read-only
    with pytest.raises(ValueError, match="1-D"):
        Observation("f0", np.ones((2, 2)), 1.0)
    with pytest.raises(ValueError, match="NaN"):
        Observation("f0", np.array([np.nan]), 1.0)
    with pytest.raises(ValueError, match="seconds"):
        Observation("f0", np.ones(2), -1.0)


def test_template_batch_stacks_in_identity_order() -> None:
    batch = TemplateBatch.from_observations(
        [Observation("phone", np.full(39, float(i)), 1.0) for i in range(3)]
    )
    assert len(batch) == 3 and batch.matrix.shape == (3, 39)
    assert np.array_equal(batch.matrix[:, 0], [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="several features"):
        TemplateBatch.from_observations(
            [Observation("phone", np.ones(39), 1.0), Observation("f0", np.ones(39), 1.0)]
        )
    with pytest.raises(ValueError, match="not 'phone'"):
        get_feature("phone").similarity(
            Observation("phone", np.ones(39), 1.0), TemplateBatch("f0", np.ones((2, 39)))
        )


def test_count_pooling_adds_and_is_associative(rng: np.random.Generator) -> None:
    parts = [Observation("f0", rng.integers(0, 9, 107), s) for s in (1.0, 2.5, 0.5)]
    whole = pool_counts("f0", parts)
    nested = pool_counts("f0", [pool_counts("f0", parts[:2]), parts[2]])
    assert np.array_equal(whole.values, sum(p.values for p in parts))
    assert np.array_equal(whole.values, nested.values) and whole.seconds == 4.0
    with pytest.raises(ValueError, match="zero observations"):
        pool_counts("f0", [])


def test_embedding_pooling_is_a_seconds_weighted_mean_renormalised(
    rng: np.random.Generator,
) -> None:
    feature = GE2EEmbedding()
    vectors = rng.standard_normal((3, 256))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    seconds = np.array([1.0, 3.0, 0.0])
    pooled = feature.pool(
        [Observation("embedding", v, s) for v, s in zip(vectors, seconds, strict=True)]
    )
    expected = (seconds[:, None] * vectors).sum(axis=0)
    assert np.allclose(pooled.values, expected / np.linalg.norm(expected))
    assert pooled.seconds == 4.0
    assert np.linalg.norm(pooled.values) == pytest.approx(1.0)
    silent = feature.pool([Observation("embedding", np.zeros(256), 0.0)])
    assert np.all(silent.values == 0.0)
