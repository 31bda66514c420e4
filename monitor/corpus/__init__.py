"""A speaker corpus on disk: scanning folders and speakers.tsv (:mod:`.scan`), and its speakers'
observations for the trial protocol (:mod:`.speakers`, imported on its own: it pulls in the
feature extractors)."""

from monitor.corpus.scan import (
    AUDIO_SUFFIXES,
    METADATA_FILE,
    Corpus,
    Utterance,
    alias_problem,
    check_speaker_names,
    read_metadata,
    scan_corpus,
)

__all__ = [
    "AUDIO_SUFFIXES",
    "METADATA_FILE",
    "Corpus",
    "Utterance",
    "alias_problem",
    "check_speaker_names",
    "read_metadata",
    "scan_corpus",
]
