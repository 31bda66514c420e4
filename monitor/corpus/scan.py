"""A speaker corpus on disk: ``<root>/<speaker>/<utterance>.<audio>`` plus optional metadata.

``<audio>`` is any of :data:`AUDIO_SUFFIXES` (what soundfile reads: WAV, FLAC, Ogg, MP3).

``speakers.tsv`` at the root (tab-separated, header row, a ``speaker`` column; speechocean762
adds ``gender``, ``age``, ``original_split``) describes the speakers. Scanning reads only the
headers of the audio files: a file that cannot even be opened as audio is listed in
``Corpus.unreadable`` with the reason, never dropped without a word.
"""

from __future__ import annotations

import csv
import io
import os
import unicodedata
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import soundfile as sf

from monitor.errors import InputError

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3")
"""File name endings (any case) read as utterances; other files in a speaker folder are ignored."""
METADATA_FILE = "speakers.tsv"


@dataclass(frozen=True)
class Utterance:
    """One audio file of one speaker."""

    speaker: str
    path: Path  # absolute


@dataclass(frozen=True)
class Corpus:
    """Speakers (sorted), their readable utterances (sorted by speaker, then file name)."""

    root: Path
    speakers: tuple[str, ...]
    utterances: tuple[Utterance, ...]
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)  # speaker -> column -> value
    unreadable: tuple[tuple[Path, str], ...] = ()  # (file, reason)
    empty_speakers: tuple[str, ...] = ()  # speaker folders holding no audio file at all

    @cached_property
    def _by_speaker(self) -> dict[str, tuple[Utterance, ...]]:
        grouped: dict[str, list[Utterance]] = {}
        for utterance in self.utterances:
            grouped.setdefault(utterance.speaker, []).append(utterance)
        return {speaker: tuple(items) for speaker, items in grouped.items()}

    def utterances_of(self, speaker: str) -> tuple[Utterance, ...]:
        """The utterances of ``speaker``, in file-name order (empty for an unknown speaker)."""
        return self._by_speaker.get(speaker, ())

    @property
    def paths(self) -> list[Path]:
        """Every readable utterance's path, in corpus order."""
        return [u.path for u in self.utterances]


