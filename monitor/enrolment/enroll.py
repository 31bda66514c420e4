"""Enrolment: turn a speaker corpus into one template per speaker and feature in the store.

Each audio file is read and observed once for all features (``extract_many`` with its on-disk
cache); a speaker's template is the feature's own pool of the first K usable utterances, or of
the fewest first utterances that reach S seconds of speech. With S, files are extracted in
rounds — a first utterance per speaker, then as many as the observed speech rate says are still
needed — so no more audio is processed than the templates use. Every file or speaker left out
is reported with its reason; nothing is dropped silently. All templates are written in one
transaction: an interrupted enrolment leaves the database as it was.

The steps of :func:`enroll_corpus`: check the request (:class:`_Request`), extract in rounds
(:class:`_Rounds`), pool each speaker's templates (:func:`_enrolments`), then write them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import numpy as np

from monitor.corpus import Corpus, check_speaker_names
from monitor.corpus.duplicates import find_duplicates, fingerprint, warn_duplicates
from monitor.corpus.jobs import DEFAULT_JOB, MIN_SPEECH_SECONDS, CorpusJob
from monitor.enrolment.live import pool_kept
from monitor.errors import InputError
from monitor.features.base import FEATURE_NAMES, Observation
from monitor.features.extract import FileFeatures, extract_many
from monitor.protect.mcadams import Alpha
from monitor.store.database import Store
from monitor.store.templates import LOCAL_PROFILE_FEATURE, Enrolment

__all__ = [
    "METADATA_COLUMNS",
    "MIN_SPEECH_SECONDS",
    "EnrolledSpeaker",
    "EnrolmentReport",
    "enroll_corpus",
]

METADATA_COLUMNS = ("gender", "age", "original_split")
"""The only speakers.tsv columns stored with an identity: any other column (a name, an e-mail)
stays out of the database."""


@dataclass(frozen=True)
class EnrolledSpeaker:
    """One enrolled identity: which files went into its templates."""

    alias: str
    files: tuple[str, ...]
    speech_seconds: float
    short: bool  # fewer utterances / seconds than asked for: enrolled with what there was


@dataclass(frozen=True)
class EnrolmentReport:
    """What ``enroll_corpus`` did, including everything it left out and why."""

    enrolled: tuple[EnrolledSpeaker, ...]
    skipped_files: tuple[tuple[str, str], ...]  # (path, reason)
    skipped_speakers: tuple[tuple[str, str], ...]  # (alias, reason)
    partial_files: tuple[tuple[str, str], ...]  # (path, features it lacked): used for the rest
    local_profiles: tuple[str, ...]
    features: tuple[str, ...]
    files_extracted: int  # files processed (from cache or extracted)
    cache_hits: int


def _empty_features(result: FileFeatures, features: Sequence[str]) -> list[str]:
    """Features whose observation of this file carries no evidence (no counts, zero vector)."""
    return [f for f in features if not np.any(result.observations[f].values != 0)]


def _file_problem(
    result: FileFeatures, features: Sequence[str], min_speech_seconds: float = MIN_SPEECH_SECONDS
) -> str | None:
    """Why a file cannot go into any template, or None if it can (it may still lack some
    features: those are left out of that feature's template only)."""
    if result.speech_seconds < min_speech_seconds:
        return (
            f"too little speech ({result.speech_seconds:.2f} s after VAD, "
            f"minimum {min_speech_seconds:g} s)"
        )
    if len(_empty_features(result, features)) == len(features):
        return "speech gives no evidence for any feature"
    return None


def _pool_kept(feature: str, results: Sequence[FileFeatures]) -> Observation:
    """The feature's pool over the files that carry evidence for it (the same pool a live
    enrolment makes of its windows, :func:`monitor.enrolment.live.pool_kept`)."""
    return pool_kept(feature, [r.observations[feature] for r in results])


@dataclass
class _Speaker:
    """Enrolment state of one speaker across extraction rounds."""

    alias: str
    paths: list[str]  # all readable files, in corpus order
    next_index: int = 0  # first file not yet asked for
    usable: list[FileFeatures] | None = None

    def remaining(self) -> int:
        return len(self.paths) - self.next_index

    def take(self, count: int) -> list[str]:
        chosen = self.paths[self.next_index : self.next_index + max(0, count)]
        self.next_index += len(chosen)
        return chosen


def _selection(
    usable: list[FileFeatures], *, utterances: int | None, seconds: float | None
) -> tuple[list[FileFeatures], bool]:
    """The first usable files that satisfy the request, and whether the request is met."""
    if utterances is not None:
        return usable[:utterances], len(usable) >= utterances
    if seconds is not None:
        cumulative = np.cumsum([u.speech_seconds for u in usable])
        reached = np.flatnonzero(cumulative >= seconds)
        if reached.size:
            return usable[: int(reached[0]) + 1], True
        return usable, False
    return usable, True


@dataclass(frozen=True)
class _Request:
    """What an enrolment asks for, checked once (``ValueError`` naming the bad option)."""

    names: tuple[str, ...]
    utterances: int | None
    seconds: float | None
    min_speech_seconds: float

    @classmethod
    def checked(
        cls,
        features: Sequence[str],
        utterances: int | None,
        seconds: float | None,
        local: bool,
        min_speech_seconds: float,
    ) -> _Request:
        names = tuple(dict.fromkeys(features))
        if not names:
            raise ValueError("features: at least one feature is needed")
        if utterances is not None and seconds is not None:
            raise ValueError("give utterances or seconds, not both")
        if utterances is not None and utterances < 1:
            raise ValueError(f"utterances must be ≥ 1, got {utterances}")
        if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"seconds must be a positive number, got {seconds}")
        if local and LOCAL_PROFILE_FEATURE not in names:
            raise ValueError(f"local profiles need the {LOCAL_PROFILE_FEATURE!r} feature")
        if not (math.isfinite(min_speech_seconds) and min_speech_seconds >= 0):
            raise ValueError(f"min_speech_seconds must be >= 0, got {min_speech_seconds}")
        return cls(names, utterances, seconds, min_speech_seconds)

    def problem(self, result: FileFeatures) -> str | None:
        return _file_problem(result, self.names, self.min_speech_seconds)

    def selection(self, usable: list[FileFeatures]) -> tuple[list[FileFeatures], bool]:
        return _selection(usable, utterances=self.utterances, seconds=self.seconds)

    def first_round(self, speaker: _Speaker) -> list[str]:
        """K files, or one file (S), or everything."""
        if self.utterances is not None:
            return speaker.take(self.utterances)
        return speaker.take(1 if self.seconds else len(speaker.paths))

    def still_needed(self, usable: list[FileFeatures], mean_speech: float) -> int:
        """Files to ask for next for a speaker whose usable files do not meet the request."""
        if self.utterances is not None:
            return self.utterances - len(usable)
        missing = float(self.seconds or 0.0) - sum(u.speech_seconds for u in usable)
        return max(1, math.ceil(missing / max(mean_speech, self.min_speech_seconds, 0.1)))


