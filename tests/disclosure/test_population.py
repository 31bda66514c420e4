"""The population model: vectorised figures against a slow obvious version, a fit on one
split checked on the other (synthetic and on the corpus), degenerate and bad input."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.disclosure.lid import lid_per_trial
from monitor.disclosure.population import (
    PopulationModel,
    PopulationSet,
    fit_population_model,
    population_figures,
)

W, ALPHA, BETA = 4.0, 0.6, 6.0


def gaussian_trials(rng: np.random.Generator, windows: int, n: int, shift: float) -> np.ndarray:
    """(windows, n) scores: impostors N(0, 1), column 0 the subject shifted by ~shift."""
    S = rng.standard_normal((windows, n))
    S[:, 0] += rng.normal(shift, 1.0, windows)
    return S


@pytest.fixture(scope="module")
def model() -> PopulationModel:
    rng = np.random.default_rng(7)
    speakers, per = 60, 8
    S = rng.standard_normal((speakers * per, speakers))
    truth = np.repeat(np.arange(speakers), per)
    S[np.arange(truth.size), truth] += rng.normal(3.0, 1.0, truth.size)
    return fit_population_model(S, truth, seconds=3.0)


def slow_figures(model: PopulationModel, row: np.ndarray, subject: int, N: float) -> dict:
    """One row, written out term by term with Python loops (the obvious version)."""
    others = [float(v) for j, v in enumerate(row) if j != subject]
    mu = sum(others) / len(others)
    sigma = math.sqrt(sum((v - mu) ** 2 for v in others) / len(others))
    d = float(row[subject]) - mu
    z = d / sigma
    n = N - 1
    sd = math.sqrt(sigma**2 * n / N + d**2 * n / N**2)
    t, shift, a = W * sigma / sd, W * d / (N * sd), W * d * n / (N * sd)
    q, zs, ss = 1 / n, list(model.z), list(model.survival)
    bulk = 0.0
    for k in range(len(zs)):
        hi = max(ss[k], q)
        lo = max(ss[k + 1], q) if k + 1 < len(zs) else (q if q > ss[-1] else 0.0)
        at = 0.5 * (zs[k] + zs[k + 1]) if k + 1 < len(zs) else zs[-1]
        bulk += (hi - lo) * math.exp(t * at)
    bulk *= n
    if q <= ss[-1]:
        total = bulk
        lid = math.log2(N) - math.log2(1 + total * math.exp(-shift - a))
    else:
        big = math.exp(t * float(model.quantile(np.array([max(q / 2, ss[-1])]))[0]))
        p_any = 1 - (1 - q) ** n
        lone = math.log2(1 + bulk * math.exp(-shift - a))
        joint = math.log2(1 + (bulk + big) * math.exp(-shift - a))
        lid = math.log2(N) - ((1 - p_any) * lone + p_any * joint)
    x = float(model.survival_of(np.array([z]))[0])
    return {"lid": lid, "rank1": (1 - x) ** n, "rank": 1 + n * x, "z": z}


@pytest.mark.parametrize("N", [8.0, 125.0, 1e4, 8e9])
def test_vectorised_figures_match_the_slow_version(model: PopulationModel, N: float) -> None:
    rng = np.random.default_rng(int(N) % 1000)
    S = gaussian_trials(rng, 20, 40, 3.0)
    subjects = rng.integers(0, 40, 20)
    got = population_figures(
        S, subjects, model=model, population=N, lid_weight=W, alpha=ALPHA, beta=BETA,
        templates_in_population=False,
    )  # fmt: skip
    for r in range(20):
        want = slow_figures(model, S[r], int(subjects[r]), N)
        assert got.lid_bits[r] == pytest.approx(want["lid"], rel=1e-9, abs=1e-9)
        assert got.rank1_probability[r] == pytest.approx(want["rank1"], rel=1e-9, abs=1e-12)
        assert got.expected_rank[r] == pytest.approx(want["rank"], rel=1e-9)
        assert got.subject_z[r] == pytest.approx(want["z"], rel=1e-12)


def test_srd_of_a_certain_rank_is_the_beta_binomial_figure(model: PopulationModel) -> None:
    from monitor.disclosure.srd import betabinom_pmf

    # a subject far below every impostor: rank N with certainty, γ_N of the rank model
    row = np.concatenate(([-1e3], np.linspace(-1, 1, 30)))
    got = population_figures(
        row, 0, model=model, population=64, lid_weight=W, alpha=ALPHA, beta=BETA
    )
    want = math.log2(64 * betabinom_pmf(64, ALPHA, BETA)[-1])
    assert got.srd_bits[0] == pytest.approx(want, rel=1e-6)


def test_fit_on_one_split_predicts_the_other(model: PopulationModel) -> None:
    """Fitted on 60 speakers' windows; predicts the measured figures of unseen windows."""
    rng = np.random.default_rng(11)
    for N in (8, 32, 64):
        measured_rows = gaussian_trials(rng, 3000, N, 3.0)
        reference = rng.standard_normal((3000, 61))
        reference[:, 0] = measured_rows[:, 0]  # the same window against the reference
        measured = lid_per_trial(measured_rows, np.zeros(3000, dtype=int), W)
        got = population_figures(
            reference, 0, model=model, population=N, lid_weight=W, alpha=ALPHA, beta=BETA,
            templates_in_population=False,
        )  # fmt: skip
        rank1 = float(np.mean(measured_rows.argmax(axis=1) == 0))
        assert abs(float(np.mean(got.rank1_probability)) - rank1) < 0.03
        ceiling = math.log2(N) - 0.05
        assert abs(np.mean(got.ceiling_probability) - np.mean(measured >= ceiling)) < 0.06
        assert np.median(np.abs(got.lid_bits - measured)) < 0.25


