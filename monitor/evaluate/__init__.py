"""Corpus audit (``voxmeter evaluate``): report.md, report.json and PNG plots in one folder."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monitor.blocks.workers import dask_client, shared_scheduler
from monitor.calibration.buckets import CalibrationSet
from monitor.calibration.protocol import NotEnoughSpeakersError
from monitor.calibration.trial_rows import BlockProgress
from monitor.corpus.speakers import MIN_SPEECH_SECONDS, load_speakers
from monitor.errors import InputError
from monitor.evaluate.audit import run_audit
from monitor.evaluate.protected import protected_audit
from monitor.evaluate.protection import ProtectRequest, audit_protection
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
    cache_dir: str | Path | None = None,
    jobs: int = 1,
    scheduler: str | None = None,
    extraction_progress: Callable[[int, int, str], None] | None = None,
    progress: Callable[[str], None] | None = None,
    min_speech_seconds: float = MIN_SPEECH_SECONDS,
    block_progress: BlockProgress | None = None,
) -> tuple[Audit, dict[str, Any]]:
    """Extract (through the cache), audit every length setting, write report and plots.

    Returns the audit and the report.json document. ``calibration`` supplies the LID and fusion
    weights (speaker-disjoint); without it (or with ``lid_source="crossfit"``) they are
    cross-fitted on halves of the evaluation speakers. With ``jobs`` > 1 or a ``scheduler``,
    extraction and the score matrices run on Dask workers (one cluster for both);
    ``block_progress(done, total, feature)`` follows the matrices' row blocks there.
    ``protect``: also audit the split anonymised by that method (:mod:`.protection`).
    """
    with contextlib.ExitStack() as stack:
        address = stack.enter_context(shared_scheduler(jobs, scheduler))
        client = None if address is None else stack.enter_context(dask_client(jobs, address))
        return _audit_corpus(
            root,
            out,
            split=split,
            test_seconds=test_seconds,
            template_seconds=template_seconds,
            features=features,
            loss=loss,
            calibration=calibration,
            calibration_source=calibration_source,
            lid_source=lid_source,
            protected=protected,
            protect=protect,
            cache_dir=cache_dir,
            jobs=jobs,
            scheduler=address,
            client=client,
            extraction_progress=extraction_progress,
            progress=progress,
            block_progress=block_progress,
            min_speech_seconds=min_speech_seconds,
        )


def _audit_corpus(
    root: str | Path,
    out: str | Path,
    *,
    split: str | None,
    test_seconds: Sequence[float],
    template_seconds: Sequence[float | None],
    features: Sequence[str],
    loss: str,
    calibration: CalibrationSet | None,
    calibration_source: str | None,
    lid_source: str | None,
    protected: str | Path | None,
    protect: ProtectRequest | None,
    cache_dir: str | Path | None,
    jobs: int,
    scheduler: str | None,
    client: Client | None,
    extraction_progress: Callable[[int, int, str], None] | None,
    progress: Callable[[str], None] | None,
    block_progress: BlockProgress | None,
    min_speech_seconds: float,
) -> tuple[Audit, dict[str, Any]]:
    """:func:`evaluate_corpus` once its cluster, if any, is up."""
    from monitor.evaluate.plots import write_plots
    from monitor.evaluate.report import write_report

    loaded = load_speakers(
        root,
        split=split,
        features=features,
        cache_dir=cache_dir,
        jobs=jobs,
        scheduler=scheduler,
        progress=extraction_progress,
        min_speech_seconds=min_speech_seconds,
    )
    metadata: dict[str, Any] = {
        "corpus": Path(loaded.root).name,
        "corpus_path": str(root),
        "split": split,
        "speakers": len(loaded.speakers),
        "files": loaded.files,
        "created": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "calibration": calibration_source,
    }
    try:
        audit = run_audit(
            loaded.speakers,
            test_seconds=test_seconds,
            template_seconds=template_seconds,
            features=features,
            loss=loss,
            calibration=calibration,
            lid_source=lid_source,
            metadata=metadata,
            skipped=loaded.skipped,
            progress=progress,
            client=client,
            block_progress=block_progress,
        )
    except NotEnoughSpeakersError as error:
        raise InputError(loaded.root, str(error)) from error
    except ValueError as error:
        raise InputError(loaded.root, f"cannot audit: {error}") from error
    if protected is not None:
        if progress is not None:
            progress("protected corpus")
        feature = "embedding" if "embedding" in features else features[0]
        other = load_speakers(  # every speaker: only those of the audited split are matched
            protected,
            split=None,
            features=(feature,),
            cache_dir=cache_dir,
            jobs=jobs,
            scheduler=scheduler,
            progress=extraction_progress,
        )
        audit = dataclasses.replace(
            audit,
            protected=protected_audit(
                loaded.speakers, other.speakers, corpus=Path(other.root).name, feature=feature
            ),
            skipped=audit.skipped + other.skipped,
        )
    if protect is not None:
        audit = audit_protection(
            audit,
            loaded,
            protect,
            split=split,
            test_seconds=test_seconds[0],
            template_seconds=template_seconds[0],
            features=features,
            loss=loss,
            calibration=calibration,
            lid_source=lid_source,
            evaluated=metadata,
            client=client,
            jobs=jobs,
            scheduler=scheduler,
            min_speech_seconds=min_speech_seconds,
            extraction_progress=extraction_progress,
            progress=progress,
        )
    if progress is not None:
        progress("plots and report")
    plots = write_plots(audit, out)
    document = write_report(audit, out, plots)
    return audit, document
