"""How a calibration is fitted: per bucket of test length, the rank model and the LID logistic of
every feature and of ``combined`` on the eq. 6 trials of a labelled dev corpus."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from monitor.calibration.bucket_fit import SeparableNotes, fit_trials, warn_separable
from monitor.calibration.buckets import (
    DEFAULT_BUCKETS,
    DEFAULT_TEMPLATE_SECONDS,
    LOSSES,
    BucketCalibration,
    CalibrationSet,
    sorted_buckets,
)
from monitor.calibration.crops import (
    SHORT_BUCKETS,
    TRACKING_LENGTHS,
    Crops,
    cosine_statistics,
    crop_speakers,
    crop_trials,
    narrow_statistics,
)
from monitor.calibration.fit_rows import fit_on_workers
from monitor.calibration.protocol import (
    PooledTrials,
    describe_template,
    plan_splits,
    pool_trials,
    scored_trials,
    speech_listing,
)
from monitor.corpus.jobs import DEFAULT_JOB, CorpusJob
from monitor.corpus.speakers import CorpusSpeakers, SpeakerUtterances, load_speakers
from monitor.errors import InputError
from monitor.features.base import embedding_backend, phone_backend

if TYPE_CHECKING:
    from monitor.blocks.workers import Client

logger = logging.getLogger(__name__)


def calibrate_speakers(
    speakers: Sequence[SpeakerUtterances],
    *,
    buckets: Sequence[float] = DEFAULT_BUCKETS,
    template_seconds: float | None = DEFAULT_TEMPLATE_SECONDS,
    loss: str = "ll",
    features: Sequence[str],
    min_speakers_fraction: float = 0.5,
    metadata: Mapping[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
    client: Client | None = None,
    crops: Mapping[str, Crops] | None = None,
) -> CalibrationSet:
    """Fit every bucket the speakers allow: a bucket is kept while at least
    ``min_speakers_fraction`` of the speakers (and at least 2) have enough speech for it.
    The short buckets (:data:`SHORT_BUCKETS`) are fitted on ``crops`` of the utterances, and
    skipped without them (unless the typical utterance is shorter than the bucket: then whole
    utterances are pooled to its length, as for every other bucket).

    With a Dask ``client`` the score matrices are computed and fitted by its workers in row
    groups (:mod:`monitor.calibration.fit_rows`), never whole here; the calibration is the
    single-process one, bit for bit.
    """
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; known: {', '.join(LOSSES)}")
    if len(speakers) < 2:
        raise ValueError(f"calibration needs at least 2 speakers, got {len(speakers)}")
    per_feature: dict[str, list[BucketCalibration]] = {}
    used: list[dict[str, Any]] = []
    separable: SeparableNotes = {}
    typical = float(np.median(np.concatenate([s.speech_seconds for s in speakers])))
    for seconds in sorted_buckets(buckets):
        # a crop stands for a short test where utterances are longer than the bucket; where they
        # are shorter (single digits), whole utterances pooled to the length still serve
        short = seconds in SHORT_BUCKETS and typical > seconds
        if short and crops is None:
            continue
        usable = len(plan_splits(speakers, seconds, template_seconds)[0])
        if usable < max(2.0, min_speakers_fraction * len(speakers)):
            break
        crop = crops if short else None
        pooled = _bucket_trials(speakers, seconds, template_seconds, features, crop)
        if progress is not None:
            progress(f"bucket {seconds:g} s: N = {pooled.N}, {pooled.T} trials")
        fitted = _fit_bucket(pooled, seconds, loss, features, separable, None if short else client)
        for name, bucket in fitted.items():
            per_feature.setdefault(name, []).append(bucket)
        used.append(
            {"seconds": seconds, "N": pooled.N, "trials": pooled.T, "dropped": len(pooled.dropped)}
        )
    warn_separable(separable)
    if not per_feature:
        _no_bucket(speakers, buckets, template_seconds)
    info = _calibration_info(used, template_seconds, loss, len(speakers), metadata)
    return CalibrationSet({k: tuple(v) for k, v in per_feature.items()}, info)


def _no_bucket(
    speakers: Sequence[SpeakerUtterances], buckets: Sequence[float], template_seconds: float | None
) -> NoReturn:
    """Not even the shortest bucket could be fitted: say how much speech each speaker has."""
    shortest = min(buckets)
    raise ValueError(
        f"too few speakers have {shortest:g} s of test speech plus "
        f"{describe_template(template_seconds)} of template speech for the shortest bucket; "
        f"speech per speaker: {speech_listing(speakers)}; try a shorter --template-seconds "
        "or --buckets"
    )


def _calibration_info(
    used: list[dict[str, Any]],
    template_seconds: float | None,
    loss: str,
    speakers: int,
    metadata: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """What the calibration file says of its fit: protocol, buckets, loss, speakers, when."""
    return {
        "protocol": _protocol(template_seconds, [u["seconds"] for u in used]),
        "buckets": used,
        "loss": loss,
        "speakers": speakers,
        "created": datetime.now(UTC).replace(microsecond=0).isoformat(),
        **dict(metadata or {}),
    }


def _bucket_trials(
    speakers: Sequence[SpeakerUtterances],
    seconds: float,
    template_seconds: float | None,
    features: Sequence[str],
    crops: Mapping[str, Crops] | None,
) -> PooledTrials:
    """A bucket's pooled trials: crops of utterances when given (a short bucket whose
    utterances are longer than it), else eq. 6 splits of whole utterances."""
    if crops is not None:
        return crop_trials(
            speakers,
            crops,
            seconds=seconds,
            template_seconds=template_seconds,
            features=features,
        )
    return pool_trials(
        speakers, test_seconds=seconds, template_seconds=template_seconds, features=features
    )


def _fit_bucket(
    pooled: PooledTrials,
    seconds: float,
    loss: str,
    features: Sequence[str],
    separable: SeparableNotes,
    client: Client | None,
) -> dict[str, BucketCalibration]:
    """One bucket's calibrations: here, or over row groups kept on the workers (same bits)."""
    if client is None:
        return fit_trials(
            scored_trials(pooled),
            seconds=seconds,
            loss=loss,
            features=features,
            separable=separable,
        )
    return fit_on_workers(
        client, pooled, seconds=seconds, loss=loss, features=features, separable=separable
    )


