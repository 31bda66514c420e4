"""Short utterances and small N: an 8 kHz corpus of single spoken digits by six
espeak-ng speakers (``digits_corpus``), through calibrate and evaluate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from monitor.cli import app
from monitor.enrolment.enroll import _file_problem, _pool_kept
from monitor.features.base import Observation
from monitor.features.extract import FileFeatures

runner = CliRunner(env={"COLUMNS": "1000"})
FAST = ("--features", "f0,embedding")  # pocketsphinx adds minutes and nothing these tests check


def test_template_refusal_names_each_speakers_speech(digits_corpus: Path, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["evaluate", str(digits_corpus), "--out", str(tmp_path / "r"), "--features", "f0"]
    )
    assert result.exit_code == 2, result.stderr
    error = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(error) == 1
    assert "--template-seconds" in error[0]
    for speaker in ("d1", "d2", "d3", "d4", "d5", "d6"):
        assert f"{speaker} " in error[0] and "(10 utt.)" in error[0]


def test_min_speech_option_and_drops_per_speaker(digits_corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    result = runner.invoke(
        app,
        ["evaluate", str(digits_corpus), "--out", str(out), "--features", "f0",
         "--test-seconds", "1", "--template-seconds", "2", "--min-speech", "0.8"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    skipped = [line for line in result.stderr.splitlines() if "minimum 0.8 s" in line]
    assert skipped, "some digits are shorter than 0.8 s of speech"
    per_speaker = [line for line in result.stderr.splitlines() if "skipped per speaker" in line]
    assert len(per_speaker) == 1
    counted = {
        item.split()[0]: int(item.split()[1])
        for item in per_speaker[0].split(": ", 2)[2].split(", ")
    }
    assert sum(counted.values()) == len(skipped)
    # The default minimum (0.3 s) keeps every digit: nothing skipped.
    result = runner.invoke(
        app,
        ["evaluate", str(digits_corpus), "--out", str(out), "--features", "f0",
         "--test-seconds", "1", "--template-seconds", "2"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "skipped" not in result.stderr


@pytest.mark.slow
def test_small_n_report_is_honest(digits_corpus: Path, tmp_path: Path) -> None:
    """Calibrated and evaluated on the same six speakers: the report says they overlap; the
    separable-fit warning names its features once; composition curves stop at log2 N; the N
    change between test lengths is stated."""
    calibration = tmp_path / "cal.json"
    fitted = runner.invoke(
        app,
        ["calibrate", str(digits_corpus), "--out", str(calibration), "--buckets", "1",
         "--template-seconds", "2", *FAST],
    )  # fmt: skip
    assert fitted.exit_code == 0, fitted.stderr
    assert json.loads(calibration.read_text())["metadata"]["dev_speakers"] == [
        f"d{i}" for i in range(1, 7)
    ]
    # The same speakers, two of them with only 5 digits: too little for 3 s tests + 2 s templates.
    corpus = tmp_path / "same" / digits_corpus.name
    for speaker in range(1, 7):
        (corpus / f"d{speaker}").mkdir(parents=True)
        for path in sorted((digits_corpus / f"d{speaker}").glob("*.wav"))[
            : 10 if speaker < 5 else 5
        ]:
            (corpus / f"d{speaker}" / path.name).symlink_to(path)
    out = tmp_path / "r"
    result = runner.invoke(
        app,
        ["evaluate", str(corpus), "--out", str(out), "--calibration", str(calibration),
         "--test-seconds", "1,3", "--template-seconds", "2", *FAST],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    report = (out / "report.md").read_text()
    assert "NOT speaker-disjoint, 6 of the 6 evaluated speakers were dev speakers" in report
    document = json.loads((out / "report.json").read_text())
    for curves in document["composition"].values():
        ceiling = np.array(curves["ceiling_bits"])
        assert np.all(np.array(curves["basic"]) <= ceiling + 1e-12)
        assert np.all(np.array(curves["advanced"]) <= ceiling + 1e-12)
    counts = next(iter(document["composition"].values()))["N"]
    assert counts == [6, 4]  # 3 s tests: the two speakers with 5 digits drop out
    assert f"N changes with the test length ({counts[0]} → {counts[-1]})" in report

    crossfit = runner.invoke(
        app,
        ["evaluate", str(digits_corpus), "--out", str(out), "--lid-from", "crossfit",
         "--test-seconds", "1,2,4", "--template-seconds", "2", *FAST],
    )  # fmt: skip
    assert crossfit.exit_code == 0, crossfit.stderr
    warnings = [line for line in crossfit.stderr.splitlines() if "perfectly separable" in line]
    assert len(warnings) == 1, crossfit.stderr
    assert any(f"{name} at" in warnings[0] for name in ("f0", "embedding", "combined"))


def features_of(values: dict[str, np.ndarray], seconds: float = 1.0) -> FileFeatures:
    return FileFeatures(
        path="/x/s/a.wav",
        duration_seconds=seconds,
        speech_seconds=seconds,
        observations={n: Observation(n, v, seconds) for n, v in values.items()},
    )


def test_a_file_empty_for_one_feature_serves_the_others() -> None:
    voiced = np.zeros(107)
    voiced[40] = 5
    unit = np.zeros(256)
    unit[0] = 1.0
    no_f0 = features_of({"f0": np.zeros(107), "embedding": unit})
    with_f0 = features_of({"f0": voiced, "embedding": unit})
    names = ("f0", "embedding")
    assert _file_problem(no_f0, names) is None  # kept: its embedding is evidence
    assert "no evidence" in str(_file_problem(features_of({"f0": np.zeros(107)}), ("f0",)))
    assert "minimum 1.5 s" in str(_file_problem(with_f0, names, 1.5))
    pooled = _pool_kept("f0", [no_f0, with_f0])
    assert pooled.values[40] == 5 and pooled.seconds == 1.0  # only the file with f0 counts


def test_dev_overlap_says_what_is_true() -> None:
    from monitor.calibration.buckets import CalibrationSet
    from monitor.evaluate.lid_setup import dev_overlap

    def calibration(**metadata: object) -> CalibrationSet:
        return CalibrationSet({}, dict(metadata))

    here = {"corpus": "so762", "split": "test"}
    listed = calibration(corpus="so762", split="train", dev_speakers=["a", "b"])
    assert "speaker-disjoint from the evaluated" in dev_overlap(listed, ["c", "d"], here)
    assert "NOT speaker-disjoint, 1 of the 2" in dev_overlap(listed, ["a", "d"], here)
    assert "NOT speaker-disjoint if they are the same people" in dev_overlap(
        listed, ["a", "d"], {"corpus": "other"}
    )
    unlisted = calibration(corpus="so762", split="train")  # an older calibration file
    assert "speaker-disjoint if the corpus's splits are" in dev_overlap(unlisted, ["a"], here)
    everyone = {"corpus": "so762", "split": None}
    assert "NOT speaker-disjoint" in dev_overlap(unlisted, ["a"], everyone)
    assert "another corpus" in dev_overlap(unlisted, ["a"], {"corpus": "digits"})