def test_figures_stay_under_the_ceiling_and_the_bound_under_the_estimate(
    model: PopulationModel,
) -> None:
    rng = np.random.default_rng(3)
    S = gaussian_trials(rng, 200, 60, 6.0)
    got = population_figures(
        S, 0, model=model, population=1e6, lid_weight=W, alpha=ALPHA, beta=BETA
    )
    assert np.all(got.lid_bits <= got.ceiling_bits + 1e-9)
    assert np.all(got.srd_bits <= got.ceiling_bits + 1e-9)
    assert got.beyond_reference.any() and got.tail_decides
    assert np.all(got.lid_at_least_bits <= got.lid_bits + 1e-12)
    assert np.any(got.lid_at_least_bits < got.lid_bits)
    assert np.all(
        got.lid_at_least_bits[~got.beyond_reference] == got.lid_bits[~got.beyond_reference]
    )
    small = population_figures(
        S, 0, model=model, population=64, lid_weight=W, alpha=ALPHA, beta=BETA
    )
    assert not small.beyond_reference.any()  # a population the reference can validate


def test_the_templates_present_alone_give_the_scorers_figures(model: PopulationModel) -> None:
    """At N_pop = N the population is the templates present: LID is paper 003's, exactly,
    and the rank is the counted one; a larger population only adds modelled impostors."""
    from monitor.disclosure.srd import betabinom_pmf

    rng = np.random.default_rng(5)
    S = gaussian_trials(rng, 50, 30, 2.0)
    got = population_figures(S, 0, model=model, population=30, lid_weight=W, alpha=ALPHA, beta=BETA)
    np.testing.assert_allclose(
        got.lid_bits, lid_per_trial(S, np.zeros(50, dtype=int), W), rtol=1e-9, atol=1e-9
    )
    ranks = 1 + (S[:, 1:] > S[:, :1]).sum(axis=1)
    np.testing.assert_allclose(got.expected_rank, ranks)
    np.testing.assert_allclose(got.rank1_probability, ranks == 1)
    gamma = betabinom_pmf(30, ALPHA, BETA)
    np.testing.assert_allclose(got.srd_bits, np.log2(30 * gamma[ranks - 1]), rtol=1e-6)
    larger = population_figures(
        S, 0, model=model, population=3e3, lid_weight=W, alpha=ALPHA, beta=BETA
    )
    assert np.all(larger.expected_rank >= got.expected_rank)
    with pytest.raises(ValueError, match="below the 30 templates"):
        population_figures(S, 0, model=model, population=29, lid_weight=W, alpha=ALPHA, beta=BETA)


