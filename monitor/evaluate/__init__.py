"""Corpus audit (``voxmeter evaluate``): report.md, report.json and PNG plots in one folder."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monitor.calibration.buckets import CalibrationSet
from monitor.calibration.protocol import NotEnoughSpeakersError
from monitor.calibration.trial_rows import BlockProgress
from monitor.corpus.jobs import DEFAULT_JOB, MIN_SPEECH_SECONDS, CorpusJob
from monitor.corpus.speakers import CorpusSpeakers, load_speakers
from monitor.errors import InputError
from monitor.evaluate.anonymiser_audit import ProtectRequest, audit_protection
from monitor.evaluate.audit import run_audit
from monitor.evaluate.deid import protected_audit
from monitor.evaluate.results import Audit

if TYPE_CHECKING:
    from monitor.blocks.workers import Client

__all__ = ["Audit", "ProtectRequest", "evaluate_corpus"]


def evaluate_corpus(
    root: str | Path,
    out: str | Path,
    *,
    split: str | None = None,
    test_seconds: Sequence[float] = (3.0, 6.0, 12.0),
    template_seconds: Sequence[float | None] = (12.0,),
    features: Sequence[str] = ("f0", "phone", "embedding"),
    loss: str = "ll",
    calibration: CalibrationSet | None = None,
    calibration_source: str | None = None,
    lid_source: str | None = None,
    protected: str | Path | None = None,
    protect: ProtectRequest | None = None,
    job: CorpusJob = DEFAULT_JOB,
    block_progress: BlockProgress | None = None,
) -> tuple[Audit, dict[str, Any]]:
    """Extract (through ``job.cache``), audit every length setting, write report and plots.

    Returns the audit and the report.json document. ``calibration`` supplies the LID and fusion
    weights (speaker-disjoint); without it (or with ``lid_source="crossfit"``) they are
    cross-fitted on halves of the evaluation speakers. With ``job.jobs`` > 1 or a scheduler,
    extraction and the score matrices run on Dask workers (one cluster for both);
    ``block_progress(done, total, feature)`` follows the matrices' row blocks there.
    ``protect``: also audit the split anonymised by that method (:mod:`.anonymiser_audit`).
    """
    with job.on_one_cluster() as job, job.client() as client:
        options = _Options(
            features=features,
            loss=loss,
            calibration=calibration,
            lid_source=lid_source,
            job=job,
            client=client,
            block_progress=block_progress,
        )
        return _audit_corpus(
            root,
            out,
            options,
            split=split,
            test_seconds=test_seconds,
            template_seconds=template_seconds,
            calibration_source=calibration_source,
            protected=protected,
            protect=protect,
        )


@dataclass(frozen=True)
class _Options:
    """What every step of one evaluation shares: what to measure, where to compute it (the
    cluster is up by then), whom to tell how far it got."""

    features: Sequence[str]
    loss: str
    calibration: CalibrationSet | None
    lid_source: str | None
    job: CorpusJob
    client: Client | None
    block_progress: BlockProgress | None


def _audit_corpus(
    root: str | Path,
    out: str | Path,
    options: _Options,
    *,
    split: str | None,
    test_seconds: Sequence[float],
    template_seconds: Sequence[float | None],
    calibration_source: str | None,
    protected: str | Path | None,
    protect: ProtectRequest | None,
) -> tuple[Audit, dict[str, Any]]:
    """:func:`evaluate_corpus` once its cluster, if any, is up."""
    from monitor.evaluate.plots import write_plots
    from monitor.evaluate.report import write_report

    job = options.job
    loaded = load_speakers(root, split=split, features=options.features, job=job)
    metadata = _corpus_metadata(loaded, root, split=split, calibration_source=calibration_source)
    audit = _audit_loaded(loaded, metadata, options, test_seconds, template_seconds)
    if protected is not None:
        job.tell("protected corpus")
        audit = _with_protected_corpus(audit, loaded, protected, options)
    if protect is not None:
        audit = audit_protection(
            audit,
            loaded,
            protect,
            split=split,
            test_seconds=test_seconds[0],
            template_seconds=template_seconds[0],
            features=options.features,
            job=job,
            loss=options.loss,
            calibration=options.calibration,
            lid_source=options.lid_source,
            evaluated=metadata,
            client=options.client,
        )
    job.tell("plots and report")
    plots = write_plots(audit, out)
    document = write_report(audit, out, plots)
    return audit, document


def _audit_loaded(
    loaded: CorpusSpeakers,
    metadata: dict[str, Any],
    options: _Options,
    test_seconds: Sequence[float],
    template_seconds: Sequence[float | None],
) -> Audit:
    """Every length setting audited on the speakers loaded; too few of them, or settings the
    audit cannot run, are the corpus's problem and said so in one line."""
    try:
        return run_audit(
            loaded.speakers,
            test_seconds=test_seconds,
            template_seconds=template_seconds,
            features=options.features,
            loss=options.loss,
            calibration=options.calibration,
            lid_source=options.lid_source,
            metadata=metadata,
            skipped=loaded.skipped,
            progress=options.job.steps,
            client=options.client,
            block_progress=options.block_progress,
        )
    except NotEnoughSpeakersError as error:
        raise InputError(loaded.root, str(error)) from error
    except ValueError as error:
        raise InputError(loaded.root, f"cannot audit: {error}") from error


def _corpus_metadata(
    loaded: CorpusSpeakers, root: str | Path, *, split: str | None, calibration_source: str | None
) -> dict[str, Any]:
    """What the report says of the corpus audited: which, how much, when, calibrated how."""
    return {
        "corpus": Path(loaded.root).name,
        "corpus_path": str(root),
        "split": split,
        "speakers": len(loaded.speakers),
        "files": loaded.files,
        "created": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "calibration": calibration_source,
    }


def _with_protected_corpus(
    audit: Audit, loaded: CorpusSpeakers, protected: str | Path, options: _Options
) -> Audit:
    """The audit with the protected copy of the corpus matched against the clean speakers:
    how well the anonymised voices still link to who spoke."""
    feature = "embedding" if "embedding" in options.features else options.features[0]
    # every speaker: only those of the audited split are matched; --min-speech is the audited
    # corpus's filter, the protected copy keeps the default one
    job = dataclasses.replace(options.job, min_speech_seconds=MIN_SPEECH_SECONDS)
    other = load_speakers(protected, split=None, features=(feature,), job=job)
    return dataclasses.replace(
        audit,
        protected=protected_audit(
            loaded.speakers, other.speakers, corpus=Path(other.root).name, feature=feature
        ),
        skipped=audit.skipped + other.skipped,
    )
