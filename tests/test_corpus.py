"""scan_corpus: layout, metadata, splits, and unreadable files listed rather than dropped."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from monitor.corpus import check_speaker_names, read_metadata, scan_corpus
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
    assert corpus.empty_speakers == ("empty-speaker",)  # named, never silently dropped


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
    with pytest.raises(InputError, match=r"no readable <speaker>/<utterance>\.wav\|flac\|ogg"):
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


def test_spreadsheet_metadata_with_bom_and_crlf_reads(tiny: Path) -> None:
    """Excel's "UTF-8 with BOM" export, Windows line ends, padded header cells."""
    (tiny / "speakers.tsv").write_bytes(
        b"\xef\xbb\xbfspeaker \tgender\toriginal_split\r\nspk1\tf\ttrain\r\nspk2\tm\ttest\r\n"
    )
    corpus = scan_corpus(tiny, split="test")
    assert corpus.speakers == ("spk2",)
    assert corpus.metadata == {"spk2": {"speaker": "spk2", "gender": "m", "original_split": "test"}}


def test_metadata_not_in_utf8_names_the_line(tmp_path: Path) -> None:
    tsv = tmp_path / "speakers.tsv"
    tsv.write_bytes(b"speaker\tgender\nspk1\tf\nJos\xe9\tm\n")  # Latin-1
    with pytest.raises(InputError, match=r"speakers\.tsv:3: not UTF-8 text \(byte 0xe9\)"):
        read_metadata(tsv)


def test_metadata_with_a_column_twice_names_it(tmp_path: Path) -> None:
    tsv = tmp_path / "speakers.tsv"
    tsv.write_text("speaker\tage\tage\nspk1\t3\t4\n")
    with pytest.raises(InputError, match=r"speakers\.tsv:1: header names column\(s\) \['age'\]"):
        read_metadata(tsv)


def test_ogg_and_mp3_utterances_are_read_and_broken_links_listed(tmp_path: Path) -> None:
    """Every format soundfile reads is an utterance; a dangling symlink is listed, not dropped."""
    audio = np.sin(np.arange(16000) * 0.05).astype(np.float32) * 0.3
    (tmp_path / "spk").mkdir()
    sf.write(tmp_path / "spk" / "a.ogg", audio, 16000, format="OGG")
    sf.write(tmp_path / "spk" / "b.MP3", audio, 16000, format="MP3")
    (tmp_path / "spk" / "c.wav").symlink_to(tmp_path / "gone.wav")
    (tmp_path / "spk" / "d.wav").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "spk" / "e.flac")
    corpus = scan_corpus(tmp_path)
    assert [u.path.name for u in corpus.utterances] == ["a.ogg", "b.MP3"]
    assert [(p.name, why.split(" (")[0]) for p, why in corpus.unreadable] == [
        ("c.wav", "broken symbolic link"),
        ("d.wav", "not a regular file"),
        ("e.flac", "not a regular file"),
    ]


def test_unicode_names_match_metadata_in_either_normal_form(tmp_path: Path) -> None:
    """A folder "José" with a combining accent (macOS) matches a precomposed speakers.tsv row;
    two folders that differ only so would look alike, and are refused."""
    decomposed, composed = "Jose\u0301", "Jos\u00e9"
    write_wav(tmp_path / decomposed / "a.wav")
    write_wav(tmp_path / "名前" / "a.wav")
    (tmp_path / "speakers.tsv").write_text(
        f"speaker\toriginal_split\n{composed}\ttest\n名前\ttrain\n", encoding="utf-8"
    )
    corpus = scan_corpus(tmp_path, split="test")
    assert corpus.speakers == (decomposed,)
    assert corpus.metadata[decomposed]["original_split"] == "test"
    check_speaker_names(scan_corpus(tmp_path))
    write_wav(tmp_path / composed / "a.wav")
    with pytest.raises(InputError, match=r"differ only in Unicode normalisation"):
        check_speaker_names(scan_corpus(tmp_path))


@pytest.mark.corpus
def test_load_speakers_names_a_speaker_folder_without_audio(
    corpus_root: Path, corpus_speakers: list[dict[str, str]], tmp_path: Path
) -> None:
    from monitor.corpus.jobs import CorpusJob
    from monitor.corpus.speakers import load_speakers
    from monitor.features.extract import FeatureCache

    root = tmp_path / "corpus"
    for row in corpus_speakers[:2]:
        (root / row["speaker"]).mkdir(parents=True)
        for source in sorted((corpus_root / row["speaker"]).glob("*.flac"))[:2]:
            (root / row["speaker"] / source.name).symlink_to(source)
    (root / "silent").mkdir()
    (root / "silent" / "notes.txt").write_text("no recording yet")
    loaded = load_speakers(
        root, features=("f0",), job=CorpusJob(cache=FeatureCache(tmp_path / "cache"))
    )
    assert len(loaded.speakers) == 2
    assert ("speaker silent", "no audio file in its folder") in loaded.skipped
