"""Audit figures on synthetic speakers: internal consistency, LID sources, report agreement."""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from monitor.calibration.buckets import COMBINED
from monitor.calibration.fit import calibrate_speakers
from monitor.calibration.protocol import SpeakerUtterances
from monitor.evaluate.audit import run_audit
from monitor.evaluate.deid import protected_audit
from monitor.evaluate.markdown import bits, percent
from monitor.evaluate.plots import write_plots
from monitor.evaluate.report import write_report
from monitor.evaluate.results import composition_curves
from tests.calibration.synthetic import synthetic_speakers

FEATURES = ("f0", "embedding")


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, dict, str, Path]:
    rng = np.random.default_rng(7)
    speakers = synthetic_speakers(rng, n_speakers=6, n_utterances=6, overlap=0.85)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        audit = run_audit(
            speakers,
            test_seconds=[3.0, 6.0],
            template_seconds=[6.0],
            features=FEATURES,
            metadata={"corpus": "synthetic", "split": "test"},
            skipped=[("bad.flac", "not readable as audio")],
        )
    out = tmp_path_factory.mktemp("report")
    document = write_report(audit, out, write_plots(audit, out))
    return audit, document, (out / "report.md").read_text(), out


def entropy_bits(hist: list[float]) -> float:
    p = np.asarray(hist, dtype=float)
    p = p[p > 0] / p.sum()
    return float(-(p * np.log2(p)).sum())


def test_meand_is_log2n_minus_entropy_and_model_close(audited) -> None:
    _, document, _, _ = audited
    N = document["N"]
    assert N == 6 and set(document["features"]) == {*FEATURES, COMBINED}
    for name, f in document["features"].items():
        hist = f["rank_histogram"]
        assert len(hist) == N and sum(hist) == pytest.approx(36)
        assert f["histogram"]["MeanD"] == pytest.approx(math.log2(N) - entropy_bits(hist))
        assert abs(f["model"]["MeanD"] - f["histogram"]["MeanD"]) < 0.5, name
        assert abs(f["model"]["IdR"] - f["histogram"]["IdR"]) < 0.1, name
        assert set(f["fits"]) == {"ll", "ms", "wms", "rwms", "cll"}
        assert f["fits"]["ll"]["KL_bits"] <= min(v["KL_bits"] for v in f["fits"].values()) + 1e-6
        assert f["lid"]["LID_max"] <= math.log2(N) + 1e-9
        assert 0 <= f["EER"] <= 1 and f["zebra"]["tag"] in "0ABCDEF"
        assert set(f["per_speaker"]) == {f"spk{i:02d}" for i in range(6)}


def test_length_grid_and_composition(audited) -> None:
    audit, document, _, _ = audited
    assert [e["test_seconds"] for e in document["by_length"]] == [3.0, 6.0]
    for name, c in document["composition"].items():
        assert c["basic"][0] == c["advanced"][0] == c["MeanD"][0]
        ratio = c["mean_test_seconds"][1] / c["mean_test_seconds"][0]
        assert c["basic"][1] == pytest.approx(c["MeanD"][0] * ratio), name
        assert c["advanced"][1] == pytest.approx(c["MeanD"][0] * math.sqrt(ratio)), name
    assert "cross-fitted" in document["protocol"]["lid_calibration"]
    assert audit.main.features["f0"].lid.shape == (36,)


def test_markdown_prints_the_json_numbers(audited) -> None:
    _, document, text, _ = audited
    rows = {
        m.group(1): [c.strip() for c in m.group(2).split("|")]
        for m in re.finditer(r"^\| `(\w+)` \| (.*) \|$", text, flags=re.M)
        if m.group(2).count("|") == 10  # the Table II rows (12 columns)
    }
    assert set(rows) == set(document["features"])
    for name, cells in rows.items():
        f = document["features"][name]
        assert cells[0] == bits(f["histogram"]["MeanD"])
        assert cells[1] == bits(f["model"]["MeanD"])
        assert cells[2] == percent(f["histogram"]["IdR"])
        assert cells[4] == bits(f["histogram"]["MaxD"])
        assert cells[8] == percent(f["EER"])
    lid_rows = re.findall(r"^\| `(\w+)` \| ([-\d.]+) \| ([\d.]+) \|", text, flags=re.M)
    alid = {n: v for n, v, pdr in lid_rows if pdr == percent(document["features"][n]["lid"]["PDR"])}
    assert set(alid) == set(document["features"])  # every LID row was found
    assert {n: bits(document["features"][n]["lid"]["ALID"]) for n in alid} == alid
    assert "`bad.flac`: not readable as audio" in text
    assert f"**N = {document['N']}**" in text


