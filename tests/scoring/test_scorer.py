"""Scorer figures against a direct computation with monitor.disclosure (slow but obvious)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.calibration.buckets import COMBINED
from monitor.calibration.fusion import fuse_scores
from monitor.disclosure.composition import basic, kairouz_advanced, optimal
from monitor.disclosure.lid import lid_per_trial, lid_posteriors
from monitor.disclosure.srd import betabinom_pmf, identity_posterior
from monitor.features.base import FEATURE_NAMES, Observation, TemplateBatch, get_feature
from monitor.scoring.scorer import PreparedTemplates, Scorer, score_track
from tests.daemon_corpus import hand_calibration

N = 40
DIMS = {"f0": 107, "phone": 39, "embedding": 256}


def random_observation(rng: np.random.Generator, name: str, seconds: float) -> Observation:
    if name == "embedding":
        v = rng.normal(size=DIMS[name])
        return Observation(name, v / np.linalg.norm(v), seconds)
    return Observation(name, rng.poisson(3.0, size=DIMS[name]).astype(float), seconds)


@pytest.fixture
def setup(rng: np.random.Generator):
    features = {name: get_feature(name) for name in FEATURE_NAMES}
    templates = {
        name: TemplateBatch(
            name, np.stack([random_observation(rng, name, 20).values for _ in range(N)])
        )
        for name in FEATURE_NAMES
    }
    # identities 5 and 6 share every template: tied scores must share rank mass
    for name in FEATURE_NAMES:
        m = templates[name].matrix.copy()
        m[6] = m[5]
        templates[name] = TemplateBatch(name, m)
    aliases = tuple(f"id{i:02d}" for i in range(N))
    calibration = hand_calibration(N)
    # float64 layout: the figures must then match the direct computation to rounding
    scorer = Scorer(aliases, templates, calibration, features, delta=1e-6, dtype=np.float64)
    return scorer, features, templates, calibration


def direct(features, templates, calibration, observations, seconds, index):
    """(feature, measure) → bits, computed with the library's batch functions."""
    out = {}
    raw = {}
    for name, feature in features.items():
        s = feature.similarities(observations[name].values[None, :], templates[name])
        raw[name] = s
    weights = {name: calibration.lookup(name, seconds)[0].lid_weight for name in features}
    raw[COMBINED] = fuse_scores(raw, weights)
    for name, s in raw.items():
        bucket = calibration.lookup(name, seconds)[0]
        p = identity_posterior(s[0], betabinom_pmf(N, bucket.alpha, bucket.beta))
        out[(name, "srd")] = math.log2(N * p[index])
        out[(name, "lid")] = float(lid_per_trial(s, np.array([index]), bucket.lid_weight)[0])
    return out, raw


@pytest.mark.parametrize("index", [0, 5, 6, 17])
@pytest.mark.parametrize("seconds", [3.0, 9.0, 40.0])
def test_local_figures_match_direct_computation(setup, rng, index, seconds) -> None:
    scorer, features, templates, calibration = setup
    pooled = {name: random_observation(rng, name, seconds) for name in FEATURE_NAMES}
    window = {name: random_observation(rng, name, 3.0) for name in FEATURE_NAMES}
    result = score_track(
        scorer,
        identity=f"id{index:02d}",
        pooled=pooled,
        pooled_seconds=seconds,
        window=window,
        window_seconds=3.0,
        windows=4,
        max_window_bits=0.5,
        measure=("combined", "lid"),
    )
    expected, _ = direct(features, templates, calibration, pooled, seconds, index)
    alone, _ = direct(features, templates, calibration, window, 3.0, index)
    assert len(result.disclosures) == 8
    for d in result.disclosures:
        assert d.cumulative_bits == pytest.approx(expected[(d.feature, d.measure)], abs=1e-9)
        assert d.window_bits == pytest.approx(alone[(d.feature, d.measure)], abs=1e-9)
    assert result.window_bits == pytest.approx(alone[("combined", "lid")])
    assert result.extrapolated["embedding"] is (seconds > 24.0)
    assert result.information_gain_bits is None and result.top_candidate is None