@dataclass
class _Rounds:
    """Extraction in rounds until every speaker's request is met or its files run out."""

    request: _Request
    speakers: dict[str, _Speaker]
    job: CorpusJob
    skipped_files: list[tuple[str, str]]
    partial_files: list[tuple[str, str]] = field(default_factory=list)
    results: dict[str, FileFeatures] = field(default_factory=dict)
    done: int = 0
    total: int = 0
    hits: int = 0

    def run(self) -> None:
        wanted = {alias: self.request.first_round(s) for alias, s in self.speakers.items()}
        while any(wanted.values()):
            self._extract([p for chosen in wanted.values() for p in chosen])
            wanted = self._next_round()

    def _tick(self, _done: int, _total: int, path: str) -> None:
        """``job.progress`` over all rounds: its total grows when a later round needs more."""
        self.done += 1
        if self.job.progress is not None:
            self.job.progress(self.done, self.total, path)

    def _extract(self, paths: list[str]) -> None:
        """One round: extract ``paths`` and sort the files into usable, partial and skipped."""
        self.total += len(paths)
        extraction = extract_many(
            paths,
            self.job.cache,
            features=self.request.names,
            jobs=self.job.jobs,
            scheduler=self.job.scheduler,
            progress=self._tick,
        )
        self.hits += sum(r.cached for r in extraction.files.values())
        self.results.update(extraction.files)
        self.skipped_files += [
            (p, getattr(e, "problem", str(e))) for p, e in extraction.errors.items()
        ]
        for path, result in extraction.files.items():
            reason = self.request.problem(result)
            if reason is not None:
                self.skipped_files.append((path, reason))
            elif empty := _empty_features(result, self.request.names):
                self.partial_files.append(
                    (path, f"no {'/'.join(empty)} evidence: used for the rest")
                )

    def _next_round(self) -> dict[str, list[str]]:
        """Each speaker's usable files so far, and the files still needed from it."""
        problem = self.request.problem
        speech_rates = [r.speech_seconds for r in self.results.values() if problem(r) is None]
        mean_speech = float(np.mean(speech_rates)) if speech_rates else 1.0
        wanted = {}
        for alias, speaker in self.speakers.items():
            usable = [
                self.results[p]
                for p in speaker.paths[: speaker.next_index]
                if p in self.results and problem(self.results[p]) is None
            ]
            speaker.usable = usable
            _, met = self.request.selection(usable)
            if met or not speaker.remaining():
                continue
            wanted[alias] = speaker.take(self.request.still_needed(usable, mean_speech))
        return wanted


