"""A corpus's speakers as per-utterance observations, ready for the trial protocol.

:func:`load_speakers` scans a corpus, extracts (or reads from the feature cache) every file and
groups the usable utterances by speaker, listing everything left out and why.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from monitor.corpus.duplicates import find_duplicates, fingerprint, warn_duplicates
from monitor.corpus.jobs import DEFAULT_JOB, MIN_SPEECH_SECONDS, CorpusJob
from monitor.corpus.scan import scan_corpus
from monitor.errors import InputError

__all__ = [
    "MIN_SPEECH_SECONDS",
    "CorpusSpeakers",
    "SpeakerUtterances",
    "load_speakers",
    "usable_observation",
]


@dataclass(frozen=True)
class SpeakerUtterances:
    """One speaker's usable utterances in corpus order, with per-feature observations.

    ``speech_seconds`` (K,) is the speech behind each utterance (segment lengths);
    ``values[f]`` (K, D_f) and ``weights[f]`` (K,) are the observations' values and seconds.
    """

    alias: str
    utterances: tuple[str, ...]
    speech_seconds: np.ndarray
    values: Mapping[str, np.ndarray]
    weights: Mapping[str, np.ndarray]

    def __post_init__(self) -> None:
        K = len(self.utterances)
        seconds = np.asarray(self.speech_seconds, dtype=np.float64)
        if seconds.shape != (K,):
            raise ValueError(f"{self.alias}: speech_seconds shape {seconds.shape} != ({K},)")
        object.__setattr__(self, "speech_seconds", seconds)
        for name, matrix in self.values.items():
            if np.shape(matrix)[0] != K or np.shape(self.weights[name]) != (K,):
                raise ValueError(f"{self.alias}: {name} observations do not match {K} utterances")

    @property
    def total_seconds(self) -> float:
        return float(self.speech_seconds.sum())


@dataclass(frozen=True)
class CorpusSpeakers:
    """Speakers of a corpus ready for :func:`score_trials`, plus everything left out and why."""

    root: str
    split: str | None
    speakers: tuple[SpeakerUtterances, ...]
    skipped: tuple[tuple[str, str], ...]  # (file or speaker, reason)
    files: int  # audio files found (readable or not)


def usable_observation(values: np.ndarray) -> bool:
    """An observation carries evidence: some counts (histograms) or a non-zero embedding.
    An empty one cannot be normalised into a distribution or a direction, so it is skipped."""
    return bool(np.any(values != 0))


def load_speakers(
    root: str | Path,
    *,
    split: str | None = None,
    features: Sequence[str],
    job: CorpusJob = DEFAULT_JOB,
) -> CorpusSpeakers:
    """Scan ``root``, extract (or read from ``job.cache``) every file, group by speaker.

    Files that cannot be read, utterances with less than ``job.min_speech_seconds`` of speech or
    with no evidence for any feature, and speakers left with fewer than 2 utterances are
    skipped and listed. An utterance empty for some features only is kept: its empty
    observations pool as nothing. Raises ``InputError`` when no speaker remains.
    """
    from monitor.features.extract import extract_many

    # abspath folds "a/../b" (unlike Path.absolute) but keeps symlinks (unlike resolve), so
    # "../corpus" and "/abs/corpus" share one set of FeatureCache entries.
    corpus = scan_corpus(os.path.abspath(root), split=split)
    extraction = extract_many(
        corpus.paths,
        job.cache,
        features=tuple(features),
        jobs=job.jobs,
        scheduler=job.scheduler,
        progress=job.progress,
    )
    skipped = _skipped_before_speakers(corpus, extraction)
    speakers: list[SpeakerUtterances] = []
    fingerprints: list[tuple[str, str, bytes]] = []
    for alias in corpus.speakers:
        kept = _usable_utterances(
            corpus.utterances_of(alias),
            extraction.files,
            alias=alias,
            features=features,
            min_speech_seconds=job.min_speech_seconds,
            skipped=skipped,
            fingerprints=fingerprints,
        )
        if kept is not None:
            speakers.append(_speaker(alias, kept, features))
    if not speakers:
        raise InputError(
            str(corpus.root),
            f"no speaker has 2 or more utterances with usable speech ({len(skipped)} skipped)",
        )
    warn_duplicates(find_duplicates(fingerprints), within_speaker_matters=True)
    return CorpusSpeakers(
        root=str(corpus.root),
        split=split,
        speakers=tuple(speakers),
        skipped=tuple(skipped),
        files=len(corpus.utterances) + len(corpus.unreadable),
    )


def _usable_utterances(
    utterances: Iterable[Any],
    files: Mapping[str, Any],
    *,
    alias: str,
    features: Sequence[str],
    min_speech_seconds: float,
    skipped: list[tuple[str, str]],
    fingerprints: list[tuple[str, str, bytes]],
) -> list[tuple[str, Any]] | None:
    """(stem, extraction) of the speaker's utterances with enough speech and some evidence,
    None when fewer than 2 remain; the others go to ``skipped`` with why, the kept ones'
    fingerprints to ``fingerprints`` (duplicates are looked for across the whole corpus)."""
    kept: list[tuple[str, Any]] = []
    for utterance in utterances:
        result = files.get(str(utterance.path))
        if result is None:
            continue
        if result.speech_seconds < min_speech_seconds:
            skipped.append(
                (
                    str(utterance.path),
                    f"too little speech ({result.speech_seconds:.2f} s, "
                    f"minimum {min_speech_seconds:g} s)",
                )
            )
            continue
        empty = [f for f in features if not usable_observation(result.observations[f].values)]
        if len(empty) == len(features):
            skipped.append((str(utterance.path), f"empty {', '.join(empty)} observation"))
            continue
        # An empty observation of one feature pools as nothing (zero counts, zero
        # vector): the utterance still serves the other features.
        kept.append((utterance.path.stem, result))
        fingerprints.append(
            (
                alias,
                str(utterance.path),
                fingerprint(result.observations, result.speech_seconds),
            )
        )
    if len(kept) < 2:
        skipped.append(
            (f"speaker {alias}", f"only {len(kept)} usable utterance(s); 2 or more needed")
        )
        return None
    return kept


def _skipped_before_speakers(corpus: Any, extraction: Any) -> list[tuple[str, str]]:
    """What the scan and the extraction left out: unreadable files, empty speaker folders,
    files the extraction failed on."""
    skipped: list[tuple[str, str]] = [(str(path), reason) for path, reason in corpus.unreadable]
    skipped += [
        (f"speaker {name}", "no audio file in its folder") for name in corpus.empty_speakers
    ]
    skipped += [(path, error.problem) for path, error in extraction.errors.items()]
    return skipped


def _speaker(
    alias: str, kept: Sequence[tuple[str, Any]], features: Sequence[str]
) -> SpeakerUtterances:
    """One speaker's kept utterances stacked into per-feature matrices, in corpus order."""
    return SpeakerUtterances(
        alias=alias,
        utterances=tuple(stem for stem, _ in kept),
        speech_seconds=np.array([r.speech_seconds for _, r in kept]),
        values={f: np.stack([r.observations[f].values for _, r in kept]) for f in features},
        weights={f: np.array([r.observations[f].seconds for _, r in kept]) for f in features},
    )
