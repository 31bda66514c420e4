"""enroll → calibrate → evaluate on a small real subset, and one-line errors for bad input.

The subset links (never copies) 6 utterances of 4 train and 4 test speakers of the real corpus
into a temporary folder, with a private feature cache, so the test extracts everything itself.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from monitor.calibration.buckets import COMBINED, CalibrationSet
from monitor.cli import app
from monitor.evaluate.markdown import bits, percent
from monitor.store import open_store

runner = CliRunner()
FEATURES = ("f0", "phone", "embedding")


def link_subset(
    corpus_root: Path, rows: list[dict[str, str]], target: Path, per_split: int, utterances: int
) -> list[str]:
    """``target``/<speaker>/ with symlinks to the first utterances, plus speakers.tsv."""
    chosen = []
    for split in ("train", "test"):
        chosen += [r for r in rows if r["original_split"] == split][:per_split]
    target.mkdir()
    with open(target / "speakers.tsv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(chosen)
    for row in chosen:
        folder = target / row["speaker"]
        folder.mkdir()
        for path in sorted((corpus_root / row["speaker"]).glob("*.flac"))[:utterances]:
            (folder / path.name).symlink_to(path)
    return [r["speaker"] for r in chosen]


def entropy_bits(hist: list[float]) -> float:
    p = np.asarray(hist, dtype=float)
    p = p[p > 0] / p.sum()
    return float(-(p * np.log2(p)).sum())


@pytest.mark.corpus
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:LID calibration:RuntimeWarning")  # 4 dev speakers separate
def test_enroll_calibrate_evaluate(
    corpus_root: Path, corpus_speakers: list[dict[str, str]], tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus"
    link_subset(corpus_root, corpus_speakers, corpus, per_split=4, utterances=6)
    cache, db = tmp_path / "cache", tmp_path / "voxmeter.db"
    common = ["--cache", str(cache)]

    result = runner.invoke(
        app, ["enroll", str(corpus), "--split", "test", "--db", str(db), *common]
    )
    assert result.exit_code == 0, result.output

    calibration_file = tmp_path / "calibration.json"
    result = runner.invoke(
        app,
        ["calibrate", str(corpus), "--split", "train", "--out", str(calibration_file),
         "--db", str(db), "--buckets", "3,6,12", "--template-seconds", "6", *common],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    calibration = CalibrationSet.load(calibration_file)
    assert set(calibration.features) == {*FEATURES, COMBINED}
    assert calibration.metadata["split"] == "train" and calibration.metadata["speakers"] == 4
    with open_store(db, create=False) as store:
        stored = store.load_calibration()
    assert stored is not None and stored.to_json() == calibration.to_json()

    out = tmp_path / "report"
    result = runner.invoke(
        app,
        ["evaluate", str(corpus), "--split", "test", "--out", str(out),
         "--calibration", str(calibration_file), "--test-seconds", "3,6",
         "--template-seconds", "6", "--protected", str(corpus), *common],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    document = json.loads((out / "report.json").read_text())
    text = (out / "report.md").read_text()
    N = document["N"]
    assert N == 4 and document["split"] == "test"
    assert "bucket" in document["protocol"]["lid_calibration"]  # LID from the dev speakers
    for name, f in document["features"].items():
        assert f["histogram"]["MeanD"] == pytest.approx(
            math.log2(N) - entropy_bits(f["rank_histogram"])
        )
        assert abs(f["model"]["MeanD"] - f["histogram"]["MeanD"]) < 0.5, name
        row = re.search(rf"^\| `{name}` \| ([^|]+) \| ([^|]+) \| ([^|]+) \|", text, flags=re.M)
        assert row is not None, name
        assert row.group(1).strip() == bits(f["histogram"]["MeanD"])
        assert row.group(2).strip() == bits(f["model"]["MeanD"])
        assert row.group(3).strip() == percent(f["histogram"]["IdR"])
        assert set(f["per_speaker"]) <= {r for r in f["per_speaker"]} and len(f["per_speaker"]) == N
    assert document["features"]["embedding"]["histogram"]["MeanD"] > 0
    assert [e["test_seconds"] for e in document["by_length"]] == [3.0, 6.0]
    assert all((out / name).is_file() for name in document["plots"].values())
    # An unprotected "protected" copy (the same files) de-identifies nothing (paper 002).
    protected = document["protected"]
    assert protected["N"] == N and protected["segments"] == 6 * N
    assert protected["DeID"] == pytest.approx(0.0, abs=1e-9)
    assert protected["GVD_dB"] == pytest.approx(0.0, abs=1e-9)
    assert "similarity_matrices.png" in document["plots"].values()
    assert "## Voice similarity matrices (paper 002)" in text


def test_empty_corpus_is_one_line(tmp_path: Path) -> None:
    for command in (["calibrate", str(tmp_path), "--out", str(tmp_path / "c.json")],
                    ["evaluate", str(tmp_path), "--out", str(tmp_path / "r")]):  # fmt: skip
        result = runner.invoke(app, [*command, "--no-cache"])
        assert result.exit_code == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "no readable" in lines[0], result.stderr


def test_bad_options_are_one_line(tmp_path: Path) -> None:
    cases = [
        (["calibrate", str(tmp_path), "--out", "c.json", "--loss", "l2"], "--loss 'l2'"),
        (
            ["calibrate", str(tmp_path), "--out", "c.json", "--buckets", "3,x"],
            "'x' is not a number",
        ),
        (["evaluate", str(tmp_path), "--out", "r", "--test-seconds", "-3"], "positive"),
        (["evaluate", str(tmp_path), "--out", "r", "--features", "f0,pitch"], "unknown ['pitch']"),
        (["evaluate", str(tmp_path), "--out", "r", "--lid-from", "dev"], "--lid-from 'dev'"),
    ]
    for args, message in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, args
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, args


@pytest.mark.corpus
@pytest.mark.slow
def test_silent_speaker_and_unreadable_file_are_skipped_and_listed(
    corpus_root: Path, corpus_speakers: list[dict[str, str]], tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus"
    speakers = link_subset(corpus_root, corpus_speakers, corpus, per_split=2, utterances=4)
    broken = corpus / speakers[0] / "broken.flac"
    broken.write_bytes(b"not audio at all")
    silent = corpus / "silent"
    silent.mkdir()
    for k in range(3):
        sf.write(silent / f"quiet{k}.wav", np.zeros(16000 * 2, dtype=np.int16), 16000)
    result = runner.invoke(
        app,
        ["calibrate", str(corpus), "--out", str(tmp_path / "c.json"), "--buckets", "3",
         "--template-seconds", "3", "--features", "f0,embedding", "--cache", str(tmp_path / "c")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    skipped = [line for line in result.stderr.splitlines() if line.startswith("voxmeter: skipped")]
    assert any(str(broken) in line and "not readable" in line for line in skipped), skipped
    assert any("quiet0.wav" in line and "speech" in line for line in skipped), skipped
    assert any("speaker silent" in line and "0 usable" in line for line in skipped), skipped
    assert "4 speakers" in result.stdout and "N per bucket 4" in result.stdout
