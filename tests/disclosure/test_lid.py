"""LID against DESIGN §7.3, §7.4 reference values, a slow loop, and its invariances (§2)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.optimize import minimize
from scipy.special import expit

from monitor.calibration.lid_fit import fit_lid_calibration
from monitor.disclosure import ranks
from monitor.disclosure.lid import (
    LidCalibration,
    calibrated_llr,
    lid_ccdf,
    lid_log_posteriors,
    lid_per_trial,
    lid_posteriors,
    lid_summary,
    znorm_rows,
)
from tests.disclosure.examples import S4, traced_peak_bytes

EXAMPLE = np.array([[0.9, 0.7, 0.4, 1.1, 1.2, 0.4]])


def slow_lid(S: np.ndarray, m: np.ndarray, w: float) -> np.ndarray:
    """Eqs. 2, 4, 5 one trial at a time with plain Python arithmetic."""
    out = []
    for i, row in enumerate(S.tolist()):
        N = len(row)
        mu = sum(row) / N
        sd = math.sqrt(sum((x - mu) ** 2 for x in row) / N)
        z = [(x - mu) / sd if max(row) > min(row) else 0.0 for x in row]
        total = sum(math.exp(w * zj) for zj in z)
        out.append(math.log2(N * math.exp(w * z[m[i]]) / total))
    return np.array(out)


def test_worked_example_exact_and_printed():
    cal = LidCalibration(weight=1.5, bias=-1.0, log_prior_odds=math.log(1 / 5))
    z = znorm_rows(EXAMPLE)[0]
    llr = calibrated_llr(EXAMPLE, cal)[0]
    post = lid_posteriors(EXAMPLE, 1.5)[0]
    np.testing.assert_allclose(z, [0.3726, -0.2661, -1.2242, 1.0113, 1.3306, -1.2242], atol=1e-4)
    np.testing.assert_allclose(z, [0.37, -0.27, -1.22, 1.01, 1.33, -1.22], atol=0.01)
    np.testing.assert_allclose(llr, [1.1683, 0.2103, -1.2268, 2.1263, 2.6054, -1.2268], atol=1e-4)
    np.testing.assert_allclose(post, [0.1193, 0.0458, 0.0109, 0.3110, 0.5021, 0.0109], atol=1e-4)
    np.testing.assert_allclose(post, [0.12, 0.05, 0.01, 0.31, 0.50, 0.01], atol=0.01)
    lid = lid_per_trial(EXAMPLE, np.array([3]), 1.5)
    assert lid[0] == pytest.approx(0.900024, abs=1e-4) and lid[0] == pytest.approx(0.90, abs=0.01)


def test_paper003_matrix():
    m = np.array([0, 0, 1, 2])
    z = znorm_rows(S4)
    np.testing.assert_allclose(z[np.arange(4), m], math.sqrt(3))
    np.testing.assert_allclose(lid_per_trial(S4, m, 1.0), 1.62375, atol=1e-5)
    previous = -np.inf
    for w in (1.0, 2.0, 5.0, 20.0, 100.0):
        lid = lid_per_trial(S4, m, w)
        assert np.all(lid > previous) or w == 100.0
        expected = math.log2(4 / (1 + 3 * math.exp(-4 * w / math.sqrt(3))))
        np.testing.assert_allclose(lid, expected, rtol=1e-12)
        previous = lid
    np.testing.assert_allclose(lid_per_trial(S4, m, 100.0), 2.0, atol=1e-12)


def test_small_n_edge_cases():
    assert lid_per_trial(np.array([[0.3], [7.0]]), np.array([0, 0]), 3.0).tolist() == [0.0, 0.0]
    w = 0.8
    got = lid_per_trial(np.array([[0.9, 0.1], [0.2, 0.7]]), np.array([0, 0]), w)
    np.testing.assert_allclose(got, [math.log2(2 * expit(2 * w)), math.log2(2 * expit(-2 * w))])
    flat = np.full((2, 5), 0.4)
    np.testing.assert_array_equal(znorm_rows(flat), 0.0)
    np.testing.assert_array_equal(lid_per_trial(flat, np.array([1, 4]), 9.0), 0.0)


def test_matches_slow_reference_with_ties_and_blocks(rng, monkeypatch):
    monkeypatch.setattr(ranks, "CHUNK_ELEMENTS", 50)  # blocks of 5 rows, the last partial
    S = np.round(rng.normal(size=(23, 10)), 1)
    S[4] = 0.25  # a constant row
    m = rng.integers(0, 10, size=23)
    for w in (-1.0, 0.0, 0.7, 3.0):
        np.testing.assert_allclose(lid_per_trial(S, m, w), slow_lid(S, m, w), atol=1e-12)
    post = lid_posteriors(S, 2.0)
    np.testing.assert_allclose(post.sum(axis=1), 1.0)
    np.testing.assert_allclose(np.exp(lid_log_posteriors(S, 2.0)), post)


@settings(max_examples=50, deadline=None)
@given(
    arrays(np.float64, (6, 7), elements=st.floats(-5, 5)),
    arrays(np.float64, (6, 1), elements=st.floats(0.01, 100)),
    arrays(np.float64, (6, 1), elements=st.floats(-100, 100)),
    st.floats(-4, 4),
)
def test_lid_invariant_to_per_row_affine_maps(S, a, b, w):
    m = np.arange(6)
    S = S + np.linspace(0, 0.6, 7)  # keep rows away from exact constancy
    np.testing.assert_allclose(lid_per_trial(a * S + b, m, w), lid_per_trial(S, m, w), atol=1e-7)


@pytest.mark.parametrize("scale", [1e-300, 1e-200, 1e300, 1.7e308])
def test_extreme_score_magnitudes_neither_overflow_nor_underflow(scale):
    # z is scale-invariant; probabilities of 1e-200 or scores near the float limit once gave
    # NaN (variance underflow, mean overflow).
    S = EXAMPLE / EXAMPLE.max() * scale
    with np.errstate(all="raise"):
        np.testing.assert_allclose(znorm_rows(S), znorm_rows(EXAMPLE), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(lid_per_trial(S, np.array([3]), 1.5), 0.900024, atol=1e-6)


def test_lid_is_bounded_by_log2_n(rng):
    S = rng.normal(size=(50, 30))
    lid = lid_per_trial(S, rng.integers(0, 30, size=50), 25.0)
    assert np.all(lid <= math.log2(30) + 1e-12)


def dev_matrix(rng: np.random.Generator, T: int, N: int, shift: float):
    S = rng.normal(size=(T, N))
    m = rng.integers(0, N, size=T)
    S[np.arange(T), m] += shift
    return S, m


def test_calibration_is_the_logistic_mle(rng):
    S, m = dev_matrix(rng, 60, 12, 1.5)
    cal = fit_lid_calibration(S, m)
    z = znorm_rows(S).ravel()
    y = np.zeros((60, 12))
    y[np.arange(60), m] = 1
    y = y.ravel()

    def nll(x: np.ndarray) -> float:
        t = x[0] * z + x[1]
        return float(np.sum(np.logaddexp(0, t) - y * t))

    ref = minimize(nll, [0.0, 0.0], method="Nelder-Mead", options={"xatol": 1e-9, "fatol": 1e-12})
    assert cal.weight == pytest.approx(ref.x[0], abs=1e-4)
    assert cal.bias == pytest.approx(ref.x[1], abs=1e-4)
    assert cal.log_prior_odds == pytest.approx(-math.log(11))
    assert cal.weight > 0
    llr = calibrated_llr(S, cal)
    np.testing.assert_allclose(llr, cal.weight * znorm_rows(S) + cal.bias + math.log(11))


def test_calibration_on_separable_data_warns_and_stays_finite(rng):
    S, m = dev_matrix(rng, 40, 8, 50.0)
    with pytest.warns(RuntimeWarning, match="separable"):
        cal = fit_lid_calibration(S, m)
    assert math.isfinite(cal.weight) and cal.weight > 0 and math.isfinite(cal.bias)
    S2, m2 = dev_matrix(rng, 40, 8, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit_lid_calibration(S2, m2)


def test_calibration_degenerate_inputs():
    flat = fit_lid_calibration(np.ones((5, 4)), np.array([0, 1, 2, 3, 0]))
    assert flat.weight == 0.0 and flat.bias == pytest.approx(-math.log(3))
    with pytest.raises(ValueError, match="N' = 1"):
        fit_lid_calibration(np.ones((3, 1)), np.zeros(3, dtype=int))
    with pytest.raises(ValueError, match="no trials"):
        fit_lid_calibration(np.ones((0, 3)), np.zeros(0, dtype=int))
    with pytest.raises(ValueError, match="NaN"):
        lid_per_trial(np.array([[np.nan, 1.0]]), np.array([0]), 1.0)
    with pytest.raises(ValueError, match="weight"):
        lid_per_trial(np.ones((1, 2)), np.array([0]), math.inf)


def test_summary_and_ccdf():
    cal = LidCalibration(weight=2.0, bias=-3.0, log_prior_odds=-math.log(3))
    s = lid_summary(np.array([-1.0, 0.0, 2.0, 3.0]), cal)
    assert (s.ALID, s.PDR, s.NDR, s.LID_plus, s.LID_minus, s.LID_max) == (1, 0.5, 0.5, 2.5, -0.5, 3)
    assert math.isclose(s.ALID, s.PDR * s.LID_plus + s.NDR * s.LID_minus)
    assert (s.weight, s.bias) == (2.0, -3.0)
    plain = lid_summary(np.array([1.0, 4.0]), cal)
    assert plain.NDR == 0 and math.isnan(plain.LID_minus)
    silent = lid_summary(np.zeros(3), cal)
    assert silent.PDR == 0 and silent.NDR == 1 and math.isnan(silent.LID_plus)
    empty = lid_summary(np.array([]), None)
    assert all(math.isnan(v) for v in (empty.ALID, empty.PDR, empty.LID_max, empty.weight))
    with pytest.raises(ValueError, match="NaN"):
        lid_summary(np.array([1.0, np.nan]), cal)
    x, y = lid_ccdf(np.array([2.0, 0.0, 1.0, 1.0]))
    np.testing.assert_array_equal(x, [0, 1, 2])
    np.testing.assert_allclose(y, [0.75, 0.25, 0.0])


def test_per_trial_lid_has_no_full_size_temporaries(rng, monkeypatch):
    monkeypatch.setattr(ranks, "CHUNK_ELEMENTS", 1 << 16)
    S = rng.normal(size=(1000, 4000))
    m = rng.integers(0, 4000, size=1000)
    assert traced_peak_bytes(lambda: lid_per_trial(S, m, 2.0)) < S.nbytes / 8
