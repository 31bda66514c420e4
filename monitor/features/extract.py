"""Offline front end: read a file once, keep its speech, run every feature, time each stage.

Enrolment, calibration and evaluation all need the same per-file observations, so
:class:`FeatureCache` stores them on disk (one JSON file per audio file, keyed by absolute path,
size and modification time; one slot per feature version, and the embedding's version names its
backend) and :func:`extract_many` extracts every corpus file once, optionally on Dask workers
(:mod:`monitor.blocks.workers`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from monitor.blocks.workers import dask_client, map_batches, uses_cluster
from monitor.errors import InputError, StoreError
from monitor.features.base import (
    FEATURE_NAMES,
    Observation,
    embedding_backend,
    get_feature,
    set_embedding_backend,
)

logger = logging.getLogger(__name__)

FRONT_END_VERSION = "read_audio+speech_only+pieces-2"
"""Part of every cache key: bump when reading or VAD trimming changes what features see."""

Progress = Callable[[int, int, str], None]
"""progress(done, total, path) after each file (cached or extracted, failed or not)."""


def _slot(name: str) -> str:
    """Cache key of one feature's observation: its name and version (for ``embedding`` the
    version names the backend, so each backend keeps its own slot in a file's entry)."""
    return f"{name}@{get_feature(name).version}"


@dataclass(frozen=True)
class FileFeatures:
    """Everything the front end learns from one audio file (no audio kept)."""

    path: str  # absolute
    duration_seconds: float
    speech_seconds: float  # what the VAD kept; every observation is of this speech
    observations: dict[str, Observation]
    timing_seconds: dict[str, float] = field(default_factory=dict)  # stage -> wall seconds
    cached: bool = False


def _check_features(features: Sequence[str]) -> tuple[str, ...]:
    unknown = [name for name in features if name not in FEATURE_NAMES]
    if unknown:
        raise ValueError(f"unknown feature(s) {unknown}; known: {', '.join(FEATURE_NAMES)}")
    return tuple(features)


BLOCK_SECONDS = 60.0
"""Files longer than this are read, trimmed to speech and observed block by block, and each
feature pools its blocks (counts add, embeddings average): memory stays bounded for any length.
Shorter files (every corpus utterance) go through in one piece, so their figures are unchanged."""


def extract_file(
    path: str | os.PathLike[str],
    features: Sequence[str] = FEATURE_NAMES,
    *,
    block_seconds: float = BLOCK_SECONDS,
) -> FileFeatures:
    """Read ``path`` once, trim it to speech, observe it under every feature named.

    Raises :class:`InputError` naming the file when it is missing, empty, truncated, not audio or
    at an unsupported rate. A file without speech gives empty observations with 0 seconds.
    A file longer than ``block_seconds`` is streamed in blocks of that length (see
    :data:`BLOCK_SECONDS`).
    """
    from monitor.audio.file import audio_length_seconds, read_audio, read_audio_blocks
    from monitor.audio.frames import RATE_HZ

    names = _check_features(features)
    if not block_seconds > 0:
        raise ValueError(f"block_seconds must be positive, got {block_seconds}")
    timing: dict[str, float] = dict.fromkeys(["read", "vad", *names], 0.0)
    start = time.perf_counter()
    duration = audio_length_seconds(path)
    if duration <= block_seconds:
        blocks: Iterable[np.ndarray] = [read_audio(path)[0]]
    else:
        blocks = read_audio_blocks(path, block_seconds)
    parts: dict[str, list[Observation]] = {name: [] for name in names}
    speech_samples = 0
    iterator = iter(blocks)
    while True:
        mark = time.perf_counter()
        audio = next(iterator, None)
        timing["read"] += time.perf_counter() - mark
        if audio is None:
            break
        speech = _timed(timing, "vad", _speech_only, audio, RATE_HZ)
        del audio
        speech_samples += speech.shape[0]
        for name in names:
            parts[name].append(_timed(timing, name, _observe, name, speech, RATE_HZ))
    observations = {
        name: found[0] if len(found) == 1 else get_feature(name).pool(found)
        for name, found in parts.items()
    }
    timing["total"] = time.perf_counter() - start
    return FileFeatures(
        path=str(Path(path).absolute()),
        duration_seconds=float(duration),
        speech_seconds=speech_samples / RATE_HZ,
        observations=observations,
        timing_seconds=timing,
    )


