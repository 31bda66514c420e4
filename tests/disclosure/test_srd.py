"""SRD against DESIGN §7.1, §7.4, §7.9 reference values and derived identities."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import betabinom

from monitor.disclosure.ranks import rank_histogram
from monitor.disclosure.srd import (
    LOSSES,
    betabinom_pmf,
    fit_rank_model,
    identity_posterior,
    joint_posterior,
    rank_disclosure,
    srd_stats,
)
from tests.disclosure.examples import M4, S4

GAMMA_05_3 = [0.484706, 0.198289, 0.118973, 0.077112, 0.050605, 0.032532, 0.019881, 0.011076,
              0.005192, 0.001635]  # fmt: skip


def test_uniform_model_discloses_nothing():
    g = betabinom_pmf(10, 1.0, 1.0)
    np.testing.assert_allclose(g, 0.1, rtol=1e-12)
    s = srd_stats(g)
    assert (s.MeanD, s.MaxD, s.StDD, s.Spread) == pytest.approx((0, 0, 0, 0), abs=1e-12)
    assert s.IdR == pytest.approx(0.1) and s.N == 10
    # Near-uniform fitted models round to tiny negative KL; MeanD is never printed as "-0.000".
    for N in (3, 5, 7, 10, 250):
        assert srd_stats(betabinom_pmf(N, 1.0 - 2e-10, 1.0 - 3e-10)).MeanD >= 0.0


def test_model_reference_values():
    g = betabinom_pmf(10, 0.5, 3.0)
    np.testing.assert_allclose(g, GAMMA_05_3, atol=1e-6)
    s = srd_stats(g)
    assert s.MeanD == pytest.approx(1.084680, abs=1e-6)
    assert s.MaxD == pytest.approx(2.277109, abs=1e-6)
    assert s.StDD == pytest.approx(1.433345, abs=1e-6)
    assert s.IdR == pytest.approx(0.484706, abs=1e-6)
    assert s.Spread == pytest.approx(0.3)


def test_histogram_reference_values_and_strict_spread():
    h = np.array([5, 3, 0, 1, 1, 0, 0, 0, 0, 0], dtype=float)
    s = srd_stats(h)
    p = h / h.sum()
    entropy = -sum(x * math.log2(x) for x in p if x > 0)
    assert s.MeanD == pytest.approx(1.636453, abs=1e-6)
    assert s.MeanD == pytest.approx(math.log2(10) - entropy, abs=1e-12)
    assert s.MaxD == pytest.approx(2.321928, abs=1e-6)
    assert s.StDD == pytest.approx(0.878253, abs=1e-6)
    assert s.IdR == 0.5
    assert s.Spread == pytest.approx(0.2)  # ranks 4 and 5 sit exactly at 1/N: not counted
    eps = rank_disclosure(h)
    assert eps[2] == -math.inf and eps[3] == pytest.approx(0.0, abs=1e-12)


def test_q_anonymity():
    N, q = 64, 4
    s = srd_stats(np.r_[np.ones(q), np.zeros(N - q)])
    assert s.MeanD == pytest.approx(math.log2(N / q)) and s.MaxD == pytest.approx(4.0)
    assert s.StDD == pytest.approx(0.0, abs=1e-12) and s.Spread == pytest.approx(q / N)


def test_paper003_matrix_all_rank_one():
    s = srd_stats(rank_histogram(S4, M4))
    assert (s.MeanD, s.MaxD, s.IdR, s.StDD, s.Spread) == pytest.approx((2, 2, 1, 0, 0.25))


def test_table2_max_disclosure_is_log2_n_idr():
    # Paper 000 Table II: MaxD = log2(N·IdR) for every printed column (§7.1).
    rows = [(11696, 0.0038, 5.48), (11696, 0.1077, 10.30), (1251, 0.9674, 10.24),
            (11696, 0.0058, 6.10), (11696, 0.0038, 5.47), (11696, 0.1067, 10.29),
            (1251, 0.9675, 10.24), (11696, 0.0057, 6.07)]  # fmt: skip
    for N, idr, max_d in rows:
        assert abs(math.log2(N * idr) - max_d) <= 0.03


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 3000),
    st.floats(-12, 12),
    st.floats(-12, 12),
)
def test_betabinom_normalised_and_matches_scipy(N, u, v):
    g = betabinom_pmf(N, math.exp(u), math.exp(v))
    assert g.shape == (N,) and np.all(g >= 0)
    # ln Γ of arguments near e¹² ≈ 1.6e5 is ~2e6 in size, so each log term carries ~1e-10 error.
    assert g.sum() == pytest.approx(1.0, abs=1e-8)
    ref = betabinom.pmf(np.arange(N), N - 1, math.exp(u), math.exp(v))
    np.testing.assert_allclose(g, ref, rtol=1e-6, atol=1e-300)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=40).filter(lambda h: sum(h) > 0))
def test_mean_disclosure_is_log2n_minus_entropy(h):
    counts = np.array(h, dtype=float)
    p = counts / counts.sum()
    q = p[p > 0]
    s = srd_stats(counts)
    assert s.MeanD == pytest.approx(math.log2(p.size) + float(np.sum(q * np.log2(q))), abs=1e-9)
    assert s.MeanD >= -1e-12 and s.MaxD <= math.log2(p.size) + 1e-12
    assert s.Spread == pytest.approx(np.count_nonzero(counts * p.size > counts.sum()) / p.size)


def test_degenerate_inputs():
    one = srd_stats(np.array([7.0]))
    assert (one.MeanD, one.MaxD, one.StDD, one.Spread, one.IdR) == (0, 0, 0, 0, 1)
    assert betabinom_pmf(1, 0.3, 9.0).tolist() == [1.0]
    for bad in (np.zeros(5), np.array([1.0, -1.0]), np.array([]), np.array([np.nan, 1.0])):
        with pytest.raises(ValueError):
            srd_stats(bad)
    with pytest.raises(ValueError, match="empty"):
        fit_rank_model(np.zeros(4))
    with pytest.raises(ValueError, match="alpha"):
        betabinom_pmf(4, 0.0, 1.0)
    with pytest.raises(ValueError, match="loss="):
        fit_rank_model(np.ones(4), loss="mse")
    fit = fit_rank_model(np.array([3.0]))
    assert fit.KL_bits == 0 and fit.rank1_match_bits == 0 and not fit.at_bound


@pytest.fixture(scope="module")
def sampled_histogram() -> np.ndarray:
    """10⁶ ranks from the generative story: θ ~ Beta(0.4, 4), rank − 1 ~ Binomial(49, θ)."""
    gen = np.random.default_rng(5)
    theta = gen.beta(0.4, 4.0, size=1_000_000)
    return np.bincount(gen.binomial(49, theta), minlength=50).astype(float)


def test_ll_fit_recovers_parameters_and_minimises_kl(sampled_histogram):
    fits = {loss: fit_rank_model(sampled_histogram, loss=loss) for loss in LOSSES}
    ll = fits["ll"]
    assert ll.alpha == pytest.approx(0.4, rel=0.03) and ll.beta == pytest.approx(4.0, rel=0.03)
    assert not ll.at_bound and ll.KL_bits < 1e-3
    for loss in ("ms", "wms", "cll"):
        assert fits[loss].alpha == pytest.approx(0.4, rel=0.1), loss
        assert fits[loss].beta == pytest.approx(4.0, rel=0.1), loss
    for fit in fits.values():
        assert ll.KL_bits <= fit.KL_bits + 1e-9
        assert np.isfinite(fit.alpha) and fit.stats.N == 50
    assert fits["cll"].rank1_match_bits <= ll.rank1_match_bits + 1e-9


def test_sparse_single_speaker_histograms():
    N = 250
    h = np.zeros(N)
    np.add.at(h, [0, 0, 0, 2, 5, 40], 1)
    fits = {loss: fit_rank_model(h, loss=loss) for loss in LOSSES}
    for fit in fits.values():
        assert fits["ll"].KL_bits <= fit.KL_bits + 1e-9
        assert fit.stats.MaxD <= math.log2(N) + 1e-9
    # All mass at rank 1: the optimum runs to α → 0; the fit stops at the box and says so.
    top = fit_rank_model(np.r_[1.0, np.zeros(N - 1)])
    assert top.at_bound and top.stats.IdR > 0.999 and top.KL_bits < 1e-6
    # p~_1 = 0: rank-1 match is infinite, the LL fit still succeeds.
    miss = fit_rank_model(np.r_[0.0, 2.0, 1.0, np.zeros(N - 3)])
    assert miss.rank1_match_bits == math.inf and np.isfinite(miss.KL_bits)


def test_fit_on_exact_model_is_exact():
    g = betabinom_pmf(200, 0.7, 2.5)
    for loss in LOSSES:
        fit = fit_rank_model(g, loss=loss)
        assert fit.KL_bits < 1e-8, loss
        assert fit.alpha == pytest.approx(0.7, rel=1e-3), loss


def slow_identity_posterior(s: np.ndarray, p: np.ndarray) -> np.ndarray:
    out = np.zeros(s.size)
    for h in range(s.size):
        first = sum(1 for x in s if x > s[h])  # 0-based first position of h's tie group
        size = sum(1 for x in s if x == s[h])
        out[h] = sum(p[first : first + size]) / size
    return out


def test_identity_posterior_matches_loop_with_ties(rng):
    p = betabinom_pmf(9, 0.4, 3.0)
    S = np.round(rng.normal(size=(25, 9)), 1)
    post = identity_posterior(S, p)
    np.testing.assert_allclose(post.sum(axis=1), 1.0)
    for i in range(25):
        np.testing.assert_allclose(post[i], slow_identity_posterior(S[i], p), rtol=1e-12)
    np.testing.assert_allclose(identity_posterior(np.array([0.1, 0.9, 0.5]), [3, 2, 1]),
                               [1 / 6, 3 / 6, 2 / 6])  # fmt: skip
    with pytest.raises(ValueError, match="last axis"):
        identity_posterior(np.zeros(4), p)


def test_joint_posterior():
    a = np.array([0.5, 0.3, 0.2, 0.0])
    b = np.array([0.1, 0.6, 0.1, 0.2])
    np.testing.assert_allclose(joint_posterior(np.stack([a, b])), a * b / np.sum(a * b))
    np.testing.assert_allclose(joint_posterior(np.stack([a, np.full(4, 0.25)])), a)
    np.testing.assert_allclose(joint_posterior(a[None, :]), a)
    with pytest.raises(ValueError, match="probability 0"):
        joint_posterior(np.array([[1.0, 0.0], [0.0, 1.0]]))


@settings(max_examples=8, deadline=None)
@given(
    st.integers(2, 300),
    st.integers(1, 40),
    st.floats(-3, 3),
    st.floats(-3, 3),
    st.integers(0, 2**32 - 1),
)
def test_ll_has_the_smallest_kl_on_sparse_histograms(N, T, u, v, seed):
    gen = np.random.default_rng(seed)
    ranks = gen.binomial(N - 1, gen.beta(math.exp(u), math.exp(v), size=T))
    h = np.bincount(ranks, minlength=N).astype(float)
    ll = fit_rank_model(h, loss="ll").KL_bits
    for loss in LOSSES[1:]:  # optimisers stop within ~1e-9 of their optimum: compare relatively
        other = fit_rank_model(h, loss=loss).KL_bits
        assert ll <= other + 1e-8 * max(1.0, abs(other)), loss
