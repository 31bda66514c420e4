"""Variants of an identity's embedding template, made at enrolment where the audio is at hand
(voxmeter never stores audio): the template of the same files after a transformation, stored as
the feature ``embedding`` plus a suffix beside the clean template.

- ``embedding+mcadams``: the files anonymised (``enroll --protect``, :mod:`monitor.enrolment.lazy`);
- ``embedding+narrow``: the files band-limited as an 8 kHz device delivers them
  (:func:`monitor.audio.band.band_limit`): the daemon scores and tracks a narrow-band stream
  against these.

Each copy is written as 16 kHz FLAC into a temporary folder (deleted before the function
returns), extracted like any file, and pooled per speaker as the clean template is.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from monitor.corpus.jobs import DEFAULT_JOB, CorpusJob
from monitor.features.base import Observation, get_feature

FEATURE = "embedding"
NARROW_SUFFIX = "+narrow"
"""A narrow-band template is stored as the feature's name plus this (``embedding+narrow``)."""

CopyFile = Callable[[Path, Path, int], None]
"""copy(source, destination, index): write the transformed copy of one file (index: its place
in speaker then file order, for seeded per-file draws)."""


def narrow_name(feature: str = FEATURE) -> str:
    return f"{feature}{NARROW_SUFFIX}"


def narrow_model(embedding_model: str) -> str:
    """The model recorded for a narrow-band template: the embedding's version plus the band."""
    return f"{embedding_model}{NARROW_SUFFIX}"


def variant_templates(
    files: Mapping[str, Sequence[str]],
    copy: CopyFile,
    name: str,
    job: CorpusJob = DEFAULT_JOB,
    *,
    prefix: str = "voxmeter-variant-",
) -> dict[str, Observation]:
    """Speaker → the embedding template (feature ``name``) of its ``files`` transformed by
    ``copy``; a speaker none of whose copies gives an embedding is left out. Only where
    ``job`` runs is used: the copies are temporary (never cached), their progress not told."""
    from monitor.features.extract import extract_many

    ordered = [(alias, Path(path)) for alias, paths in files.items() for path in paths]
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        copies: dict[str, list[str]] = {}
        for index, (alias, path) in enumerate(ordered):
            destination = Path(scratch) / alias / f"{index:06d}-{path.stem}.flac"
            copy(path, destination, index)
            copies.setdefault(alias, []).append(str(destination))
        extraction = extract_many(
            [p for paths in copies.values() for p in paths],
            None,  # temporary files: nothing to key a cache entry on afterwards
            features=(FEATURE,),
            jobs=job.jobs,
            scheduler=job.scheduler,
        )
    templates: dict[str, Observation] = {}
    for alias, paths in copies.items():
        results = [extraction.files[p] for p in paths if p in extraction.files]
        kept = [o for o in (r.observations[FEATURE] for r in results) if np.any(o.values != 0)]
        if kept:
            pooled = get_feature(FEATURE).pool(kept)
            templates[alias] = dataclasses.replace(pooled, feature=name)
    return templates


def _write_changed(
    source: Path, destination: Path, change: Callable[[np.ndarray], np.ndarray]
) -> None:
    """``source`` read at the model's rate, changed, written as 16 kHz 16-bit FLAC: the one
    way every variant's audio reaches the extractor (a temporary folder, deleted after)."""
    import soundfile

    from monitor.audio.file import read_audio
    from monitor.audio.frames import RATE_HZ

    audio, _ = read_audio(source)
    out = np.clip(change(audio), -1.0, 1.0)
    destination.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(destination, out, RATE_HZ, subtype="PCM_16", format="FLAC")


def narrow_file(source: Path, destination: Path, _index: int = 0) -> None:
    """One audio file band-limited as an 8 kHz device delivers it (16 kHz FLAC, 16-bit)."""
    from monitor.audio.band import band_limit
    from monitor.audio.frames import RATE_HZ

    _write_changed(source, destination, lambda audio: band_limit(audio, RATE_HZ))


def narrow_templates(
    files: Mapping[str, Sequence[str]], job: CorpusJob = DEFAULT_JOB
) -> dict[str, Observation]:
    """Speaker → the ``embedding+narrow`` template of its ``files`` band-limited."""
    return variant_templates(files, narrow_file, narrow_name(), job, prefix="voxmeter-narrow-")


ROOM_SUFFIX = "+room"
"""A far-field template is stored as the feature's name plus this (``embedding+room``)."""


def room_name(feature: str = FEATURE) -> str:
    return f"{feature}{ROOM_SUFFIX}"


def room_model(embedding_model: str) -> str:
    """The model recorded for a far-field template: the embedding's version plus the rooms."""
    return f"{embedding_model}{ROOM_SUFFIX}"


def room_file(source: Path, destination: Path, index: int) -> None:
    """One audio file heard in the ``index``-th seeded synthetic room (16 kHz FLAC, 16-bit)."""
    from monitor.audio.reverb import in_a_room

    _write_changed(source, destination, lambda audio: in_a_room(audio, index))


def room_templates(
    files: Mapping[str, Sequence[str]], job: CorpusJob = DEFAULT_JOB
) -> dict[str, Observation]:
    """Speaker → the ``embedding+room`` template of its ``files`` in synthetic rooms."""
    return variant_templates(files, room_file, room_name(), job, prefix="voxmeter-room-")