PIECE_SECONDS = {"embedding": 15.0}
"""Longest speech a feature observes in one call; longer speech is cut into near-equal pieces
whose observations the feature pools. The embedding networks keep activations for every frame
(ECAPA about 9 MB a second on top of the 0.5 GB of torch and its weights), so 60 s of speech in
one pass peaked at 1.1 GB; in 15 s pieces the peak stays near 0.65 GB whatever the length. The
corpus's utterances (a few seconds each) are observed in one piece, as before."""


def _observe(name: str, speech: np.ndarray, rate: int) -> Observation:
    """``name``'s observation of ``speech``, in pieces of at most PIECE_SECONDS (pooled)."""
    feature = get_feature(name)
    longest = PIECE_SECONDS.get(name)
    if longest is None or speech.shape[0] <= longest * rate:
        return feature.observe(speech, rate)
    count = math.ceil(speech.shape[0] / (longest * rate))
    return feature.pool([feature.observe(piece, rate) for piece in np.array_split(speech, count)])


def _speech_only(audio: np.ndarray, rate: int) -> np.ndarray:
    from monitor.audio.vad import speech_only

    return speech_only(audio, rate)


def _timed(timing: dict[str, float], stage: str, function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)``, adding its wall time to ``timing[stage]``."""
    mark = time.perf_counter()
    try:
        return function(*args)
    finally:
        timing[stage] += time.perf_counter() - mark


_ENTRY_NAME = re.compile(r"[0-9a-f]{32}\.json")
"""An entry's file name: see ``FeatureCache._entry``."""
_TEMPORARY_NAME = re.compile(r"tmp[a-z0-9_]{8}\.tmp")
"""A ``tempfile.mkstemp(suffix=".tmp")`` left over by a write that was killed."""


