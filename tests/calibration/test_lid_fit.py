"""The LID logistic fit (DESIGN §2.3) and the fused LID + calibrated-cost pass against slow,
obviously correct references: scipy's trust-region Newton on the penalised NLL of the stored
z-scores (and scikit-learn's LogisticRegression where installed). The old in-memory fit stopped
up to ~10⁻⁹ away from the optimum: the new one is held to the optimum itself."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import expit

from monitor.blocks.synthetic import SyntheticMatrix
from monitor.calibration import lid_fit
from monitor.calibration.lid_fit import DEFAULT_C, fit_lid_calibration
from monitor.calibration.protocol import score_trials
from monitor.disclosure import lid as lid_module
from monitor.disclosure import ranks
from monitor.disclosure.lid import (
    LidCalibration,
    calibrated_costs,
    calibrated_llr,
    lid_and_costs,
    lid_per_trial,
    znorm_rows,
)
from tests.calibration.synthetic import synthetic_speakers
from tests.disclosure.examples import traced_peak_bytes

#: |Δw| / |w| and |Δb| / |b| allowed between the fit and the reference optimum.
RTOL = 1e-9


def reference_fit(S: np.ndarray, m: np.ndarray, c: float = DEFAULT_C) -> tuple[float, float]:
    """argmin over (w, b) of Σ ln(1 + e^t) − Σ_mated t + w²/(2c), t = w·z + b, on the whole
    (T, N) z-score matrix held in memory; exact gradient and Hessian, trust-region Newton."""
    z = znorm_rows(S).ravel()
    y = np.zeros(S.shape)
    y[np.arange(S.shape[0]), m] = 1.0
    y = y.ravel()

    def nll(x: np.ndarray) -> float:
        t = x[0] * z + x[1]
        return float(np.sum(np.logaddexp(0.0, t)) - np.dot(y, t) + x[0] ** 2 / (2 * c))

    def gradient(x: np.ndarray) -> np.ndarray:
        r = expit(x[0] * z + x[1]) - y
        return np.array([np.dot(r, z) + x[0] / c, r.sum()])

    def hessian(x: np.ndarray) -> np.ndarray:
        q = expit(x[0] * z + x[1])
        s = q * (1 - q)
        return np.array([[np.dot(s, z * z) + 1 / c, np.dot(s, z)], [np.dot(s, z), s.sum()]])

    start = np.array([0.0, math.log(1 / (S.shape[1] - 1))])
    x = minimize(nll, start, jac=gradient, hess=hessian, method="trust-exact").x
    for _ in range(50):  # trust-exact may stop short (separable data): polish by plain Newton
        step = np.linalg.solve(hessian(x), gradient(x))
        x = x - step
        if np.all(np.abs(step) <= 1e-14 * np.maximum(np.abs(x), 1.0)):
            break
    return float(x[0]), float(x[1])


def assert_close_to_reference(cal: LidCalibration, reference: tuple[float, float]) -> None:
    w, b = reference
    assert abs(cal.weight - w) <= RTOL * max(abs(w), 1e-3), (cal.weight, w)
    assert abs(cal.bias - b) <= RTOL * max(abs(b), 1.0), (cal.bias, b)


def gaussian(rng: np.random.Generator, T: int, N: int, shift: float) -> tuple:
    S = rng.normal(size=(T, N))
    m = rng.integers(0, N, size=T)
    S[np.arange(T), m] += shift
    return S, m


def heavy_tailed(rng: np.random.Generator, T: int, N: int, shift: float) -> tuple:
    S = rng.standard_t(3, size=(T, N)).astype(np.float32)
    m = rng.integers(0, N, size=T)
    S[np.arange(T), m] += np.float32(shift)
    return S, m


def discrete_with_constant_rows(rng: np.random.Generator, T: int, N: int, shift: float) -> tuple:
    S, m = gaussian(rng, T, N, shift)
    S = np.round(S, 1)
    S[::17] = 0.5
    return S, m


def near_separable(rng: np.random.Generator, T: int, N: int, shift: float) -> tuple:
    S, m = gaussian(rng, T, N, shift)
    S[0, m[0]] = S[0].min() - 1.0  # one mated score below its row, the rest far above
    return S, m


MATRICES = [
    (gaussian, 150, 80, 1.5),
    (gaussian, 90, 200, 0.3),
    (gaussian, 300, 40, 3.0),
    (heavy_tailed, 120, 100, 2.0),
    (discrete_with_constant_rows, 100, 60, 1.0),
    (near_separable, 80, 50, 6.0),
]


@pytest.fixture(params=["direct", "warm-started"])
def fit_path(request, monkeypatch) -> str:
    """Small matrices are fitted by Newton from (0, prior); a tiny warm-start sample and
    few-row blocks put them through the path a 10⁴ × 10⁴ matrix takes."""
    if request.param == "warm-started":
        monkeypatch.setattr(lid_fit, "_WARM_SAMPLE", 64)
        monkeypatch.setattr(lid_module, "CACHE_ELEMENTS", 700)
    return str(request.param)


@pytest.mark.parametrize(("make", "T", "N", "shift"), MATRICES)
def test_fit_is_the_reference_optimum(make, T, N, shift, fit_path, rng):
    S, m = make(rng, T, N, shift)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of these is separable
        cal = fit_lid_calibration(S, m)
    assert_close_to_reference(cal, reference_fit(S, m))
    assert cal.log_prior_odds == pytest.approx(-math.log(N - 1))


@pytest.mark.parametrize("overlap", [0.3, 0.8])
def test_fit_of_protocol_score_matrices_is_the_reference_optimum(overlap, fit_path, rng):
    # The matrices `voxmeter calibrate` fits: f0, phone and embedding similarities of speakers
    # scored by the K-fold protocol (synthetic observations; the real corpus gave the same
    # agreement, 2e-13 or better, on 60 speakers).
    speakers = synthetic_speakers(rng, n_speakers=30, n_utterances=8, overlap=overlap)
    trials = score_trials(
        speakers, test_seconds=3.0, template_seconds=6.0, features=("f0", "phone", "embedding")
    )
    for S in trials.scores.values():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a feature may be separable
            cal = fit_lid_calibration(S, trials.truth)
        assert_close_to_reference(cal, reference_fit(S, trials.truth))


def test_fit_of_integer_scores_and_rejection_of_nan(rng):
    S, m = gaussian(rng, 60, 30, 1.5)
    counts = np.round(10 * S).astype(np.int64)  # integer scores: z-scored as float64
    assert_close_to_reference(fit_lid_calibration(counts, m), reference_fit(counts, m))
    S[41, 7] = np.nan
    with pytest.raises(ValueError, match=r"scores\[41, 7\] = nan"):
        fit_lid_calibration(S, m)


def test_reference_agrees_with_scikit_learn(rng):
    linear_model = pytest.importorskip("sklearn.linear_model")
    S, m = gaussian(rng, 150, 80, 1.5)
    y = np.zeros(S.shape, dtype=int)
    y[np.arange(150), m] = 1
    model = linear_model.LogisticRegression(C=DEFAULT_C, solver="newton-cholesky", tol=1e-12)
    model.fit(znorm_rows(S).reshape(-1, 1), y.ravel())
    w, b = reference_fit(S, m)
    assert float(model.coef_[0, 0]) == pytest.approx(w, rel=1e-7)
    assert float(model.intercept_[0]) == pytest.approx(b, rel=1e-7)


@pytest.mark.parametrize("c", [1e6, 1e2])
def test_separable_fit_warns_and_matches_the_penalised_optimum(c, fit_path, rng):
    S, m = gaussian(rng, 60, 30, 50.0)
    with pytest.warns(RuntimeWarning, match="separable"):
        cal = fit_lid_calibration(S, m, c=c)
    w, b = reference_fit(S, m, c)
    assert math.isfinite(cal.weight) and cal.weight > 0
    assert cal.weight == pytest.approx(w, rel=1e-6)
    assert cal.bias == pytest.approx(b, rel=1e-6)


def test_fit_does_not_depend_on_the_number_of_threads(rng, monkeypatch):
    monkeypatch.setattr(lid_module, "CACHE_ELEMENTS", 700)
    monkeypatch.setattr(lid_fit, "_GROUP_BLOCKS", 3)  # 21 row groups of 3 blocks of 7 rows
    monkeypatch.setattr(lid_fit, "_WARM_SAMPLE", 256)
    S, m = heavy_tailed(rng, 440, 100, 2.0)
    fits = []
    for threads in (1, 2, 5):
        monkeypatch.setattr(lid_fit, "FIT_THREADS", threads)
        fits.append(fit_lid_calibration(S, m))
    assert fits[0] == fits[1] == fits[2]  # to the last bit


def test_fit_needs_no_full_size_temporaries(rng):
    # The z-scores were a (T, N) float64 copy (S.nbytes here); now the largest parts are the
    # warm start's sample (2¹⁹ entries, 4 MB) and each thread's buffers (3 MB), whatever the
    # size of the matrix.
    S, m = gaussian(rng, 1000, 4000, 2.0)
    peak = traced_peak_bytes(lambda: fit_lid_calibration(S, m))
    assert peak < S.nbytes / 2


def test_lid_and_costs_match_the_separate_passes(rng, monkeypatch):
    monkeypatch.setattr(ranks, "CHUNK_ELEMENTS", 50)  # blocks of 5 rows, the last partial
    S, m = discrete_with_constant_rows(rng, 23, 10, 1.0)
    cal = LidCalibration(weight=1.7, bias=-2.5, log_prior_odds=-math.log(9))
    lid, costs = lid_and_costs(S, m, cal)
    np.testing.assert_array_equal(lid, lid_per_trial(S, m, cal.weight))
    np.testing.assert_array_equal(costs, calibrated_costs(S, m, cal))
    llr = calibrated_llr(S, cal)
    mated = np.zeros(S.shape, dtype=bool)
    mated[np.arange(23), m] = True
    expected_mated = np.logaddexp(0.0, -llr[mated])
    expected_non = np.where(mated, 0.0, np.logaddexp(0.0, llr)).sum(axis=1)
    np.testing.assert_allclose(costs[:, 0], expected_mated, rtol=1e-14)
    np.testing.assert_allclose(costs[:, 1], expected_non, rtol=1e-14)


@pytest.mark.slow
def test_fit_of_a_large_float32_matrix_is_the_reference_optimum(monkeypatch):
    # 2000 × 3000 float32: the warm start, its refinement and the full passes run as for
    # 10⁴ × 10⁴, where each pass over all entries is what costs (about a second).
    S, m = SyntheticMatrix(T=2000, N=3000, seed=4)(0, 2000)
    assert 2000 * 2999 // lid_fit._WARM_SAMPLE >= 4  # the warm start is used
    passes = []
    matrix_sums = lid_fit._matrix_sums

    def counted(*args):
        sums_at = matrix_sums(*args)
        return lambda w, b, loss: passes.append(loss) or sums_at(w, b, loss)

    monkeypatch.setattr(lid_fit, "_matrix_sums", counted)
    cal = fit_lid_calibration(S, m)
    assert_close_to_reference(cal, reference_fit(S, m))
    assert passes == [False, False]  # two passes, neither needing the loss
