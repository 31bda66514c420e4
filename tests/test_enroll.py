"""Enrolment from a real corpus subset: CLI end to end, template contents, selection rules."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from monitor.cli import app
from monitor.corpus import scan_corpus
from monitor.corpus.jobs import CorpusJob
from monitor.enrolment.enroll import enroll_corpus
from monitor.features.base import get_feature
from monitor.features.extract import FeatureCache, extract_many
from monitor.store import open_store

runner = CliRunner(env={"COLUMNS": "1000"})
SPEAKERS = 4
FILES = 3  # per speaker: enough for --seconds to need more than one file


@pytest.fixture(scope="module")
def small_corpus(
    tmp_path_factory: pytest.TempPathFactory,
    corpus_root: Path,
    corpus_speakers: list[dict[str, str]],
) -> Path:
    """4 real speakers × 3 utterances (symlinks, no audio copied), one corrupt file in a real
    speaker's folder and one speaker whose only file is corrupt."""
    root = tmp_path_factory.mktemp("corpus")
    rows = corpus_speakers[:SPEAKERS]
    for row in rows:
        folder = root / row["speaker"]
        folder.mkdir()
        for source in sorted((corpus_root / row["speaker"]).glob("*.flac"))[:FILES]:
            (folder / source.name).symlink_to(source)
    (root / rows[0]["speaker"] / "zzz-broken.flac").write_bytes(b"not audio at all")
    (root / "9999").mkdir()
    (root / "9999" / "only.wav").write_bytes(b"RIFF....WAVEjunk")
    (root / "8888").mkdir()  # a speaker folder with no audio file at all
    with open(root / "speakers.tsv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    return root


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.mark.corpus
def test_enroll_cli_end_to_end(small_corpus: Path, cache_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "templates.db"
    args = ["enroll", str(small_corpus), "--db", str(db), "--utterances", "2", "--local"]
    started = time.perf_counter()
    result = runner.invoke(app, [*args, "--cache", str(cache_dir)])
    print(f"\nenrol {SPEAKERS} speakers × 2 files: {time.perf_counter() - started:.1f} s")
    assert result.exit_code == 0, result.output
    assert f"enrolled {SPEAKERS} speakers (f0, phone, embedding;" in result.stdout
    assert "4 local profiles" in result.stdout
    # four voices are far too few to measure against alone: the shipped population joins them
    assert f"reference set: {SPEAKERS} enrolled + " in result.stdout
    assert "figures are stated against population.size" in result.stdout
    # Nothing dropped silently: the corrupt file and the speaker without audio are named.
    assert "skipped file" in result.stderr and "zzz-broken.flac" in result.stderr
    assert "skipped speaker 9999: no readable audio file" in result.stderr

    speakers = sorted(
        p.name for p in small_corpus.iterdir() if p.is_dir() and p.name not in ("9999", "8888")
    )
    with open_store(db) as store:
        identities = store.identities()
        assert [i.alias for i in identities] == speakers
        # with --local, the narrow-band and far-field copies beside the templates
        variants = {"embedding+narrow", "embedding+room"}
        assert all(set(i.templates) == {"f0", "phone", "embedding", *variants} for i in identities)
        assert [p.alias for p in store.local_profiles()] == speakers
        assert identities[0].metadata["corpus"] == small_corpus.name
        assert "gender" in identities[0].metadata and "speaker" not in identities[0].metadata
        batches = {f: store.template_batch(f) for f in ("f0", "phone", "embedding")}
    for feature, (aliases, batch) in batches.items():
        assert aliases == tuple(speakers)
        assert batch.matrix.shape == (SPEAKERS, get_feature(feature).dimension)
    np.testing.assert_allclose(np.linalg.norm(batches["embedding"][1].matrix, axis=1), 1.0)

    # Each template is the feature's pool of the speaker's first two files (read from the
    # same cache, so this also checks the cache was filled).
    corpus = scan_corpus(small_corpus)
    first_two = [str(u.path) for s in speakers for u in corpus.utterances_of(s)[:2]]
    cache = FeatureCache(cache_dir)
    files = extract_many(first_two, cache).files
    assert cache.hits == len(first_two)
    for row, speaker in enumerate(speakers):
        mine = [files[p] for p in first_two if Path(p).parent.name == speaker]
        for feature, (_, batch) in batches.items():
            pooled = get_feature(feature).pool([m.observations[feature] for m in mine])
            np.testing.assert_allclose(batch.matrix[row], pooled.values)

    # Re-enrolment from the cache replaces the templates in place (same order, same rows).
    again = runner.invoke(app, [*args, "--cache", str(cache_dir)])
    assert again.exit_code == 0 and "(8 cached)" in again.stdout, again.output
    listed = json.loads(runner.invoke(app, ["db", "list", "--db", str(db), "--json"]).stdout)
    assert [i["alias"] for i in listed] == speakers
    assert all(i["local_profiles"] == [i["alias"]] for i in listed)


@pytest.mark.corpus
def test_seconds_selects_the_fewest_first_files(
    small_corpus: Path, cache_dir: Path, tmp_path: Path
) -> None:
    corpus = scan_corpus(small_corpus)
    cache = FeatureCache(cache_dir)
    with open_store(tmp_path / "s.db") as store:
        report = enroll_corpus(
            store, corpus, features=("f0", "embedding"), seconds=4.0, job=CorpusJob(cache=cache)
        )
        seconds = {i.alias: i.templates["embedding"].seconds for i in store.identities()}
    for speaker in report.enrolled:
        files = corpus.utterances_of(speaker.alias)
        speech = np.cumsum(
            [
                extract_many([str(u.path)], cache, features=("f0",))
                .files[str(u.path)]
                .speech_seconds
                for u in files
            ]
        )
        expected = int(np.searchsorted(speech, 4.0)) + 1 if speech[-1] >= 4.0 else len(files)
        assert len(speaker.files) == expected
        assert speaker.short == (speech[-1] < 4.0)
        assert seconds[speaker.alias] == pytest.approx(speaker.speech_seconds)
    assert dict(report.skipped_speakers) == {
        "9999": "no readable audio file",
        "8888": "no audio file in its folder",
    }


@pytest.mark.corpus
def test_the_same_audio_under_two_speakers_is_warned_about(
    corpus_root: Path, corpus_speakers: list[dict[str, str]], cache_dir: Path, tmp_path: Path
) -> None:
    first, second = (row["speaker"] for row in corpus_speakers[:2])
    root = tmp_path / "corpus"
    for speaker in (first, second):
        (root / speaker).mkdir(parents=True)
        for source in sorted((corpus_root / speaker).glob("*.flac"))[:2]:
            (root / speaker / source.name).symlink_to(source)
    copied = sorted((corpus_root / first).glob("*.flac"))[0]
    (root / second / "0-copy.flac").symlink_to(copied)  # a copy filed under the other speaker
    db = tmp_path / "dup.db"
    args = ["enroll", str(root), "--db", str(db), "--utterances", "2", "--cache", str(cache_dir)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.stderr.splitlines() if "same audio" in line]
    assert line.startswith("voxmeter: warning: the same audio appears under speakers")
    assert f"{first}, {second}" in line and "0-copy.flac" in line and copied.name in line

    (root / second / "0-copy.flac").unlink()  # without the copy: no warning
    result = runner.invoke(app, [*args[:3], str(tmp_path / "clean.db"), *args[4:]])
    assert result.exit_code == 0 and "same audio" not in result.stderr


def test_duplicates_are_grouped_by_fingerprint_across_and_within_speakers() -> None:
    from monitor.corpus.duplicates import find_duplicates, fingerprint
    from monitor.features.base import Observation

    def observed(value: float, seconds: float = 2.0) -> bytes:
        obs = {"f0": Observation("f0", np.array([value, 1.0]), seconds)}
        return fingerprint(obs, seconds)

    files = [
        ("a", "a/1.wav", observed(1.0)),
        ("b", "b/1.wav", observed(1.0)),  # a's recording again
        ("b", "b/2.wav", observed(2.0)),
        ("b", "b/3.wav", observed(2.0)),  # b twice
        ("c", "c/1.wav", observed(1.0, seconds=2.5)),  # same values, other speech: different
    ]
    groups = find_duplicates(files)
    assert [g.files for g in groups] == [
        (("a", "a/1.wav"), ("b", "b/1.wav")),
        (("b", "b/2.wav"), ("b", "b/3.wav")),
    ]
    assert [g.speakers for g in groups] == [("a", "b"), ("b",)]


def test_a_repeat_within_one_speaker_is_warned_about_only_where_tests_meet_templates(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from monitor.corpus.duplicates import DuplicateAudio, warn_duplicates

    within = [DuplicateAudio((("b", "b/2.wav"), ("b", "b/3.wav")))]
    with caplog.at_level("WARNING", logger="monitor"):
        warn_duplicates(within, within_speaker_matters=False)  # enroll: harmless
        assert caplog.records == []
        warn_duplicates(within, within_speaker_matters=True)  # calibrate, evaluate
    [record] = caplog.records
    assert "speaker b holds the same audio twice (b/2.wav, b/3.wav)" in record.getMessage()
