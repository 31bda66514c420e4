"""scan_corpus: layout, metadata, splits, and unreadable files listed rather than dropped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from monitor.corpus import read_metadata, scan_corpus
from monitor.errors import InputError


def write_wav(path: Path, seconds: float = 0.2) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, np.zeros(int(16000 * seconds), dtype=np.float32), 16000)


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    """spk2 (3 files, one of them flac), spk1 (2 files), a speaker folder with only notes."""
    for name in ("b.wav", "a.WAV"):
        write_wav(tmp_path / "spk1" / name)
    for name in ("z.wav", "y.wav"):
        write_wav(tmp_path / "spk2" / name)
    sf.write(tmp_path / "spk2" / "x.flac", np.zeros(800, dtype=np.float32), 16000)
    (tmp_path / "spk2" / "notes.txt").write_text("not an utterance")
    (tmp_path / "empty-speaker").mkdir()
    (tmp_path / "empty-speaker" / "readme.md").write_text("nothing here")
    (tmp_path / "speakers.tsv").write_text(
        "speaker\tgender\tage\toriginal_split\nspk1\tf\t30\ttrain\nspk2\tm\t41\ttest\n"
    )
    return tmp_path


def test_layout_gives_sorted_speakers_and_utterances(tiny: Path) -> None:
    corpus = scan_corpus(tiny)
    assert corpus.speakers == ("spk1", "spk2")
    assert [(u.speaker, u.path.name) for u in corpus.utterances] == [
        ("spk1", "a.WAV"), ("spk1", "b.wav"),
        ("spk2", "x.flac"), ("spk2", "y.wav"), ("spk2", "z.wav"),
    ]  # fmt: skip
    assert all(u.path.is_absolute() for u in corpus.utterances)
    assert [u.path.name for u in corpus.utterances_of("spk1")] == ["a.WAV", "b.wav"]
    assert corpus.metadata["spk2"]["age"] == "41" and corpus.unreadable == ()
    assert len(corpus.paths) == 5


def test_split_keeps_only_its_speakers(tiny: Path) -> None:
    assert scan_corpus(tiny, split="test").speakers == ("spk2",)
    with pytest.raises(InputError, match="no speaker in split 'dev'"):
        scan_corpus(tiny, split="dev")


def test_split_without_metadata_is_an_error(tiny: Path) -> None:
    (tiny / "speakers.tsv").unlink()
    corpus = scan_corpus(tiny)
    assert corpus.metadata == {} and corpus.speakers == ("spk1", "spk2")
    with pytest.raises(InputError, match="needs speaker metadata"):
        scan_corpus(tiny, split="train")


def test_unreadable_files_are_listed_with_the_reason(tiny: Path) -> None:
    (tiny / "spk1" / "c.wav").write_bytes(b"")
    (tiny / "spk2" / "w.flac").write_text("this is not a flac file")
    (tiny / "spk3").mkdir()
    (tiny / "spk3" / "only.wav").write_bytes(b"RIFF")
    corpus = scan_corpus(tiny)
    assert [(p.name, reason.split(" (")[0]) for p, reason in corpus.unreadable] == [
        ("c.wav", "empty file"),
        ("w.flac", "not readable as audio"),
        ("only.wav", "not readable as audio"),
    ]
    assert corpus.speakers == ("spk1", "spk2")  # spk3 has nothing readable, and says why
    assert len(corpus.utterances) == 5


def test_empty_or_missing_corpus_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a directory"):
        scan_corpus(tmp_path / "absent")
    (tmp_path / "spk").mkdir()
    (tmp_path / "spk" / "a.mp3").write_bytes(b"ID3")
    with pytest.raises(InputError, match=r"no readable <speaker>/<utterance>\.wav\|flac"):
        scan_corpus(tmp_path)


def test_malformed_metadata_names_the_line(tmp_path: Path) -> None:
    tsv = tmp_path / "speakers.tsv"
    tsv.write_text("speaker\tgender\nspk1\tf\nspk2\n")
    with pytest.raises(InputError, match=r"speakers\.tsv:3: expected 2 tab-separated fields"):
        read_metadata(tsv)
    tsv.write_text("speaker\tgender\nspk1\tf\nspk1\tm\n")
    with pytest.raises(InputError, match=r":3: speaker 'spk1' listed twice"):
        read_metadata(tsv)
    tsv.write_text("id\tgender\n")
    with pytest.raises(InputError, match=r":1: header must name a 'speaker' column"):
        read_metadata(tsv)


@pytest.mark.corpus
def test_real_corpus(corpus_root: Path, corpus_speakers: list[dict[str, str]]) -> None:
    corpus = scan_corpus(corpus_root)
    assert len(corpus.speakers) == 250 and len(corpus.utterances) == 2500
    assert corpus.unreadable == ()
    assert set(corpus.metadata) == {row["speaker"] for row in corpus_speakers}
    train = scan_corpus(corpus_root, split="train")
    test = scan_corpus(corpus_root, split="test")
    assert set(train.speakers).isdisjoint(test.speakers)
    assert len(train.speakers) + len(test.speakers) == 250