def _enrolments(
    request: _Request, speakers: dict[str, _Speaker], corpus: Corpus, local: bool
) -> tuple[list[Enrolment], list[EnrolledSpeaker], list[tuple[str, str]]]:
    """Each speaker's templates pooled from its selected files; speakers with none skipped."""
    enrolments: list[Enrolment] = []
    enrolled: list[EnrolledSpeaker] = []
    skipped_speakers: list[tuple[str, str]] = []
    for alias, speaker in speakers.items():
        chosen, met = request.selection(speaker.usable or [])
        if not chosen:
            tried = speaker.next_index
            skipped_speakers.append((alias, f"no usable speech in {tried} file(s)"))
            continue
        templates = {name: _pool_kept(name, chosen) for name in request.names}
        row = corpus.metadata.get(alias, {})
        metadata = {k: row[k] for k in METADATA_COLUMNS if k in row}
        metadata["corpus"] = corpus.root.name
        enrolments.append(
            Enrolment(alias, templates, metadata, local_profile=alias if local else None)
        )
        enrolled.append(
            EnrolledSpeaker(
                alias=alias,
                files=tuple(r.path for r in chosen),
                speech_seconds=float(sum(r.speech_seconds for r in chosen)),
                short=not met,
            )
        )
    return enrolments, enrolled, skipped_speakers


def _warn_duplicates(enrolled: list[EnrolledSpeaker], results: dict[str, FileFeatures]) -> None:
    fingerprints = (
        (speaker.alias, path, fingerprint(results[path].observations, results[path].speech_seconds))
        for speaker in enrolled
        for path in speaker.files
    )
    warn_duplicates(find_duplicates(fingerprints), within_speaker_matters=False)


def _with_variant(
    enrolments: list[Enrolment], templates: dict[str, Observation], name: str, model: str
) -> list[Enrolment]:
    """Each enrolment with its variant template ``name`` added (the same files transformed,
    :mod:`monitor.enrolment.variants`), recorded as made by ``model``."""
    return [
        dataclasses.replace(
            e,
            observations={**e.observations, name: templates[e.alias]},
            models={**(e.models or {}), name: model},
        )
        if e.alias in templates
        else e
        for e in enrolments
    ]


def with_narrow(
    enrolments: list[Enrolment], files: Mapping[str, Sequence[str]], job: CorpusJob = DEFAULT_JOB
) -> list[Enrolment]:
    """Each enrolment with the narrow-band template of its ``files`` added (what ``enroll``
    stores by default; benchmarks that pool their own templates call this)."""
    from monitor.enrolment.variants import narrow_model, narrow_name, narrow_templates
    from monitor.store.templates import current_model

    copies = narrow_templates(files, job)
    model = narrow_model(current_model("embedding"))
    return _with_variant(enrolments, copies, narrow_name(), model)


def with_room(
    enrolments: list[Enrolment], files: Mapping[str, Sequence[str]], job: CorpusJob = DEFAULT_JOB
) -> list[Enrolment]:
    """Each enrolment with the far-field template of its ``files`` added (the same files in
    seeded synthetic rooms, :mod:`monitor.audio.reverb`): what ``enroll --local`` stores by
    default for the tracker."""
    from monitor.enrolment.variants import room_model, room_name, room_templates
    from monitor.store.templates import current_model

    copies = room_templates(files, job)
    model = room_model(current_model("embedding"))
    return _with_variant(enrolments, copies, room_name(), model)


def _with_variants(
    enrolments: list[Enrolment],
    enrolled: list[EnrolledSpeaker],
    *,
    alpha: Alpha | None,
    narrow: bool,
    room: bool,
    job: CorpusJob,
) -> list[Enrolment]:
    """The lazy-informed (``alpha``), narrow-band (``narrow``) and far-field (``room``)
    embedding templates added."""
    from monitor.store.templates import current_model

    files = {s.alias: s.files for s in enrolled}
    embedding = current_model("embedding")
    if alpha is not None:
        from monitor.enrolment.lazy import lazy_name, lazy_templates

        lazy = lazy_templates(files, alpha, job)
        enrolments = _with_variant(enrolments, lazy, lazy_name(), f"{embedding}+mcadams({alpha})")
    if narrow:
        enrolments = with_narrow(enrolments, files, job)
    if room:
        enrolments = with_room(enrolments, files, job)
    return enrolments