def test_unknown_track_information_gain_and_top_candidate(setup, rng) -> None:
    scorer, features, templates, calibration = setup
    pooled = {name: random_observation(rng, name, 12.0) for name in FEATURE_NAMES}
    result = score_track(
        scorer,
        identity=None,
        pooled=pooled,
        pooled_seconds=12.0,
        window=pooled,
        window_seconds=12.0,
        windows=1,
        max_window_bits=-math.inf,
        measure=("combined", "lid"),
    )
    _, raw = direct(features, templates, calibration, pooled, 12.0, 0)
    weight = calibration.lookup(COMBINED, 12.0)[0].lid_weight
    p = lid_posteriors(raw[COMBINED], weight)[0]
    top = int(np.argmax(p))
    gain = math.log2(N) + float(np.sum(p * np.log2(p)))
    assert result.information_gain_bits == pytest.approx(gain, abs=1e-9)
    assert result.top_candidate == f"id{top:02d}" == result.subject
    assert result.top_candidate_bits == pytest.approx(math.log2(N * p[top]))
    expected, _ = direct(features, templates, calibration, pooled, 12.0, top)
    for d in result.disclosures:
        assert d.cumulative_bits == pytest.approx(expected[(d.feature, d.measure)], abs=1e-9)
    assert 0.0 <= result.information_gain_bits <= math.log2(N)


def test_composition_bounds_in_bits(setup) -> None:
    scorer = setup[0]
    bounds = scorer.bounds(25, 0.8)
    eps = 0.8 * math.log(2)
    assert bounds.epsilon_nats == pytest.approx(eps)
    assert bounds.basic_bits == pytest.approx(25 * 0.8)
    assert bounds.basic_bits == pytest.approx(float(basic(eps, 25)) / math.log(2))
    advanced = min(25 * eps, float(kairouz_advanced(eps, 25, 1e-6)))
    assert bounds.advanced_bits == pytest.approx(advanced / math.log(2))
    assert bounds.optimal_bits == pytest.approx(float(optimal(eps, 25, 1e-6)) / math.log(2))
    assert bounds.optimal_bits <= bounds.advanced_bits + 1e-9 <= bounds.basic_bits + 2e-9
    # no positive window disclosure: nothing to compose
    zero = scorer.bounds(3, -0.2)
    assert (zero.basic_bits, zero.advanced_bits, zero.optimal_bits) == (0.0, 0.0, 0.0)
    assert scorer.ceiling_bits == pytest.approx(math.log2(N))


def test_scorer_refuses_mismatched_templates(setup) -> None:
    _, features, templates, calibration = setup
    with pytest.raises(ValueError, match="templates but"):
        Scorer(("a", "b"), templates, calibration, features)


def histogram_templates(rng: np.random.Generator, n: int, dims: int) -> np.ndarray:
    """Count rows of varied sparsity (some bins empty), one all-zero row."""
    rate = rng.gamma(1.0, 3.0, size=(n, dims)) * (rng.random((n, dims)) < 0.7)
    counts = rng.poisson(rate).astype(float)
    counts[3] = 0.0
    return counts