def read_metadata(path: Path) -> dict[str, dict[str, str]]:
    """Rows of a speakers.tsv keyed by speaker; a malformed row raises InputError with its line."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(str(path), f"cannot read speaker metadata ({exc})") from exc
    try:
        # utf-8-sig: a spreadsheet's "UTF-8 with BOM" export reads like plain UTF-8
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            str(path),
            f"not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as UTF-8",
            line=data.count(b"\n", 0, exc.start) + 1,
        ) from exc
    rows = list(csv.reader(io.StringIO(text, newline=""), delimiter="\t"))
    header = [name.strip() for name in rows[0]] if rows else []
    if "speaker" not in header:
        raise InputError(str(path), "header must name a 'speaker' column", line=1)
    if len(set(header)) != len(header):
        twice = sorted({name for name in header if header.count(name) > 1})
        raise InputError(str(path), f"header names column(s) {twice} twice", line=1)
    metadata: dict[str, dict[str, str]] = {}
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise InputError(
                str(path),
                f"expected {len(header)} tab-separated fields, got {len(row)}",
                line=number,
            )
        record = dict(zip(header, (cell.strip() for cell in row), strict=True))
        speaker = record["speaker"]
        if speaker in metadata:
            raise InputError(str(path), f"speaker {speaker!r} listed twice", line=number)
        metadata[speaker] = record
    return metadata


def _nfc(name: str) -> str:
    """A name as compared between speakers.tsv and folders: a file system (macOS) or editor may
    store "José" with a combining accent, the other side precomposed."""
    return unicodedata.normalize("NFC", name)


def _probe(path: Path) -> str | None:
    """Why ``path`` cannot be opened as audio, or None if its header reads."""
    try:
        if path.stat().st_size == 0:
            return "empty file (0 bytes)"
        info = sf.info(str(path))
    except (OSError, RuntimeError, sf.LibsndfileError) as exc:
        return f"not readable as audio ({exc})"
    if info.frames <= 0:
        return "no audio samples"
    return None


def alias_problem(name: str) -> str | None:
    """Why a speaker folder's name cannot be an identity alias, or None if it can.

    Aliases appear in the database, logs, metrics and MQTT topics: no outer spaces (two
    folders would look alike), no control characters (they forge terminal and log lines).
    """
    if not name.strip():
        return "is blank"
    if name != name.strip():
        return "has leading or trailing spaces"
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in name):
        return "contains a control character"
    return None


def check_speaker_names(corpus: Corpus) -> None:
    """InputError naming the first speaker folder that is not a valid alias (see
    :func:`alias_problem`), so that enrolment stops before any audio is processed."""
    seen: dict[str, str] = {}
    for speaker in corpus.speakers:
        problem = alias_problem(speaker)
        if problem is not None:
            raise InputError(
                str(corpus.root), f"speaker folder {speaker!r} {problem}; rename the folder"
            )
        twin = seen.setdefault(unicodedata.normalize("NFC", speaker), speaker)
        if twin != speaker:  # e.g. "José" precomposed and with a combining accent
            raise InputError(
                str(corpus.root),
                f"speaker folders {twin!a} and {speaker!a} differ only in Unicode "
                "normalisation and would look alike; rename one",
            )


def scan_corpus(root: str | os.PathLike[str], *, split: str | None = None) -> Corpus:
    """The corpus under ``root``; ``split`` keeps speakers whose ``original_split`` matches.

    Raises InputError when ``root`` is not a directory, the metadata is malformed, ``split`` is
    given without an ``original_split`` column, no readable utterance remains, or a speaker's
    folder name cannot be an alias (:func:`check_speaker_names`: enrol, calibrate, evaluate
    and every other command apply the same rule, before any audio is processed).
    """
    base = Path(root).absolute()
    if not base.is_dir():
        raise InputError(str(base), "corpus root is not a directory")
    metadata_path = base / METADATA_FILE
    metadata = read_metadata(metadata_path) if metadata_path.is_file() else {}

    allowed = _split_speakers(metadata, metadata_path, split)

    utterances: list[Utterance] = []
    unreadable: list[tuple[Path, str]] = []
    empty: list[str] = []
    try:
        folders = sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as exc:
        raise InputError(str(base), f"cannot list the corpus ({exc.strerror or exc})") from exc
    for folder in folders:
        if allowed is not None and _nfc(folder.name) not in allowed:
            continue
        try:
            entries = sorted(folder.iterdir())
        except OSError as exc:  # e.g. a speaker folder without read permission: listed, not lost
            unreadable.append((folder, f"cannot list the folder ({exc.strerror or exc})"))
            continue
        audio = [path for path in entries if path.suffix.lower() in AUDIO_SUFFIXES]
        if not audio:  # named, so that a speaker never silently vanishes from the counts
            empty.append(folder.name)
        for path in audio:
            problem = _unreadable_file(path)
            if problem == "":
                continue
            if problem is None:
                utterances.append(Utterance(folder.name, path))
            else:
                unreadable.append((path, problem))
    if not utterances:
        where = f" in split {split!r}" if split is not None else ""
        suffixes = "|".join(suffix[1:] for suffix in AUDIO_SUFFIXES)
        raise InputError(str(base), f"no readable <speaker>/<utterance>.{suffixes} files{where}")
    speakers = tuple(sorted({u.speaker for u in utterances}))
    by_name = {_nfc(s): row for s, row in metadata.items()}
    corpus = Corpus(
        root=base,
        speakers=speakers,
        utterances=tuple(utterances),
        metadata={s: by_name[_nfc(s)] for s in speakers if _nfc(s) in by_name},
        unreadable=tuple(unreadable),
        empty_speakers=tuple(empty),
    )
    check_speaker_names(corpus)  # one rule for every command that reads a corpus
    return corpus


def _split_speakers(
    metadata: dict[str, dict[str, str]], metadata_path: Path, split: str | None
) -> set[str] | None:
    """The speakers of ``split`` by their metadata (NFC names); None when no split is asked."""
    allowed: set[str] | None = None
    if split is not None:
        if not metadata:
            raise InputError(str(metadata_path), f"split {split!r} needs speaker metadata")
        if "original_split" not in next(iter(metadata.values())):
            raise InputError(str(metadata_path), "no 'original_split' column to select a split")
        allowed = {_nfc(s) for s, row in metadata.items() if row["original_split"] == split}
        if not allowed:
            known = sorted({row["original_split"] for row in metadata.values()})
            raise InputError(str(metadata_path), f"no speaker in split {split!r} (known: {known})")
    return allowed


def _unreadable_file(path: Path) -> str | None:
    """Why an audio file of a speaker folder cannot be read; None when it can, "" for a folder
    named like audio (skipped, not reported)."""
    if path.is_symlink() and not path.exists():
        return "broken symbolic link"
    if path.is_dir():
        return ""
    if not path.is_file():  # a FIFO would block the scan, a device never end
        return "not a regular file (a device, pipe or socket)"
    return _probe(path)
