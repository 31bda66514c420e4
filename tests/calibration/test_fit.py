"""CalibrationSet lookup and JSON, score fusion, and fitting buckets on synthetic speakers."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from monitor.calibration.bucket_fit import fit_trials
from monitor.calibration.buckets import COMBINED, BucketCalibration, CalibrationSet, load_default
from monitor.calibration.fit import calibrate_speakers
from monitor.calibration.fusion import fit_fusion_weights, fuse_scores
from monitor.calibration.protocol import score_trials
from monitor.disclosure.ranks import rank_histogram
from monitor.disclosure.srd import betabinom_pmf, srd_stats
from monitor.errors import InputError
from tests.calibration.synthetic import synthetic_speakers

FEATURES = ("f0", "phone", "embedding")


def bucket(seconds: float, **changes: float) -> BucketCalibration:
    values = dict(
        alpha=0.5, beta=3.0, loss="ll", lid_weight=2.0, lid_bias=-3.0, log_prior_odds=-4.8
    )
    values.update(changes)
    return BucketCalibration(seconds, **values)  # type: ignore[arg-type]


def test_lookup_takes_the_largest_bucket_at_or_below() -> None:
    cal = CalibrationSet({"f0": (bucket(12, max_seconds=17.5), bucket(3), bucket(6))})
    assert [b.seconds for b in cal.buckets("f0")] == [3, 6, 12]  # sorted on construction
    assert cal.lookup("f0", 3.0) == (cal.buckets("f0")[0], False)
    assert cal.lookup("f0", 5.99)[0].seconds == 3
    assert cal.lookup("f0", 6.0)[0].seconds == 6
    assert cal.lookup("f0", 17.5) == (cal.buckets("f0")[2], False)
    assert cal.lookup("f0", 17.6) == (cal.buckets("f0")[2], True)  # beyond the fitted range
    assert cal.lookup("f0", 1.0) == (cal.buckets("f0")[0], True)  # shorter than any bucket
    no_max = CalibrationSet({"f0": (bucket(3),)})
    assert no_max.lookup("f0", 6.0)[1] is False and no_max.lookup("f0", 6.1)[1] is True
    with pytest.raises(ValueError, match="phone"):
        cal.lookup("phone", 3.0)
    with pytest.raises(ValueError, match="seconds"):
        cal.lookup("f0", math.nan)


@pytest.mark.parametrize(
    "changes", [dict(alpha=0.0), dict(beta=-1.0), dict(loss="l2"), dict(lid_weight=math.inf)]
)
def test_bucket_rejects_bad_values(changes: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        bucket(3, **changes)


def test_json_round_trip_keeps_everything() -> None:
    cal = CalibrationSet(
        {
            "f0": (bucket(3, n_identities=125, n_trials=1250, mean_test_seconds=3.9),),
            "combined": (bucket(3),),
        },
        {"corpus": "speechocean762", "split": "train", "protocol": {"delta": "floor"}},
    )
    text = cal.to_json()
    document = json.loads(text)  # strict JSON: NaN became null
    assert document["format"] == "voxmeter-calibration"
    assert document["features"]["combined"][0]["max_seconds"] is None
    again = CalibrationSet.from_json(text)
    assert again.metadata == cal.metadata
    for name in cal.features:
        for a, b in zip(cal.buckets(name), again.buckets(name), strict=True):
            for key, value in a.__dict__.items():
                other = getattr(b, key)
                assert other == value or (math.isnan(value) and math.isnan(other)), key


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ('{"format": "other"}', "not a voxmeter calibration"),
        ('{"format": "voxmeter-calibration", "version": 99}', "version 99"),
        ('{"format": "voxmeter-calibration", "version": 1, "features": {}}', "'features'"),
        (
            '{"format": "voxmeter-calibration", "version": 1, '
            '"features": {"f0": [{"seconds": 3}]}}',
            r"features\.f0\[0\]",
        ),
        (
            '{"format": "voxmeter-calibration", "version": 1, "features": {"f0": [{"seconds": 3, '
            '"alpha": -1, "beta": 1, "loss": "ll", "lid_weight": 1, "lid_bias": 0, '
            '"log_prior_odds": 0}]}}',
            "alpha and beta",
        ),
    ],
)
def test_bad_json_names_the_problem(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as info:
        CalibrationSet.from_json(text, source="cal.json")
    assert str(info.value).startswith("cal.json")


def test_load_missing_file_is_an_input_error(tmp_path) -> None:
    with pytest.raises(InputError, match="cannot read calibration"):
        CalibrationSet.load(tmp_path / "none.json")


def test_fuse_scores_is_the_weighted_sum_of_z_scores(rng: np.random.Generator) -> None:
    scores = {"a": rng.normal(size=(4, 6)), "b": rng.normal(size=(4, 6)) * 10 + 3}
    fused = fuse_scores(scores, {"a": 2.0, "b": 0.5})
    expected = np.zeros((4, 6))
    for name, w in (("a", 2.0), ("b", 0.5)):
        S = scores[name]
        for i in range(4):  # slow reference: row by row, population SD
            expected[i] += w * (S[i] - S[i].mean()) / S[i].std()
    np.testing.assert_allclose(fused, expected, atol=1e-12)
    with pytest.raises(ValueError, match="no fusion weight"):
        fuse_scores(scores, {"a": 1.0})


def test_fit_trials_reproduces_the_histogram(rng: np.random.Generator) -> None:
    speakers = synthetic_speakers(rng, n_speakers=10, n_utterances=8, overlap=0.8)
    trials = score_trials(speakers, test_seconds=3.0, template_seconds=6.0, features=FEATURES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # separable dev data warn
        fitted = fit_trials(trials, seconds=3.0, loss="ll")
    assert set(fitted) == {*FEATURES, COMBINED}
    for name in FEATURES:
        b = fitted[name]
        assert (b.seconds, b.n_identities, b.n_trials, b.loss) == (3.0, 10, 80, "ll")
        hist = rank_histogram(trials.scores[name], trials.truth)
        model = srd_stats(betabinom_pmf(10, b.alpha, b.beta))
        assert abs(model.IdR - srd_stats(hist).IdR) < 0.1
        assert b.lid_weight > 0  # the features carry speaker information
        assert b.log_prior_odds == pytest.approx(math.log(1 / 9))
        assert b.mean_test_seconds >= 3.0 and b.template_seconds >= 6.0
    combined = fitted[COMBINED]
    fused = fuse_scores(trials.scores, {f: fitted[f].lid_weight for f in FEATURES})
    hist = rank_histogram(fused, trials.truth)
    assert (
        srd_stats(hist).MeanD
        >= max(srd_stats(rank_histogram(trials.scores[f], trials.truth)).MeanD for f in FEATURES)
        - 0.3
    )
    assert combined.lid_weight > 0


def test_random_scores_give_a_null_calibration(rng: np.random.Generator) -> None:
    speakers = synthetic_speakers(rng, n_speakers=12, n_utterances=8, overlap=1.0)
    trials = score_trials(speakers, test_seconds=3.0, template_seconds=6.0, features=("embedding",))
    b = fit_trials(trials, seconds=3.0)["embedding"]
    assert abs(b.lid_weight) < 0.3
    assert COMBINED not in fit_trials(trials, seconds=3.0)  # one feature: nothing to fuse


def test_calibrate_speakers_stops_where_the_corpus_ends(rng: np.random.Generator) -> None:
    speakers = synthetic_speakers(rng, n_speakers=6, n_utterances=8, seconds=(2.5, 3.5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        cal = calibrate_speakers(
            speakers, buckets=(3, 6, 12, 24), template_seconds=6.0, features=("f0", "phone")
        )
    # ~24 s of speech per speaker: 12 s tests + 6 s templates fit, 24 s tests do not.
    assert [b.seconds for b in cal.buckets("f0")] == [3.0, 6.0, 12.0]
    assert set(cal.feature_names) == {"f0", "phone", COMBINED}
    assert cal.metadata["protocol"]["template_seconds"] == 6.0
    assert cal.metadata["loss"] == "ll" and "created" in cal.metadata
    assert CalibrationSet.from_json(cal.to_json()).buckets("phone") == cal.buckets("phone")
    with pytest.raises(ValueError, match="too few speakers"):
        calibrate_speakers(speakers, buckets=(60,), template_seconds=6.0, features=("f0",))


def mean_log_posterior(scores: dict[str, np.ndarray], weights: dict[str, float], truth) -> float:
    """Slow reference: row by row, the log softmax of Σ w_f z_f at the true identity."""
    total = 0.0
    for i, m in enumerate(truth):
        s = sum(
            w * (scores[f][i] - scores[f][i].mean()) / scores[f][i].std()
            for f, w in weights.items()
        )
        total += s[m] - math.log(np.exp(s - s.max()).sum()) - s.max()
    return total / len(truth)


def test_fusion_weights_maximise_the_true_identity_posterior(rng: np.random.Generator) -> None:
    speakers = synthetic_speakers(rng, n_speakers=8, n_utterances=6, overlap=0.85)
    trials = score_trials(speakers, test_seconds=3.0, template_seconds=6.0, features=FEATURES)
    weights = fit_fusion_weights(trials.scores, trials.truth)
    best = mean_log_posterior(trials.scores, weights, trials.truth)
    for f in FEATURES:  # every coordinate is at its optimum among weights >= 0
        for step in (-0.05, 0.05):
            moved = {**weights, f: max(weights[f] + step, 0.0)}
            assert mean_log_posterior(trials.scores, moved, trials.truth) <= best + 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        fitted = fit_trials(trials, seconds=3.0)
    assert fitted[COMBINED].fusion == pytest.approx(weights, rel=1e-4)
    separate = {f: fitted[f].lid_weight for f in FEATURES}
    assert best >= mean_log_posterior(trials.scores, separate, trials.truth) - 1e-9


def test_fusion_ignores_a_feature_but_never_subtracts_it(rng: np.random.Generator) -> None:
    # "phone" scores the true identity lower than the others: a free fit would subtract it
    T, N = 400, 6
    truth = rng.integers(0, N, T)
    true = np.eye(N)[truth]
    scores = {"embedding": rng.normal(size=(T, N)) + 2.0 * true,
              "phone": rng.normal(size=(T, N)) - 1.0 * true}  # fmt: skip
    weights = fit_fusion_weights(scores, truth)
    assert weights["phone"] == 0.0 and weights["embedding"] > 0.5
    best = mean_log_posterior(scores, weights, truth)
    for step in (-0.05, 0.05):  # the embedding's weight is still at its optimum
        moved = {**weights, "embedding": weights["embedding"] + step}
        assert mean_log_posterior(scores, moved, truth) <= best + 1e-6


def test_fusion_weights_fall_back_to_lid_weights() -> None:
    combined = bucket(3, fusion={"f0": 0.5, "embedding": 4.0})
    cal = CalibrationSet(
        {"f0": (bucket(3, lid_weight=1.5),), "embedding": (bucket(3, lid_weight=3.0),),
         COMBINED: (combined,)}
    )  # fmt: skip
    assert cal.fusion_weights(4.0, ["f0", "embedding"]) == {"f0": 0.5, "embedding": 4.0}
    assert cal.fusion_weights(4.0, ["f0"]) == {"f0": 1.5}  # another feature set: naive Bayes
    again = CalibrationSet.from_json(cal.to_json())
    assert again.buckets(COMBINED)[0].fusion == {"f0": 0.5, "embedding": 4.0}
    with pytest.raises(ValueError, match="fusion"):
        bucket(3, fusion={"f0": math.nan})


def test_the_shipped_calibration_loads() -> None:
    cal = load_default()
    assert set(cal.features) == {*FEATURES, COMBINED}
    assert cal.metadata["corpus"] == "speechocean762" and cal.metadata["split"] == "train"
    assert {"protocol", "created", "loss"} <= set(cal.metadata)
    for name in cal.features:
        seconds = [b.seconds for b in cal.buckets(name)]
        assert seconds[:3] == [1.0, 2.0, 3.0] and seconds == sorted(seconds)  # short windows too
        assert all(b.lid_weight > 0 and b.n_identities >= 100 for b in cal.buckets(name))
    assert set(cal.fusion_weights(3.0, FEATURES)) == set(FEATURES)
    assert CalibrationSet.load_default() == cal


def test_shipped_calibrations_are_package_data() -> None:
    """An installed voxmeter (a wheel, no checkout) finds its default calibrations: they sit in
    the package and pyproject's package-data names them."""
    import fnmatch
    import importlib.resources
    import tomllib

    from monitor.calibration.buckets import DEFAULT_PATH, default_path

    shipped = importlib.resources.files("monitor.calibration") / "shipped"
    names = sorted(p.name for p in shipped.iterdir() if p.name.endswith(".json"))
    assert names == [
        "calibration-campplus.json",
        "calibration-ecapa-int8.json",
        "calibration-ecapa.json",
        "calibration-ge2e.json",
        "calibration.json",  # the default backend's (campplus-int8)
        "changes.json",  # the pause change detector's thresholds (monitor.tracking.pauses)
        "consistency.json",  # the window-consistency thresholds (monitor.tracking.consistency)
        "turns.json",  # the turn splitter's change projection (not per backend)
    ]
    assert DEFAULT_PATH.name in names
    backends = ("ecapa-int8", "ecapa", "campplus", "ge2e", "campplus-int8")
    assert all(default_path(b).is_file() for b in backends)
    pyproject = tomllib.loads((DEFAULT_PATH.parents[3] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["monitor"]
    for name in names:
        assert any(fnmatch.fnmatch(f"calibration/shipped/{name}", p) for p in patterns), name