def test_a_flat_row_carries_no_evidence(model: PopulationModel) -> None:
    got = population_figures(
        np.full((2, 10), 0.3), [0, 4], model=model, population=1e3, lid_weight=W, alpha=ALPHA,
        beta=BETA,
    )  # fmt: skip
    assert np.all(got.lid_bits == 0.0) and np.all(got.srd_bits == 0.0)
    assert np.allclose(got.rank1_probability, 1e-3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"population": 1.0}, "population"),
        ({"population": 2e10}, "population"),
        ({"population": math.nan}, "population"),
        ({"subject": 9}, "subject"),
        ({"scores": np.array([1.0, 2.0])}, "N >= 3"),
        ({"scores": np.array([1.0, np.nan, 2.0, 3.0])}, "finite"),
    ],
)
def test_bad_input_is_named(model: PopulationModel, kwargs: dict, message: str) -> None:
    call = {"scores": np.arange(9.0), "subject": 0, "population": 1e3} | kwargs
    with pytest.raises(ValueError, match=message):
        population_figures(
            call["scores"], call["subject"], model=model, population=call["population"],
            lid_weight=W, alpha=ALPHA, beta=BETA,
        )  # fmt: skip


def test_fit_refuses_what_it_cannot_use() -> None:
    with pytest.raises(ValueError, match="impostor"):
        fit_population_model(np.zeros((3, 2)), np.zeros(3, dtype=int), seconds=3.0)
    with pytest.raises(ValueError, match="same"):
        fit_population_model(np.ones((3, 5)), np.zeros(3, dtype=int), seconds=3.0)
    with pytest.raises(ValueError, match="truth"):
        fit_population_model(np.ones((3, 5)), np.array([0, 1, 7]), seconds=3.0)


def test_a_set_round_trips_through_arrays_and_names_damage(
    model: PopulationModel, tmp_path: Path
) -> None:
    other = PopulationModel(
        12.0, model.z, model.survival, model.tail_rate, model.validated_survival, 60, 1, 2
    )
    models = PopulationSet({"combined": (other, model)})
    np.savez(tmp_path / "p.npz", **models.to_arrays())
    with np.load(tmp_path / "p.npz") as stored:
        back = PopulationSet.from_arrays(dict(stored))
    assert back.lookup("combined", 5.0).seconds == 3.0
    assert back.lookup("combined", 1.0).seconds == 3.0
    assert back.lookup("combined", 30.0).seconds == 12.0
    np.testing.assert_array_equal(back.lookup("combined", 3.0).z, model.z)
    damaged = models.to_arrays()
    damaged["combined/3/z"] = damaged["combined/3/z"][:-1]
    with pytest.raises(ValueError, match="combined/3"):
        PopulationSet.from_arrays(damaged)
    damaged = models.to_arrays()
    damaged["combined/12/survival"] = np.full_like(damaged["combined/12/survival"], np.inf)
    with pytest.raises(ValueError, match="combined/12/survival"):
        PopulationSet.from_arrays(damaged)
    del damaged["combined/12/survival"]
    with pytest.raises(ValueError, match="missing"):
        PopulationSet.from_arrays(damaged)


def test_a_set_is_fitted_per_bucket_as_the_scorer_picks_them() -> None:
    from monitor.disclosure.population import fit_population_set

    rng = np.random.default_rng(9)
    S = rng.standard_normal((300, 20))
    truth = rng.integers(0, 20, 300)
    seconds = np.concatenate([np.full(100, 0.5), np.full(150, 4.0), np.full(50, 30.0)])
    models = fit_population_set(
        {"combined": S}, truth, seconds, buckets={"combined": [1.0, 3.0, 12.0]}
    )
    # 0.5 s falls in the first bucket, as CalibrationSet.lookup does; 12 s has 50 windows
    assert [m.seconds for m in models.features["combined"]] == [1.0, 3.0, 12.0]
    assert [m.windows for m in models.features["combined"]] == [100, 150, 50]
    few = fit_population_set(
        {"combined": S[:30]}, truth[:30], seconds[:30], buckets={"combined": [1.0]}
    )
    assert few.lookup("combined", 5.0).windows == 30


