"""``voxmeter features``: JSON keys, several files in one process, one line per bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from monitor.cli import app
from monitor.features.phone import CMU_PHONES

runner = CliRunner()


def reject_nan(constant: str) -> None:
    raise AssertionError(f"not strict JSON: {constant}")


@pytest.fixture
def utterances(corpus_root: Path) -> list[Path]:
    return sorted((corpus_root / "0036").glob("*.flac"))[:2]


@pytest.mark.corpus
def test_json_for_one_file_has_every_key(utterances: list[Path]) -> None:
    result = runner.invoke(app, ["features", str(utterances[0]), "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) >= {
        "duration_seconds", "speech_seconds", "f0", "phone", "embedding", "timing_seconds"
    }  # fmt: skip
    assert 0 < report["speech_seconds"] <= report["duration_seconds"]
    assert set(report["f0"]) == {"median_hz", "voiced_frames", "lags", "histogram"}
    assert report["f0"]["lags"] == 17 and len(report["f0"]["histogram"]) == 107
    assert sum(report["f0"]["histogram"]) == report["f0"]["voiced_frames"] > 0
    assert 65 <= report["f0"]["median_hz"] <= 450
    assert list(report["phone"]["counts"]) == list(CMU_PHONES)
    assert sum(report["phone"]["counts"].values()) > 0
    assert np.linalg.norm(report["embedding"]["vector"]) == pytest.approx(1.0)
    assert set(report["timing_seconds"]) >= {"read", "vad", "f0", "phone", "embedding", "total"}


@pytest.mark.corpus
def test_bad_files_get_one_line_each_and_the_good_results_survive(
    utterances: list[Path], tmp_path: Path
) -> None:
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    args = ["features", str(utterances[0]), str(empty), str(tmp_path / "gone.flac")]
    result = runner.invoke(app, [*args, str(utterances[1]), "--json"])
    assert result.exit_code == 2
    reports = json.loads(result.stdout)
    assert [r["path"] for r in reports] == [str(utterances[0]), str(utterances[1])]
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"voxmeter: error: {empty}: empty file (0 bytes)",
        f"voxmeter: error: {tmp_path / 'gone.flac'}: no such file",
    ]


@pytest.mark.corpus
def test_text_output_shows_each_feature_and_the_stage_times(utterances: list[Path]) -> None:
    result = runner.invoke(app, ["features", str(utterances[0])])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(str(utterances[0]))
    assert [line.split()[0] for line in lines[1:]] == ["f0", "phone", "embedding", "timing"]
    assert "median_hz" in lines[1] and "read" in lines[4]


def test_only_bad_inputs_exit_non_zero_without_traceback(tmp_path: Path) -> None:
    noise = tmp_path / "notes.wav"
    noise.write_text("a text file with an audio name\n" * 50)
    slow = tmp_path / "slow.wav"
    sf.write(slow, np.zeros(1000, dtype=np.float32), 1000)
    result = runner.invoke(app, ["features", str(noise), str(slow), "--json"])
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in result.stderr
    assert lines[0].startswith(f"voxmeter: error: {noise}: not readable as audio")
    assert lines[1].startswith(f"voxmeter: error: {slow}: unsupported sample rate 1000 Hz")


def test_a_file_without_speech_gives_empty_observations_and_valid_json(tmp_path: Path) -> None:
    silence = tmp_path / "silence.wav"
    sf.write(silence, np.zeros(16000, dtype=np.float32), 16000)
    result = runner.invoke(app, ["features", str(silence), "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout, parse_constant=reject_nan)
    assert report["duration_seconds"] == 1.0 and report["speech_seconds"] == 0.0
    assert report["f0"]["median_hz"] is None and report["f0"]["voiced_frames"] == 0
    assert sum(report["phone"]["counts"].values()) == 0
    assert not any(report["embedding"]["vector"])