def _protocol(template_seconds: float | None, test_seconds: list[float]) -> dict[str, Any]:
    """How the trials were made and fitted, as the calibration file records it."""
    return {
        "name": "paper 000 eq. 6, K-fold over start utterances",
        "delta": "floor((K - T - D) / 2)",
        "test_seconds": test_seconds,
        "template_seconds": template_seconds,
        "segments": "consecutive utterances, fewest reaching the length in speech seconds; "
        "1 and 2 s: the first seconds of speech of the first test utterance",
        "ties": "fractional",
        "lid": "unweighted logistic on row z-norm, eq. 3 prior term",
        "combined": "sum_f w_f * znorm_rows(S_f), w maximising the dev mean log posterior "
        "of the true identity (bucket 'fusion'), then fitted as a feature",
    }


def calibrate_corpus(
    root: str | Path,
    *,
    split: str | None = None,
    features: Sequence[str] = ("f0", "phone", "embedding"),
    buckets: Sequence[float] = DEFAULT_BUCKETS,
    template_seconds: float | None = DEFAULT_TEMPLATE_SECONDS,
    loss: str = "ll",
    job: CorpusJob = DEFAULT_JOB,
) -> tuple[CalibrationSet, tuple[tuple[str, str], ...]]:
    """Extract (through ``job.cache``) a labelled dev corpus and fit every bucket it allows.

    Returns the calibration (metadata: corpus, split, protocol, date, speakers, skipped count)
    and the (file or speaker, reason) pairs that were skipped. ``job.steps`` hears of each fit.
    """
    with job.on_one_cluster() as job, job.client() as client:
        loaded = load_speakers(root, split=split, features=features, job=job)
        crops = _crops(loaded, split, features, buckets, job)
        calibration, skipped = _calibrate_loaded(
            loaded, root, split, features, buckets, template_seconds, loss, job.steps, client, crops
        )
    if "embedding" in features:
        tracking = cosine_statistics(loaded.speakers, crops, template_seconds=template_seconds)
        narrow = narrow_statistics(
            loaded.speakers,
            _paths(loaded.root, split),
            template_seconds=template_seconds,
            cache_dir=job.cache_dir,
        )
        calibration = CalibrationSet(
            calibration.features,
            {**calibration.metadata, "tracking": tracking, "tracking_narrow": narrow},
        )
    return calibration, skipped


def _crops(
    loaded: CorpusSpeakers,
    split: str | None,
    features: Sequence[str],
    buckets: Sequence[float],
    job: CorpusJob,
) -> dict[str, Crops]:
    """Crops for the short buckets asked for (every feature) and the tracker's window lengths
    (the embedding), of every loaded utterance."""
    lengths: dict[float, list[str]] = {}
    for seconds in SHORT_BUCKETS:
        if seconds in buckets:
            lengths[seconds] = list(features)
    if "embedding" in features:
        for seconds in TRACKING_LENGTHS:
            wanted = lengths.setdefault(seconds, [])
            if "embedding" not in wanted:
                wanted.append("embedding")
    lengths = {k: v for k, v in lengths.items() if v}
    if not lengths:
        return {}
    paths = _paths(loaded.root, split)

    def note(done: int, total: int) -> None:
        if done % 250 == 0 or done == total:
            job.tell(f"crops: {done}/{total} utterances")

    return crop_speakers(loaded.speakers, paths, lengths, cache_dir=job.cache_dir, progress=note)


def _paths(root: str | Path, split: str | None) -> dict[tuple[str, str], Path]:
    """(speaker, utterance stem) → audio file, for the crops."""
    from monitor.corpus.scan import scan_corpus

    return {(u.speaker, u.path.stem): u.path for u in scan_corpus(root, split=split).utterances}


def _calibrate_loaded(
    loaded: CorpusSpeakers,
    root: str | Path,
    split: str | None,
    features: Sequence[str],
    buckets: Sequence[float],
    template_seconds: float | None,
    loss: str,
    progress: Callable[[str], None] | None,
    client: Client | None,
    crops: Mapping[str, Crops] | None = None,
) -> tuple[CalibrationSet, tuple[tuple[str, str], ...]]:
    """:func:`calibrate_corpus` once the corpus is loaded (and its cluster, if any, is up)."""
    try:
        calibration = calibrate_speakers(
            loaded.speakers,
            buckets=buckets,
            template_seconds=template_seconds,
            loss=loss,
            features=features,
            progress=progress,
            client=client,
            crops=crops or None,
            metadata={
                "corpus": Path(loaded.root).name,
                "corpus_path": str(root),  # as given (the shipped file stays machine-neutral)
                "split": split,
                "features": list(features),
                **({"embedding_backend": embedding_backend()} if "embedding" in features else {}),
                **({"phone_backend": phone_backend()} if "phone" in features else {}),
                "files": loaded.files,
                "skipped": len(loaded.skipped),
                # corpus speaker ids (aliases, never names): lets an audit check that its
                # speakers are disjoint from these
                "dev_speakers": [s.alias for s in loaded.speakers],
            },
        )
    except ValueError as error:
        raise InputError(loaded.root, str(error)) from error
    return calibration, loaded.skipped
