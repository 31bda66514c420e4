"""Composition bounds (DESIGN §5) against paper 004 Table 7 and the §7.8 derived values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.disclosure.composition import (
    basic,
    dp_disclosure_cap_bits,
    drv,
    kairouz_advanced,
    nats_to_bits,
    optimal,
    theorem33_points,
)

K = np.array([100, 500, 1000, 10000])


def test_table7_simple_and_floored_kairouz():
    np.testing.assert_array_equal(basic(0.5, K), [50, 250, 500, 5000])
    advanced = kairouz_advanced(0.5, K, 1e-5)
    np.testing.assert_array_equal(np.floor(advanced), [36, 114, 198, 1464])
    np.testing.assert_allclose(advanced, [36.239, 114.879, 198.331, 1464.520], atol=1e-3)


def test_kairouz_third_term_binds_in_table7():
    k = K.astype(float)
    third = k * 0.5 * math.tanh(0.25) + 0.5 * np.sqrt(2 * k * math.log(1e5))
    np.testing.assert_allclose(kairouz_advanced(0.5, K, 1e-5), third)


def test_drv_values():
    np.testing.assert_allclose(drv(0.5, K, 1e-5), [56.429, 215.829, 400.232, 3483.533], atol=1e-3)


def test_optimal_values():
    np.testing.assert_allclose(
        optimal(0.5, K, 1e-5), [31.173, 105.808, 186.121, 1429.689], atol=1e-2
    )


def test_theorem33_points_k10():
    eps_i, delta_i = theorem33_points(0.5, 10)
    np.testing.assert_allclose(eps_i, [5, 4, 3, 2, 1, 0])
    np.testing.assert_allclose(
        delta_i,
        [0.0, 0.00551963, 0.04102841, 0.14546645, 0.33167848, 0.55705212],
        atol=1e-8,
    )


def test_optimal_passes_through_theorem33_corners():
    eps_i, delta_i = theorem33_points(0.5, 10)
    for e, d in zip(eps_i[1:-1], delta_i[1:-1], strict=True):
        assert optimal(0.5, 10, d)[()] == pytest.approx(e, abs=1e-9)


def _slow_delta(eps, k, e):
    """δ(e) of DESIGN §5.5 with exact integer binomials and Python floats (small k only)."""
    total = 0.0
    for ell in range(k + 1):
        if (k - 2 * ell) * eps > e:
            total += math.comb(k, ell) * (math.exp((k - ell) * eps) - math.exp(e + ell * eps))
    return total / (1 + math.exp(eps)) ** k


@pytest.mark.parametrize(("eps", "k", "delta"), [(0.5, 10, 0.01), (0.1, 37, 1e-3), (1.0, 5, 0.2)])
def test_optimal_is_the_smallest_eps_meeting_delta(eps, k, delta):
    value = float(optimal(eps, k, delta)[()])
    assert _slow_delta(eps, k, value) == pytest.approx(delta, rel=1e-9)
    assert _slow_delta(eps, k, value - 1e-6) > delta


def test_optimal_works_where_naive_floats_overflow():
    k = np.array([10**4, 10**5])
    # The naive sum needs e^{kε} and C(k, l): both overflow a double at these sizes.
    with np.errstate(over="ignore"):
        assert np.isinf(np.exp(k[0] * 0.5))
    assert math.comb(10**4, 5000) > 1e308
    with pytest.raises(OverflowError):
        float(math.comb(10**4, 5000))
    values = optimal(0.5, k, 1e-5)
    assert np.all(np.isfinite(values))
    assert values[0] == pytest.approx(1429.689, abs=1e-2)
    assert np.all(values <= kairouz_advanced(0.5, k, 1e-5))
    assert values[1] > values[0]


def test_optimal_against_high_precision_reference_at_1e4():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    eps, k, _delta = mpmath.mpf("0.5"), 10**4, mpmath.mpf("1e-5")
    value = mpmath.mpf(float(optimal(0.5, k, 1e-5)[()]))
    norm = (1 + mpmath.e**eps) ** k

    def delta_at(e):
        total = mpmath.mpf(0)
        for ell in range(k // 2 + 1):
            if (k - 2 * ell) * eps <= e:
                break
            total += mpmath.binomial(k, ell) * (
                mpmath.e ** ((k - ell) * eps) - mpmath.e ** (e + ell * eps)
            )
        return total / norm

    assert float(delta_at(value)) == pytest.approx(1e-5, rel=1e-6)


def test_ordering_optimal_advanced_basic():
    steps = np.unique(np.logspace(0, 4, 40).astype(int))
    for eps in (0.01, 0.5, 2.0):
        for delta in (1e-8, 1e-5, 0.1):
            o, a, b = (
                optimal(eps, steps, delta),
                kairouz_advanced(eps, steps, delta),
                basic(eps, steps),
            )
            assert np.all(o <= a + 1e-9)
            assert np.all(a <= b + 1e-12)
            assert np.all(o >= 0)


def test_optimal_is_non_decreasing_in_steps_and_vectorised():
    steps = np.arange(1, 400)
    values = optimal(0.3, steps, 1e-6)
    assert np.all(np.diff(values) >= -1e-9)
    one_by_one = [float(optimal(0.3, int(k), 1e-6)[()]) for k in steps[::37]]
    np.testing.assert_allclose(values[::37], one_by_one, rtol=1e-12)
    assert optimal(0.3, steps.reshape(3, -1), 1e-6).shape == (3, 133)


def test_optimal_single_step_and_large_delta():
    # k = 1: δ(e) = (e^ε - e^e)/(1 + e^ε) gives e = ln(e^ε - δ(1 + e^ε)).
    eps, delta = 0.5, 0.1
    expected = math.log(math.exp(eps) - delta * (1 + math.exp(eps)))
    assert optimal(eps, 1, delta)[()] == pytest.approx(expected)
    assert optimal(eps, [1, 2, 3], 0.9).tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: basic(0.0, 3), "epsilon"),
        (lambda: basic(-1.0, 3), "epsilon"),
        (lambda: drv(0.5, 3, 0.0), "delta"),
        (lambda: optimal(0.5, 3, 1.0), "delta"),
        (lambda: kairouz_advanced(0.5, [3, 0], 1e-5), "steps"),
        (lambda: optimal(0.5, [2.5], 1e-5), "steps"),
        (lambda: optimal(0.5, [10, 10**9], 1e-5), "at most 10000000 steps"),
    ],
)
def test_rejects_bad_parameters(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_huge_epsilon_gives_infinite_drv_not_an_error():
    # e^ε overflows past ε ≈ 709; DRV is then +inf while the other bounds stay finite.
    assert drv(1000.0, [1, 10], 1e-5).tolist() == [math.inf, math.inf]
    np.testing.assert_allclose(kairouz_advanced(1000.0, [1, 10], 1e-5), [1000.0, 10000.0])
    assert optimal(1000.0, 1, 1e-5)[()] == pytest.approx(1000.0 - 1e-5, abs=1e-9)


def test_bits_and_cap():
    assert nats_to_bits(math.log(2)) == pytest.approx(1.0)
    cap = dp_disclosure_cap_bits(np.array([0.0, 0.1, 1.0, 50.0]), 250)
    assert cap[0] == pytest.approx(0.0, abs=1e-12)
    assert np.all(cap <= np.minimum(np.array([0.0, 0.1, 1.0, 50.0]) / math.log(2), math.log2(250)))
    assert cap[-1] == pytest.approx(math.log2(250), abs=1e-12)
    assert dp_disclosure_cap_bits(3.0, 1) == 0.0
