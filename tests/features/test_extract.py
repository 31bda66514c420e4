"""Front end on files: one read per file, a cache that really skips work, errors kept per file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from monitor.errors import InputError
from monitor.features import extract
from monitor.features.extract import FeatureCache, extract_file, extract_many
from monitor.features.f0 import F0Feature


@pytest.fixture
def speech_files(corpus_root: Path, tmp_path: Path) -> list[Path]:
    """Three real utterances copied to a scratch folder (so their mtimes can change)."""
    sources = sorted((corpus_root / "0024").glob("*.flac"))[:3]
    copies = []
    for source in sources:
        copies.append(tmp_path / source.name)
        shutil.copyfile(source, copies[-1])
    return copies


@pytest.fixture
def bad_files(tmp_path: Path, speech_files: list[Path]) -> dict[str, Path]:
    """One file for every way an input can be unusable."""
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "empty.wav").write_bytes(b"")
    (bad / "text.wav").write_text("not audio at all\n" * 20)
    data = speech_files[0].read_bytes()
    (bad / "truncated.flac").write_bytes(data[: len(data) // 3])
    sf.write(bad / "rate.wav", np.zeros(2000, dtype=np.float32), 2000)  # under 4 kHz
    return {
        "empty": bad / "empty.wav",
        "text": bad / "text.wav",
        "truncated": bad / "truncated.flac",
        "rate": bad / "rate.wav",
        "missing": bad / "missing.wav",
    }


class CountingExtract:
    """Spy around the real extract_file: counts how often audio is actually processed."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, path: str, features: tuple[str, ...]) -> extract.FileFeatures:
        self.calls.append(path)
        return EXTRACT_FILE(path, features)


EXTRACT_FILE = extract.extract_file


@pytest.mark.corpus
def test_extract_file_times_every_stage(speech_files: list[Path]) -> None:
    result = extract_file(speech_files[0], ("f0", "phone"))
    assert set(result.observations) == {"f0", "phone"}
    assert list(result.timing_seconds) == ["read", "vad", "f0", "phone", "total"]
    assert all(seconds >= 0 for seconds in result.timing_seconds.values())
    assert 0 < result.speech_seconds <= result.duration_seconds
    assert result.observations["f0"].seconds == pytest.approx(result.speech_seconds)
    assert result.path == str(speech_files[0].absolute())


@pytest.mark.corpus
def test_cache_skips_extraction_until_the_file_or_feature_changes(
    speech_files: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = CountingExtract()
    monkeypatch.setattr(extract, "extract_file", spy)
    cache = FeatureCache(tmp_path / "cache")
    first = extract_many(speech_files, cache, features=("f0",))
    assert len(spy.calls) == 3 and cache.misses == 3

    second = extract_many(speech_files, cache, features=("f0",))
    assert len(spy.calls) == 3 and cache.hits == 3  # nothing recomputed
    for path, result in second.files.items():
        assert result.cached
        assert np.array_equal(
            result.observations["f0"].values, first.files[path].observations["f0"].values
        )
        assert result.speech_seconds == first.files[path].speech_seconds

    stamp = speech_files[0].stat()
    os.utime(speech_files[0], ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 10**9))
    extract_many(speech_files, cache, features=("f0",))
    assert spy.calls[3:] == [str(speech_files[0].absolute())]  # only the touched file

    monkeypatch.setattr(F0Feature, "version", "yin8k-test")
    extract_many(speech_files, cache, features=("f0",))
    assert len(spy.calls) == 7  # a new feature version invalidates every entry

    extract_many(speech_files, cache, features=("f0", "phone"))
    assert len(spy.calls) == 10  # a feature never cached is a miss too


@pytest.mark.corpus
def test_unusable_files_are_reported_and_the_rest_kept(
    speech_files: list[Path], bad_files: dict[str, Path]
) -> None:
    paths = [speech_files[0], *bad_files.values(), speech_files[1]]
    seen: list[tuple[int, int]] = []
    result = extract_many(paths, features=("f0",), progress=lambda d, t, _: seen.append((d, t)))
    assert list(result.files) == [str(speech_files[0]), str(speech_files[1])]
    assert list(result.errors) == [str(p.absolute()) for p in bad_files.values()]
    for kind, path in bad_files.items():
        error = result.errors[str(path)]
        assert isinstance(error, InputError) and str(path) in str(error), kind
    assert "truncated" in str(result.errors[str(bad_files["truncated"])])
    assert "sample rate" in str(result.errors[str(bad_files["rate"])])
    assert seen == [(i, 7) for i in range(1, 8)]


@pytest.mark.corpus
def test_worker_processes_give_the_same_observations(
    speech_files: list[Path], bad_files: dict[str, Path], tmp_path: Path
) -> None:
    paths = [*speech_files, bad_files["text"]]
    serial = extract_many(paths, features=("f0",))
    cache = FeatureCache(tmp_path / "pool-cache")
    pooled = extract_many(paths, cache, features=("f0",), jobs=2)
    assert list(pooled.files) == list(serial.files) and list(pooled.errors) == list(serial.errors)
    for path, result in serial.files.items():
        assert np.array_equal(
            result.observations["f0"].values, pooled.files[path].observations["f0"].values
        )
    assert len(list((tmp_path / "pool-cache").glob("*.json"))) == 3  # the parent wrote the cache


def test_unknown_feature_and_bad_jobs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="pitch"):
        extract_many([], features=("pitch",))
    with pytest.raises(ValueError, match="jobs"):
        extract_many([], jobs=0)
    assert extract_many([], FeatureCache(tmp_path)).files == {}