@pytest.mark.parametrize("name", ["f0", "phone"])
def test_float32_histogram_scores_match_float64(rng, name) -> None:
    n, dims = 3000, DIMS[name]
    feature = get_feature(name)
    batch = TemplateBatch(name, histogram_templates(rng, n, dims))
    fast = PreparedTemplates(feature, batch, dtype=np.float32)
    exact = PreparedTemplates(feature, batch, dtype=np.float64)
    dense = rng.poisson(6.0, size=dims).astype(float)  # every bin: the all-bins path
    sparse = np.zeros(dims)
    sparse[rng.choice(dims, size=dims // 5, replace=False)] = rng.poisson(5.0, dims // 5) + 1
    tests = [Observation(name, v, 3.0) for v in (dense, sparse, np.zeros(dims))]
    got, want = fast.similarities(tests), exact.similarities(tests)
    reference = feature.similarities(np.stack([t.values for t in tests]), batch)
    for g, w, r in zip(got, want, reference, strict=True):
        np.testing.assert_allclose(w, r, rtol=0, atol=1e-12)  # float64 layout = library
        assert g.dtype == np.float64
        assert np.max(np.abs(g - w)) < 5e-7  # ~1e-7 measured at N = 10⁵
        # ranks agree except between near-ties within 1e-6
        order = np.argsort(-w, kind="stable")
        flipped = np.diff(g[order]) > 0
        assert np.all(np.abs(np.diff(w[order]))[flipped] < 1e-6)
    assert np.all(got[2] == -1.0) and got[0][3] == -1.0  # empty test or template: worst score


def test_float32_cosine_matches_float64(rng) -> None:
    feature = get_feature("embedding")
    m = rng.normal(size=(2000, DIMS["embedding"]))
    m[7] = 0.0
    batch = TemplateBatch("embedding", m)
    tests = [random_observation(rng, "embedding", 3.0) for _ in range(2)]
    tests.append(Observation("embedding", np.zeros(DIMS["embedding"]), 3.0))
    got = PreparedTemplates(feature, batch, dtype=np.float32).similarities(tests)
    reference = feature.similarities(np.stack([t.values for t in tests]), batch)
    for g, r in zip(got, reference, strict=True):
        assert np.max(np.abs(g - r)) < 1e-6
    assert got[0][7] == 0.0 and np.all(got[2] == 0.0)


def test_float32_disclosure_within_1e4_bits_of_float64(rng) -> None:
    n = 2000
    features = {name: get_feature(name) for name in FEATURE_NAMES}
    templates = {
        name: TemplateBatch(
            name,
            rng.normal(size=(n, 256))
            if name == "embedding"
            else histogram_templates(rng, n, DIMS[name]),
        )
        for name in FEATURE_NAMES
    }
    aliases = tuple(f"id{i}" for i in range(n))
    calibration = hand_calibration(n)
    fast = Scorer(aliases, templates, calibration, features, dtype=np.float32)
    exact = Scorer(aliases, templates, calibration, features, dtype=np.float64)
    pooled = {name: random_observation(rng, name, 20.0) for name in FEATURE_NAMES}
    window = {name: random_observation(rng, name, 3.0) for name in FEATURE_NAMES}
    for identity in ("id0", "id11", None):
        kwargs = dict(
            identity=identity,
            pooled=pooled,
            pooled_seconds=20.0,
            window=window,
            window_seconds=3.0,
            windows=3,
            max_window_bits=0.2,
            measure=("combined", "lid"),
        )
        a, b = score_track(fast, **kwargs), score_track(exact, **kwargs)
        assert a.subject == b.subject
        for x, y in zip(a.disclosures, b.disclosures, strict=True):
            assert (x.feature, x.measure) == (y.feature, y.measure)
            assert x.cumulative_bits == pytest.approx(y.cumulative_bits, abs=1e-4)
            assert x.window_bits == pytest.approx(y.window_bits, abs=1e-4)
        if identity is None:
            assert a.information_gain_bits == pytest.approx(b.information_gain_bits, abs=1e-4)


def test_pooled_and_window_scored_together_equal_separately(setup, rng) -> None:
    scorer = setup[0]
    pooled = {name: random_observation(rng, name, 9.0) for name in FEATURE_NAMES}
    window = {name: random_observation(rng, name, 3.0) for name in FEATURE_NAMES}
    both = scorer.evaluate_many([(pooled, 9.0), (window, 3.0)])
    for evidence, (observations, seconds) in zip(both, [(pooled, 9.0), (window, 3.0)], strict=True):
        alone = scorer.evaluate(observations, seconds)
        for name, scores in alone.features.items():
            np.testing.assert_array_equal(evidence.features[name].scores, scores.scores)
    # a track's first window: pooled evidence is the window itself, figures equal
    first = score_track(
        scorer,
        identity="id03",
        pooled=window,
        pooled_seconds=3.0,
        window=dict(window),
        window_seconds=3.0,
        windows=1,
        max_window_bits=-math.inf,
        measure=("combined", "lid"),
    )
    for d in first.disclosures:
        assert d.cumulative_bits == d.window_bits


def test_empty_histogram_gives_uniform_posterior_as_library(setup, rng) -> None:
    scorer, features, templates, calibration = setup
    pooled = {name: random_observation(rng, name, 9.0) for name in FEATURE_NAMES}
    pooled["f0"] = Observation("f0", np.zeros(DIMS["f0"]), 9.0)  # no voiced frame: all tie
    evidence = scorer.evaluate(pooled, 9.0)
    np.testing.assert_allclose(evidence.features["f0"].log_posterior, -math.log(N), atol=1e-12)
    expected, _ = direct(features, templates, calibration, pooled, 9.0, 17)
    for key, bits in evidence.disclosure_bits(17).items():
        assert bits == pytest.approx(expected[key], abs=1e-9)