def default_cache_dir() -> Path:
    """``$VOXMETER_CACHE`` or ``$XDG_CACHE_HOME/voxmeter/features`` (``~/.cache/...``)."""
    if os.environ.get("VOXMETER_CACHE"):
        return Path(os.environ["VOXMETER_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "voxmeter" / "features"


class FeatureCache:
    """Per-file observations on disk under ``directory`` (created 0700 if missing).

    An entry is valid while the file keeps its absolute path, size and mtime and each
    feature keeps its ``version``; anything else is a miss and is extracted again.

    Privacy: an entry holds the file's absolute path and its observations, among them the
    utterance's voice embedding. ``clear()``, ``remove_speaker(alias)`` and ``info()`` let a
    user see and delete them (``voxmeter cache``).

    A cache that cannot be created or written (read-only folder, full disk) is not an error:
    one warning is logged and the run continues without writing entries.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.hits = 0
        self.misses = 0
        self.problem: str | None = None  # why entries are not written, once known
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            self._disable(f"cannot create it ({exc.strerror or exc})")

    def _disable(self, reason: str) -> None:
        """Stop writing entries; warn once (the run goes on without the cache)."""
        if self.problem is None:
            self.problem = f"feature cache {self.directory}: {reason}; continuing without it"
            logger.warning(self.problem)

    @staticmethod
    def _stamp(path: Path) -> dict[str, Any]:
        info = path.stat()
        return {"path": str(path), "size": info.st_size, "mtime_ns": info.st_mtime_ns}

    def _entry(self, path: Path) -> Path:
        digest = hashlib.sha256(str(path).encode()).hexdigest()[:32]
        return self.directory / f"{digest}.json"

    def get(self, path: str | os.PathLike[str], features: Sequence[str]) -> FileFeatures | None:
        """The cached features of ``path``, or None on a miss (stale, absent or unreadable)."""
        absolute = Path(path).absolute()
        entry = self._entry(absolute)
        try:
            stamp = self._stamp(absolute)
            record = json.loads(entry.read_text())
        except (OSError, ValueError):
            self.misses += 1
            return None
        if record.get("stamp") != stamp or record.get("front_end") != FRONT_END_VERSION:
            self.misses += 1
            return None
        stored = record.get("observations", {})
        observations: dict[str, Observation] = {}
        for name in features:
            item = stored.get(_slot(name))
            if item is None:
                self.misses += 1
                return None
            observations[name] = Observation(name, np.asarray(item["values"]), item["seconds"])
        self.hits += 1
        return FileFeatures(
            path=str(absolute),
            duration_seconds=record["duration_seconds"],
            speech_seconds=record["speech_seconds"],
            observations=observations,
            timing_seconds=record.get("timing_seconds", {}),
            cached=True,
        )

    @staticmethod
    def _kept(entry: Path, stamp: dict[str, Any]) -> dict[str, Any]:
        """Observations already cached for the same file (other embedding backends stay)."""
        try:
            record = json.loads(entry.read_text())
        except (OSError, ValueError):
            return {}
        if record.get("stamp") != stamp or record.get("front_end") != FRONT_END_VERSION:
            return {}
        return dict(record.get("observations", {}))

    def put(self, result: FileFeatures) -> None:
        """Store ``result`` atomically (write to a temporary file, then rename); a cache that
        cannot be written warns once and is skipped from then on."""
        if self.problem is not None:
            return
        absolute = Path(result.path)
        try:
            stamp = self._stamp(absolute)
        except OSError:
            return  # the file went away after extraction: nothing valid to key the entry on
        entry = self._entry(absolute)
        observations = self._kept(entry, stamp)
        observations.update(
            {
                _slot(name): {"values": obs.values.tolist(), "seconds": obs.seconds}
                for name, obs in result.observations.items()
            }
        )
        record = {
            "stamp": stamp,
            "front_end": FRONT_END_VERSION,
            "duration_seconds": result.duration_seconds,
            "speech_seconds": result.speech_seconds,
            "timing_seconds": result.timing_seconds,
            "observations": observations,
        }
        temporary: str | None = None
        try:
            handle, temporary = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            with os.fdopen(handle, "w") as stream:
                json.dump(record, stream)
            os.replace(temporary, entry)
        except OSError as exc:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
            self._disable(f"cannot write entries ({exc.strerror or exc})")

    # ---- what the user can see and delete (voxmeter cache / db remove) -------------------------
    def _entries(self, pattern: re.Pattern[str] = _ENTRY_NAME) -> list[Path]:
        """This cache's own files only: ``--cache`` may name a folder that holds other files
        (a report's ``report.json``), which ``clear`` must not delete."""
        try:
            return sorted(p for p in self.directory.glob("*") if pattern.fullmatch(p.name))
        except OSError:
            return []

    def info(self) -> CacheInfo:
        """Where the cache is, how many entries and bytes it holds."""
        entries = self._entries()
        size = 0
        for entry in entries:
            with contextlib.suppress(OSError):
                size += entry.stat().st_size
        return CacheInfo(self.directory, len(entries), size)

    def clear(self) -> int:
        """Delete every entry (and left-over temporary files); return how many entries."""
        entries = self._entries()
        for entry in [*entries, *self._entries(_TEMPORARY_NAME)]:
            self._delete(entry)
        return len(entries)

    def remove_speaker(self, alias: str, corpus: str | None = None) -> int:
        """Delete the entries of every file in a speaker folder named ``alias`` (of a corpus
        root named ``corpus``, when given); return how many. The cache stores no alias, so
        entries are matched by the path stored inside each one (``<corpus>/<alias>/<file>``)."""
        removed = 0
        for entry in self._entries():
            try:
                stored = json.loads(entry.read_text()).get("stamp", {}).get("path", "")
            except (OSError, ValueError, AttributeError):
                continue
            parts = Path(os.path.normpath(str(stored))).parts
            if len(parts) >= 3 and parts[-2] == alias and corpus in (None, parts[-3]):
                self._delete(entry)
                removed += 1
        return removed

    def _delete(self, entry: Path) -> None:
        try:
            entry.unlink(missing_ok=True)
        except OSError as exc:
            raise StoreError(
                f"{entry}: cannot delete feature cache entry ({exc.strerror})"
            ) from exc


@dataclass(frozen=True)
class CacheInfo:
    """Where the feature cache is and what it holds."""

    directory: Path
    entries: int
    bytes: int


@dataclass(frozen=True)
class Extraction:
    """Results of :func:`extract_many`: features per path (input order) and failures per path."""

    files: dict[str, FileFeatures]
    errors: dict[str, InputError]


def _extract_batch(
    paths: list[str], features: tuple[str, ...], backend: str
) -> list[FileFeatures | tuple[str, str]]:
    """A Dask task: extract a batch of files with the caller's embedding backend (a worker of
    a running cluster does not inherit the caller's environment) and one torch thread (workers
    share the cores); torch is imported only when the embedding is among the features."""
    if "embedding" in features:
        import torch

        set_embedding_backend(backend)
        torch.set_num_threads(1)
    return [_extract_or_error(path, features) for path in paths]


def _extract_or_error(path: str, features: tuple[str, ...]) -> FileFeatures | tuple[str, str]:
    """extract_file for a worker: user errors come back as (source, problem), picklable."""
    try:
        return extract_file(path, features)
    except InputError as error:
        return (error.source, error.problem)


def extract_many(
    paths: Iterable[str | os.PathLike[str]],
    cache: FeatureCache | None = None,
    *,
    features: Sequence[str] = FEATURE_NAMES,
    jobs: int = 1,
    scheduler: str | None = None,
    progress: Progress | None = None,
) -> Extraction:
    """Features of every file, from ``cache`` where valid, else extracted (and then cached).

    Files that cannot be read are collected in ``errors`` with their InputError, never dropped
    silently. ``jobs`` > 1 extracts on a Dask LocalCluster of that many worker processes (one
    torch thread each), ``scheduler`` on a running Dask cluster (:mod:`monitor.blocks.workers`), one
    task per batch of files; this process alone reads and writes the cache.
    """
    names = _check_features(features)
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    order = [str(Path(p).absolute()) for p in paths]
    total = len(order)
    files: dict[str, FileFeatures] = {}
    errors: dict[str, InputError] = {}
    done = 0

    def finish(path: str, outcome: FileFeatures | tuple[str, str]) -> None:
        nonlocal done
        if isinstance(outcome, FileFeatures):
            files[path] = outcome
            if cache is not None and not outcome.cached:
                cache.put(outcome)
        else:
            errors[path] = InputError(*outcome)
        done += 1
        if progress is not None:
            progress(done, total, path)

    todo: list[str] = []
    for path in order:
        hit = cache.get(path, names) if cache is not None else None
        if hit is not None:
            finish(path, hit)
        else:
            todo.append(path)

    if not todo or not uses_cluster(jobs, scheduler):
        for path in todo:
            finish(path, _extract_or_error(path, names))
    else:
        _extract_on_cluster(todo, names, jobs, scheduler, finish)

    ordered = {path: files[path] for path in order if path in files}
    failed = {path: errors[path] for path in order if path in errors}
    return Extraction(ordered, failed)


def _extract_on_cluster(
    todo: list[str],
    names: tuple[str, ...],
    jobs: int,
    scheduler: str | None,
    finish: Callable[[str, FileFeatures | tuple[str, str]], None],
) -> None:
    """The files not in the cache extracted by Dask workers, a batch per task; each outcome
    handed to ``finish`` here, where the cache is written."""

    def batch_done(paths: list[str], outcomes: list[FileFeatures | tuple[str, str]]) -> None:
        for path, outcome in zip(paths, outcomes, strict=True):
            finish(path, outcome)

    with dask_client(min(jobs, len(todo)), scheduler) as client:
        backend = embedding_backend()
        map_batches(client, _extract_batch, todo, names, backend, done=batch_done)


def describe(result: FileFeatures) -> dict[str, Any]:
    """JSON-ready summary of one file: durations, each feature's description, stage timings."""
    report: dict[str, Any] = {
        "path": result.path,
        "duration_seconds": result.duration_seconds,
        "speech_seconds": result.speech_seconds,
    }
    for name, observation in result.observations.items():
        report[name] = get_feature(name).describe(observation)
    report["timing_seconds"] = dict(result.timing_seconds)
    return report
