"""ZEBRA (DESIGN §3) against the REPRO values of §7.4/§7.6 and slow references."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import quad

from monitor.disclosure.zebra import (
    d_ece,
    ece_curve,
    pav_llr,
    worst_case_log10_lr,
    z_of_log,
    zebra,
    zebra_tag,
)
from tests.disclosure.examples import NON, TAR

LN2 = math.log(2.0)


def slow_pav_llr(tar, non, *, laplace=False):
    """Obviously correct PAV: a Python loop over tie blocks, merging backwards on violations."""
    pooled = sorted([(s, 1) for s in tar] + [(s, 0) for s in non])
    blocks = []  # [sum of labels, count, [scores]]
    for score, label in pooled:
        if blocks and blocks[-1][2][-1] == score:
            blocks[-1][0] += label
            blocks[-1][1] += 1
            blocks[-1][2].append(score)
        else:
            blocks.append([label, 1, [score]])
    if laplace:
        blocks = [[1, 2, []], *blocks, [1, 2, []]]
    stack = []  # [label sum, weight, indices of the original blocks]
    for index, (label_sum, count, _) in enumerate(blocks):
        stack.append([label_sum, count, [index]])
        while len(stack) > 1 and stack[-2][0] / stack[-2][1] > stack[-1][0] / stack[-1][1]:
            top = stack.pop()
            stack[-1][0] += top[0]
            stack[-1][1] += top[1]
            stack[-1][2] += top[2]
    posterior_of_score = {}
    for label_sum, weight, members in stack:
        p = label_sum / weight
        for member in members:
            for score in blocks[member][2]:
                posterior_of_score[score] = p
    prior = math.log(len(tar) / len(non))

    def llr(score):
        p = posterior_of_score[score]
        if p == 0.0:
            return -math.inf
        if p == 1.0:
            return math.inf
        return math.log(p / (1 - p)) - prior

    return np.array([llr(s) for s in tar]), np.array([llr(s) for s in non])


def test_small_example_pav_llrs():
    llr_tar, llr_non = pav_llr(TAR, NON)
    third, half = math.log(0.5) - math.log(0.8), -math.log(0.8)
    np.testing.assert_allclose(llr_tar, [third, half, math.inf, math.inf])
    np.testing.assert_allclose(llr_non, [-math.inf, -math.inf, third, third, half])
    np.testing.assert_allclose(third, -0.4700036, atol=1e-6)


def test_small_example_zebra():
    result = zebra(TAR, NON)
    assert pytest.approx(0.3343595, abs=1e-7) == result.D_ECE
    assert result.log10_lr_max == pytest.approx(0.574031, abs=1e-6)
    assert result.tag == "A"
    llr_tar, llr_non = pav_llr(TAR, NON, laplace=True)
    assert llr_tar.max() == pytest.approx(math.log(3.75), abs=1e-9)
    assert llr_non.min() == pytest.approx(-0.8755, abs=1e-4)


def test_paper003_four_by_four():
    mated = [0.9, 0.7, 0.5, 0.3]
    nonmated = [0.8] * 3 + [0.6] * 3 + [0.4] * 3 + [0.2] * 3
    result = zebra(mated, nonmated)
    assert pytest.approx(0.180337, abs=1e-6) == result.D_ECE
    assert pytest.approx((1 / 16 + 1 / 16) / LN2, rel=1e-12) == result.D_ECE
    assert result.log10_lr_max == pytest.approx(math.log10(6.0), abs=1e-9)
    assert result.log10_lr_max == pytest.approx(0.77815, abs=1e-5)
    assert result.tag == "A"


def test_perfect_separation_is_one_over_ln4():
    result = zebra(np.arange(10) + 100.0, np.arange(100, dtype=float))
    assert pytest.approx(1 / math.log(4), abs=1e-12) == result.D_ECE
    assert pytest.approx(0.7213475, abs=1e-7) == result.D_ECE


def test_laplace_closed_forms_for_perfect_separation():
    llr_tar, llr_non = pav_llr(np.arange(10) + 100.0, np.arange(100, dtype=float), laplace=True)
    np.testing.assert_allclose(llr_tar, math.log(11 * 100 / 10))
    np.testing.assert_allclose(llr_non, -math.log(101 * 10 / 100))
    assert llr_tar[0] == pytest.approx(4.70048, abs=1e-5)
    assert llr_non[0] == pytest.approx(-2.31254, abs=1e-5)
    result = zebra(np.arange(10) + 100.0, np.arange(100, dtype=float))
    assert result.log10_lr_max == pytest.approx(2.0414, abs=1e-4)
    assert result.tag == "C"


def test_constant_scores_carry_no_evidence():
    result = zebra(np.ones(10), np.ones(100))
    assert pytest.approx(0.0, abs=1e-15) == result.D_ECE
    assert result.log10_lr_max == pytest.approx(0.03707, abs=1e-5)
    # The order of the classes does not matter once ties are pooled (DESIGN §10, A17).
    assert pytest.approx(0.0, abs=1e-15) == zebra(np.ones(100), np.ones(10)).D_ECE
    assert zebra(np.ones(7), np.ones(7)).tag == "0"


def test_identical_distributions_disclose_almost_nothing():
    # Same-distribution samples: PAV overfits a little, so D_ECE is ≈ 0 and shrinks with n.
    gen = np.random.default_rng(11)
    small = zebra(gen.normal(size=1000), gen.normal(size=1000)).D_ECE
    large = zebra(gen.normal(size=100_000), gen.normal(size=100_000)).D_ECE
    assert 0.0 <= large < small < 0.01
    assert large < 1e-3


@pytest.mark.parametrize(
    ("x", "expected"),
    [(2.0, 0.1393262), (10.0, 0.3010298), (0.5, -0.1966312), (0.1, -0.8884019)],
)
def test_z_values(x, expected):
    assert z_of_log(np.log(x)) / LN2 == pytest.approx(expected, abs=1e-7)


def test_z_limits_and_stability():
    lam = np.array([0.0, 1e-9, -1e-9, 1e-4, 1e3, 1e6, np.inf, -np.inf])
    z = z_of_log(lam)
    assert z[0] == 0.0
    assert z[1] == pytest.approx(1e-9 / 6, rel=1e-6)
    assert z[2] == pytest.approx(-1e-9 / 6, rel=1e-6)
    x = math.exp(1e-4)
    direct = ((x - 3) * (x - 1) + 2 * math.log(x)) / (4 * (x - 1) ** 2)
    assert z[3] == pytest.approx(direct, rel=1e-6)
    np.testing.assert_allclose(z[4:7], 0.25)
    assert z[7] == -np.inf
    # Near 1, Z ~ (x - 1)/6, continuous across the series switch at |lam| = 1e-4.
    around = z_of_log(np.array([0.99999e-4, 1.00001e-4]))
    assert around[1] - around[0] == pytest.approx(2e-9 / 6, rel=1e-3)


@pytest.mark.parametrize(
    ("value", "tag"),
    [
        (0.0, "0"),
        (1e-13, "0"),
        (0.5, "A"),
        (1.0, "B"),
        (1.999, "B"),
        (2.0, "C"),
        (3.99, "C"),
        (4.0, "D"),
        (5.0, "E"),
        (6.0, "F"),
        (42.0, "F"),
        (-2.0, "C"),
    ],
)
def test_tags_closed_on_the_left(value, tag):
    assert zebra_tag(value) == tag


def test_vectorised_pav_matches_slow_reference(rng):
    for _ in range(20):
        n_tar, n_non = rng.integers(1, 40, size=2)
        # Rounded scores make many exact ties, within and across classes.
        tar = np.round(rng.normal(0.7, 1.0, n_tar), 1)
        non = np.round(rng.normal(0.0, 1.0, n_non), 1)
        for laplace in (False, True):
            fast = pav_llr(tar, non, laplace=laplace)
            slow = slow_pav_llr(tar.tolist(), non.tolist(), laplace=laplace)
            np.testing.assert_allclose(fast[0], slow[0], rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(fast[1], slow[1], rtol=1e-12, atol=1e-12)


def _ece_direct(llr_tar, llr_non, pi):
    lr_tar, lr_non = np.exp(llr_tar), np.exp(llr_non)
    with np.errstate(divide="ignore"):
        tar = np.mean(np.log2(1 + (1 - pi) / (lr_tar * pi)))
    return pi * tar + (1 - pi) * np.mean(np.log2(1 + lr_non * pi / (1 - pi)))


def _h2(pi):
    return -pi * math.log2(pi) - (1 - pi) * math.log2(1 - pi)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_closed_form_equals_quadrature_over_pi(seed):
    rng = np.random.default_rng(seed)
    tar = np.round(rng.normal(1.5, 1.0, 30), 1)
    non = np.round(rng.normal(0.0, 1.0, 60), 1)
    llr_tar, llr_non = pav_llr(tar, non)
    integral, _ = quad(
        lambda pi: _h2(pi) - _ece_direct(llr_tar, llr_non, pi), 0.0, 1.0, limit=200, epsabs=1e-11
    )
    assert d_ece(tar, non) == pytest.approx(integral, abs=1e-8)


def test_ece_curve_at_even_prior_is_cllr():
    t = np.array([-2.0, 0.0, 2.0])
    ece, ref, ece_min = ece_curve(TAR, NON, t)
    np.testing.assert_allclose(ref, [_h2(1 / (1 + math.e**2)), 1.0, _h2(1 / (1 + math.e**2))])
    assert ece_min[1] == pytest.approx(0.5353940, abs=1e-7)  # min Cllr of §7.6
    assert np.all(ece_min <= ref + 1e-12)
    llr_tar, llr_non = np.asarray(TAR), np.asarray(NON)
    assert ece[2] == pytest.approx(_ece_direct(llr_tar, llr_non, 1 / (1 + math.e**-2)), rel=1e-12)


def test_worst_case_is_symmetric_in_sign():
    # Flipping the classes and negating scores mirrors every LLR: same worst case.
    a = worst_case_log10_lr(TAR, NON)
    b = worst_case_log10_lr(-np.asarray(NON), -np.asarray(TAR))
    assert a == pytest.approx(b, rel=1e-12)


def test_rejects_bad_scores():
    with pytest.raises(ValueError, match="finite"):
        zebra([1.0, math.nan], [0.0])
    with pytest.raises(ValueError, match="no scores"):
        zebra([], [0.0])


scores = st.lists(st.integers(-5, 5), min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(tar=scores, non=scores)
def test_d_ece_is_non_negative_after_pav(tar, non):
    value = d_ece(np.array(tar, float), np.array(non, float))
    assert value >= -1e-12
    assert value <= 1 / math.log(4) + 1e-12