def test_the_calibrated_llr_bounds_the_impostors_sum(model: PopulationModel) -> None:
    """With w above the tail's rate the sample's mean of e^(w·z) is set by its top scores; the
    calibrated LLR w·z + b' bounds the sum at (N − 1)·e^(−b'), so past that the figure is
    log2 LR and it never falls below the unbounded one."""
    rng = np.random.default_rng(11)
    S = gaussian_trials(rng, 40, 60, 4.0)
    common: dict[str, Any] = {
        "model": model,
        "population": 8e9,
        "lid_weight": W,
        "alpha": ALPHA,
        "beta": BETA,
    }
    free = population_figures(S, 0, templates_in_population=False, **common)
    mean = np.log(2.0 ** (math.log2(8e9) - free.lid_bits) - 1) + W * free.subject_z
    mean -= math.log(8e9 - 1)  # ln of the sample's own mean of e^(w·z), the same every row
    np.testing.assert_allclose(mean, mean[0], atol=0.05)
    for b_prime in (-mean[0] + 1.0, -mean[0] - 1.0):  # a bound above and below the sample's
        bound = population_figures(
            S, 0, templates_in_population=False, lid_bias=b_prime - 4.8, log_prior_odds=-4.8,
            **common,
        )  # fmt: skip
        assert np.all(bound.lid_bits >= free.lid_bits - 1e-9)
        lr = np.exp(W * bound.subject_z + max(b_prime, -mean[0]))  # P(true) = LR/(LR + N − 1)
        np.testing.assert_allclose(bound.lid_bits, np.log2(8e9 * lr / (lr + 8e9 - 1)), atol=0.05)


def test_srd_beyond_the_rank_models_identities_stays_within_their_resolution(
    model: PopulationModel,
) -> None:
    """A rank model fitted among N' identities (β at a huge value: every dev trial rank 1)
    read at 8·10⁹ gave −10³ bits; read at the relative rank among N' it is at most log2 N'."""
    rng = np.random.default_rng(12)
    S = gaussian_trials(rng, 40, 60, 6.0)
    common: dict[str, Any] = {"model": model, "lid_weight": W, "alpha": 10.5, "beta": 1.6e5}
    calibrated: dict[str, Any] = {"lid_bias": -12.0, "log_prior_odds": -math.log(124)}  # N' = 125
    raw = population_figures(S, 0, population=8e9, templates_in_population=False, **common)
    read = population_figures(
        S, 0, population=8e9, templates_in_population=False, **calibrated, **common
    )
    among = population_figures(
        S, 0, population=125, templates_in_population=False, **calibrated, **common
    )
    assert raw.srd_bits.min() < -100
    np.testing.assert_allclose(read.srd_bits, among.srd_bits, rtol=1e-9)
    assert np.all(read.srd_bits <= math.log2(125) + 1e-9) and read.srd_bits.min() > 0


def test_a_sampled_neighbourhood_lowers_the_figure_of_its_window(model: PopulationModel) -> None:
    """Reference templates that are a sample of the population: a window that finds one of
    60 as close as its own speaker's finds about N_pop/60 such in the population; fewer than
    MIN_SAMPLE sampled templates change nothing."""
    rng = np.random.default_rng(13)
    S = rng.standard_normal((30, 61))
    S[:, 0] = 7.0
    S[:15, 1] = 6.95  # half the windows: one sampled stranger as close as the subject
    common: dict[str, Any] = {
        "model": model,
        "population": 8e9,
        "lid_weight": W,
        "alpha": ALPHA,
        "beta": BETA,
    }
    common |= {"lid_bias": -4.8 - W**2 / 2, "log_prior_odds": -4.8}
    plain = population_figures(S, 0, **common)
    sampled = population_figures(S, 0, sample=np.arange(61) > 0, **common)
    assert np.all(sampled.lid_bits <= plain.lid_bits + 1e-9)
    near = math.log2(8e9) - math.log2(1 + 8e9 / 60)  # ≈ log2 60: one in 60 is as close
    assert np.all(sampled.lid_bits[:15] <= near + 0.5)
    assert np.all(plain.lid_bits[:15] > near + 3)
    few = population_figures(S, 0, sample=np.arange(61) > 40, **common)
    np.testing.assert_allclose(few.lid_bits, plain.lid_bits)