def enroll_corpus(
    store: Store,
    corpus: Corpus,
    *,
    features: Sequence[str] = FEATURE_NAMES,
    utterances: int | None = None,
    seconds: float | None = None,
    local: bool = False,
    job: CorpusJob = DEFAULT_JOB,
    protect: Alpha | None = None,
    narrow: bool = False,
    room: bool = False,
) -> EnrolmentReport:
    """Enrol every speaker of ``corpus`` into ``store`` (replacing their old templates).

    ``utterances`` = K first usable utterances, or ``seconds`` = first S seconds of speech
    (at most one; neither means every utterance). ``local`` also registers each speaker as a
    device user (local profile) under the same alias. A file needs ``job.min_speech_seconds`` of
    speech and evidence for at least one feature; a feature it lacks is left out of that
    feature's template only. Raises ``ValueError`` for bad options, ``InputError`` for a
    speaker folder that is not a valid alias (before any extraction) or when no speaker has
    usable speech. ``protect``: also store each speaker's lazy-informed embedding template
    (the same files anonymised by McAdams with this α, :mod:`monitor.enrolment.lazy`). ``narrow``:
    also store each speaker's narrow-band embedding template (``embedding+narrow``: the same
    files as an 8 kHz device delivers them, :mod:`monitor.enrolment.variants`), which the daemon
    tracks and scores a narrow-band stream against. ``room``: also store each speaker's
    far-field template (``embedding+room``: the same files in synthetic reverberant rooms),
    which the tracker matches a member's far-field windows with.
    """
    request = _Request.checked(features, utterances, seconds, local, job.min_speech_seconds)
    check_speaker_names(corpus)
    speakers = _speakers_of(corpus)
    skipped_files = [(str(p), reason) for p, reason in corpus.unreadable]
    rounds = _Rounds(request, speakers, job, skipped_files)
    rounds.run()
    enrolments, enrolled, skipped_speakers = _enrolments(request, speakers, corpus, local)
    skipped_speakers += _speakers_without_audio(corpus, speakers)
    if not enrolments:
        _nothing_enrolled(corpus, skipped_files)
    _warn_duplicates(enrolled, rounds.results)
    if "embedding" in request.names and (protect is not None or narrow or room):
        enrolments = _with_variants(
            enrolments, enrolled, alpha=protect, narrow=narrow, room=room, job=job
        )
    store.bulk_replace_templates(enrolments)
    return EnrolmentReport(
        enrolled=tuple(enrolled),
        skipped_files=tuple(skipped_files),
        skipped_speakers=tuple(skipped_speakers),
        partial_files=tuple(rounds.partial_files),
        local_profiles=tuple(e.alias for e in enrolled) if local else (),
        features=request.names,
        files_extracted=rounds.done,
        cache_hits=rounds.hits,
    )


def _speakers_of(corpus: Corpus) -> dict[str, _Speaker]:
    """Every speaker of the corpus with the paths of its utterances, in corpus order."""
    return {
        alias: _Speaker(alias, [str(u.path) for u in corpus.utterances_of(alias)])
        for alias in corpus.speakers
    }


def _speakers_without_audio(
    corpus: Corpus, speakers: Mapping[str, _Speaker]
) -> list[tuple[str, str]]:
    """Speaker folders that held no file to extract: every file unreadable, or none at all."""
    unreadable_only = sorted({Path(p).parent.name for p, _ in corpus.unreadable} - set(speakers))
    skipped = [(alias, "no readable audio file") for alias in unreadable_only]
    skipped += [(alias, "no audio file in its folder") for alias in corpus.empty_speakers]
    return skipped


def _nothing_enrolled(corpus: Corpus, skipped_files: Sequence[tuple[str, str]]) -> NoReturn:
    """No speaker had usable speech: one line naming the corpus and a file skipped, and why."""
    example = f"; e.g. {skipped_files[0][0]}: {skipped_files[0][1]}" if skipped_files else ""
    raise InputError(
        str(corpus.root),
        f"no speaker has usable speech; nothing enrolled ({len(skipped_files)} files "
        f"skipped{example})",
    )
