"""The audit report shows the measured figures beside the population model's."""

from __future__ import annotations

import numpy as np

from monitor.disclosure.lid import LidCalibration
from monitor.evaluate.audit import audit_feature
from monitor.evaluate.markdown import _md_modelled
from monitor.evaluate.modelled import modelled
from monitor.population.shipped import load_shipped


def test_measured_and_modelled_side_by_side() -> None:
    rng = np.random.default_rng(49)
    T, N = 400, 60
    truth = rng.integers(0, N, T)
    scores = rng.normal(size=(T, N))
    scores[np.arange(T), truth] += 2.5  # the true speaker scores higher
    cal = LidCalibration(weight=1.5, bias=0.0, log_prior_odds=-np.log(N - 1))
    z = (scores - scores.mean(axis=1, keepdims=True)) / scores.std(axis=1, keepdims=True)
    a = cal.weight * z
    lid = (np.log(N) + a[np.arange(T), truth] - np.logaddexp.reduce(a, axis=1)) / np.log(2)
    audits = {
        "embedding": audit_feature(
            "embedding",
            scores,
            truth,
            lid,
            cal,
            [str(i) for i in range(N)],
            loss="ll",
            per_speaker=False,
        )
    }
    model = load_shipped("campplus-int8").model
    rows = modelled(
        audits,
        {"embedding": scores},
        truth,
        {"embedding": cal},
        model=model,
        seconds=3.0,
        population=1e6,
    )
    row = rows["embedding"]
    assert row["N"] == N and row["N_pop"] == 1e6
    assert row["ALID_measured"] == np.mean(lid)
    assert 0 < row["ALID_modelled"] <= np.log2(N) and row["ALID_at_N_pop"] <= np.log2(1e6)
    assert 0 <= row["rank1_at_N_pop"] <= row["rank1_modelled"] <= 1
    assert (
        modelled(
            audits,
            {"embedding": scores},
            truth,
            {"embedding": cal},
            model=None,
            seconds=3.0,
            population=1e6,
        )
        == {}
    )
    text = markdown_section({"embedding": row})
    assert "## Measured and modelled (population model)" in text and "`embedding`" in text


def markdown_section(rows: dict[str, dict[str, float]]) -> str:
    return "\n".join(_md_modelled({"modelled": rows}))