def test_report_files_and_plots(audited) -> None:
    _, document, text, out = audited
    assert json.loads((out / "report.json").read_text()) == document
    for filename in document["plots"].values():
        assert (out / filename).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({filename})" in text
    assert len(document["plots"]) == 4  # histograms, LID CCDF, per speaker, length


def test_lid_weights_from_a_calibration(rng: np.random.Generator) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        dev = synthetic_speakers(rng, n_speakers=6, n_utterances=6, overlap=0.85)
        calibration = calibrate_speakers(
            dev, buckets=(3.0,), template_seconds=6.0, features=FEATURES
        )
        evaluation = synthetic_speakers(rng, n_speakers=5, n_utterances=6, overlap=0.85)
        audit = run_audit(
            evaluation,
            test_seconds=[4.0],
            template_seconds=[6.0],
            features=FEATURES,
            calibration=calibration,
        )
    main = audit.main
    assert "3 s bucket" in main.lid_source
    for name in (*FEATURES, COMBINED):
        expected = calibration.lookup(name, 4.0)[0].lid_weight
        assert main.features[name].lid_summary.weight == pytest.approx(expected)


def test_protected_copy_identical_and_unrelated(rng: np.random.Generator) -> None:
    original = synthetic_speakers(rng, n_speakers=4, n_utterances=5, overlap=0.5)
    same = protected_audit(original, original, corpus="copy")
    assert same.DeID == pytest.approx(0.0, abs=1e-9)
    assert same.GVD_dB == pytest.approx(0.0, abs=1e-9)
    assert same.M_OO.shape == (4, 4) and same.segments == 20
    noise = [
        SpeakerUtterances(
            s.alias,
            s.utterances,
            s.speech_seconds,
            {"embedding": rng.normal(size=s.values["embedding"].shape)},
            s.weights,
        )
        for s in original
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        scrambled = protected_audit(original, noise, corpus="noise")
    assert scrambled.DeID > 0.5
    assert scrambled.to_dict()["N"] == 4


def test_composition_curves_anchor_at_the_shortest() -> None:
    curves = composition_curves(np.array([12.0, 3.0, 6.0]), np.array([2.0, 1.0, 1.5]))
    np.testing.assert_allclose(curves["basic"], [4.0, 1.0, 2.0])
    np.testing.assert_allclose(curves["advanced"], [2.0, 1.0, math.sqrt(2.0)])


def test_a_calibration_for_other_features_falls_back_to_crossfit(rng: np.random.Generator) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        dev = synthetic_speakers(rng, n_speakers=5, n_utterances=6, overlap=0.85)
        calibration = calibrate_speakers(
            dev, buckets=(3.0,), template_seconds=6.0, features=("f0", "phone", "embedding")
        )
        evaluation = synthetic_speakers(rng, n_speakers=4, n_utterances=6, overlap=0.85)
        audit = run_audit(
            evaluation,
            test_seconds=[3.0],
            template_seconds=[6.0],
            features=FEATURES,  # f0 and embedding only: the stored fusion does not apply
            calibration=calibration,
        )
        assert "cross-fitted" in audit.main.lid_source
        with pytest.raises(ValueError, match="combined was fitted on"):
            run_audit(
                evaluation,
                test_seconds=[3.0],
                template_seconds=[6.0],
                features=FEATURES,
                calibration=calibration,
                lid_source="calibration",
            )
