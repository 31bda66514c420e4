"""Corpus audit (``voxmeter evaluate``): every metric of papers 000–003 on eq. 6 trials.

For each (test length, template length) setting the trials of :func:`score_trials` give, per
feature and for ``combined``: the rank histogram and its statistics (Table II), the five
beta-binomial fits and their goodness of fit (Table III), the LID family (paper 003 Table 4),
ZEBRA, the EER, and the per-speaker mean disclosure (paper 000 Fig. 6). The LID weight comes
from a speaker-disjoint calibration (the shipped one, for the same length) or, when none fits,
from cross-fitting on two halves of the evaluation speakers; the report says which.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from monitor.calibration.bucket_fit import SeparableNotes, warn_separable
from monitor.calibration.buckets import LOSSES, CalibrationSet
from monitor.calibration.protocol import (
    NotEnoughSpeakersError,
    PooledTrials,
    SpeakerUtterances,
    Trials,
    pool_trials,
    scored_trials,
    speech_listing,
)
from monitor.calibration.trial_rows import BlockProgress, gathered_trials, trial_rows
from monitor.disclosure.baselines import baselines_of_blocks, split_mated
from monitor.disclosure.blocks import (
    BlockCounter,
    ScoreBlocks,
    gap_values,
    matrix_blocks,
    pooled_blocks,
    sweep_eer,
)
from monitor.disclosure.lid import LidCalibration, lid_per_trial, lid_summary
from monitor.disclosure.matrix_scan import RowSource, mated_scores
from monitor.disclosure.population import PopulationSet
from monitor.disclosure.ranks import histogram_of_rank_counts, true_rank_counts
from monitor.disclosure.srd import fit_rank_model, srd_stats
from monitor.disclosure.zebra import zebra_of_blocks
from monitor.errors import VoxmeterError
from monitor.evaluate.lid_setup import LidSetup, calibration_gap, calibration_weights, lid_weights
from monitor.evaluate.modelled import modelled
from monitor.evaluate.results import Audit, FeatureAudit, SettingAudit
from monitor.evaluate.speakers import (
    FitSpeakers,
    per_speaker_meand,
    speaker_fits_on_workers,
    speaker_meands,
)
from monitor.features.base import embedding_backend
from monitor.population.shipped import load_shipped
from monitor.settings.population import PopulationSettings

if TYPE_CHECKING:
    from monitor.blocks.workers import Client

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MatrixCounts:
    """What a feature's audit needs of its (T, N) score matrix, merged from row blocks alike."""

    above: np.ndarray  # (T,) int64: non-mated scores above the mated one
    ties: np.ndarray  # (T,) int64: non-mated scores equal to it
    blocks: ScoreBlocks  # the sorted core's class counts of the mated / non-mated split
    gap_scores: Callable[[float, float], np.ndarray]  # non-mated scores inside (low, high)


def audit_counts(
    name: str,
    counts: MatrixCounts,
    truth: np.ndarray,
    lid: np.ndarray,
    cal: LidCalibration,
    aliases: Sequence[str],
    *,
    loss: str,
    per_speaker: bool = True,
    fit: FitSpeakers = speaker_meands,
) -> FeatureAudit:
    """Table II/III statistics, EERs, LID summary, ZEBRA and per-speaker MeanD for one feature
    from its matrix's counts: exact whether they come from one matrix or from row blocks.
    ``fit`` fits the per-speaker models (here by default; Dask workers in a cluster run)."""
    hist = histogram_of_rank_counts(counts.above, counts.ties, len(aliases))
    fits = {name_: fit_rank_model(hist, loss=name_) for name_ in LOSSES}  # type: ignore[arg-type]
    eer, eer_hull, _ = baselines_of_blocks(counts.blocks, counts.gap_scores)
    return FeatureAudit(
        feature=name,
        histogram=hist,
        histogram_stats=srd_stats(hist),
        fits=fits,
        loss=loss,
        EER=eer,
        EER_rocch=eer_hull,
        lid=lid,
        lid_summary=lid_summary(lid, cal),
        zebra=zebra_of_blocks(counts.blocks),
        per_speaker=per_speaker_meand(counts.above, counts.ties, truth, aliases, fit=fit)
        if per_speaker
        else {},
    )


def audit_feature(
    name: str,
    S: np.ndarray,
    truth: np.ndarray,
    lid: np.ndarray,
    cal: LidCalibration,
    aliases: Sequence[str],
    *,
    loss: str,
    per_speaker: bool = True,
) -> FeatureAudit:
    """:func:`audit_counts` of a score matrix S (T, N) in memory."""
    above, ties = true_rank_counts(S, truth)
    tar, non = split_mated(S, truth)
    counts = MatrixCounts(above, ties, pooled_blocks(tar, non), gap_values(non))
    return audit_counts(name, counts, truth, lid, cal, aliases, loss=loss, per_speaker=per_speaker)


# ---- row blocks of several score matrices at once (Dask workers) ---------------------------
# Each block is {name: S rows (n, N)} with truth rows (n,): one task scores every feature of a
# block once per pass, so a pass costs what scoring the matrices once costs.

Blocks = dict[str, np.ndarray]


def _first_pass(
    scores: Blocks, m: np.ndarray, row0: int, names: tuple[str, ...], *weights: float
) -> dict[str, tuple[np.ndarray, ...]]:
    """Row function: per name, the mated scores, rank counts (above, tied) and LID per trial."""
    out = {}
    for name, weight in zip(names, weights, strict=True):
        S = scores[name]
        above, ties = true_rank_counts(S, m)
        out[name] = (mated_scores(S, m), above, ties, lid_per_trial(S, m, weight))
    return out


def _block_counts(
    scores: Blocks, m: np.ndarray, row0: int, names: tuple[str, ...], *mated: np.ndarray
) -> dict[str, np.ndarray]:
    """Row function: per name, every score of the block counted into the blocks of the sorted
    core cut by that matrix's mated scores (``mated``, all rows)."""
    out = {}
    for name, mated_all in zip(names, mated, strict=True):
        counter = BlockCounter(mated_all)
        counter.add(scores[name])
        out[name] = counter.n_all
    return out


def _gap_scores(
    scores: Blocks, m: np.ndarray, row0: int, gaps: Mapping[str, tuple[float, float]]
) -> dict[str, np.ndarray]:
    """Row function: per name, the block's scores strictly inside that name's gap (float64;
    mated scores are block boundaries, so never inside)."""
    out = {}
    for name, (low, high) in gaps.items():
        S = scores[name]
        out[name] = S[(low < S) & (high > S)].astype(np.float64)
    return out


class _GapNeededError(Exception):
    """Raised by :func:`_wanted_gap`'s probe to learn which gap the EER sweep would read."""


def _wanted_gap(blocks: ScoreBlocks) -> tuple[float, float] | None:
    """The gap (low, high) whose scores the threshold-sweep EER needs, or None: learnt by
    running the sweep with a reader that stops it, so one pass can fetch every matrix's gap."""

    def probe(low: float, high: float) -> np.ndarray:
        raise _GapNeededError(low, high)

    try:
        sweep_eer(blocks, probe)
    except _GapNeededError as wanted:
        return wanted.args[0], wanted.args[1]
    return None


def audit_blocks(
    rows: RowSource,
    cals: Mapping[str, LidCalibration],
    truth: np.ndarray,
    aliases: Sequence[str],
    *,
    loss: str,
    per_speaker: bool = True,
    fit: FitSpeakers = speaker_meands,
) -> dict[str, FeatureAudit]:
    """:func:`audit_feature` of every matrix named in ``cals``, visited together in row blocks
    of ``{name: S rows}`` (on Dask workers only summaries come back): a pass for mated scores,
    rank counts and LID, a pass for the sorted core's block counts, and one for the EER gaps
    if any. Every merge is a concatenation or an integer sum, so the figures are those of the
    matrices in memory, bit for bit."""
    names = tuple(cals)
    first = rows.map(_first_pass, names, *(cals[n].weight for n in names))
    mated, above, ties, lid = (
        {n: np.concatenate([part[n][k] for part in first]) for n in names} for k in range(4)
    )
    counted = rows.map(_block_counts, names, *(mated[n] for n in names))
    blocks = {n: matrix_blocks(mated[n], np.sum([c[n] for c in counted], axis=0)) for n in names}
    gaps = {n: gap for n in names if (gap := _wanted_gap(blocks[n])) is not None}
    found = rows.map(_gap_scores, gaps) if gaps else []
    inside = {n: np.concatenate([f[n] for f in found]) for n in gaps}

    def reader(name: str) -> Callable[[float, float], np.ndarray]:
        def read(low: float, high: float) -> np.ndarray:
            if gaps.get(name) != (low, high):  # the sweep reads the gap it asked for
                raise AssertionError(f"{name}: gap ({low}, {high}) was not fetched")
            return inside[name]

        return read

    return {
        n: audit_counts(
            n,
            MatrixCounts(above[n], ties[n], blocks[n], reader(n)),
            truth,
            lid[n],
            cals[n],
            aliases,
            loss=loss,
            per_speaker=per_speaker,
            fit=fit,
        )
        for n in names
    }


def audit_setting(
    speakers: Sequence[SpeakerUtterances],
    *,
    test_seconds: float,
    template_seconds: float | None,
    features: Sequence[str],
    loss: str = "ll",
    calibration: CalibrationSet | None = None,
    lid_source: str | None = None,
    per_speaker: bool = True,
    separable: SeparableNotes | None = None,
    evaluated: Mapping[str, Any] | None = None,
    client: Client | None = None,
    block_progress: BlockProgress | None = None,
    pooled: PooledTrials | None = None,
) -> SettingAudit:
    """Audit one length setting. ``lid_source`` None: the calibration when it covers every
    feature, else cross-fitting. ``pooled``: these trials instead of the speakers' own (tests
    and templates from different versions of the audio, ``evaluate --protect``). With a Dask
    ``client`` the matrices are scored by its workers in row blocks and only their mergeable
    summaries come back (:mod:`monitor.calibration.trial_rows`; cross-fitting brings them here):
    the figures of the single-process run, bit for bit, without the population model's beside."""
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; known: {', '.join(LOSSES)}")
    if pooled is None:
        pooled = pool_trials(
            speakers,
            test_seconds=test_seconds,
            template_seconds=template_seconds,
            features=features,
        )
    lid_source = _lid_source(lid_source, calibration, features, test_seconds)
    if client is not None and lid_source == "calibration" and calibration is not None:
        figures = _audit_on_workers(
            client,
            pooled,
            calibration,
            features,
            test_seconds,
            evaluated=evaluated,
            loss=loss,
            per_speaker=per_speaker,
            block_progress=block_progress,
        )
    else:
        trials = gathered_trials(client, pooled) if client is not None else scored_trials(pooled)
        setup = lid_weights(
            trials,
            features,
            calibration=calibration,
            seconds=test_seconds,
            source=lid_source,
            separable=separable,
            evaluated=evaluated,
        )
        audits = _audit_matrices(setup, trials, loss=loss, per_speaker=per_speaker)
        figures = audits, dict(setup.fusion), setup.description
        result = _setting_audit(pooled, test_seconds, template_seconds, figures)
        return _beside_the_model(result, setup, trials.truth)
    return _setting_audit(pooled, test_seconds, template_seconds, figures)


def _beside_the_model(result: SettingAudit, setup: LidSetup, truth: np.ndarray) -> SettingAudit:
    """The setting with the population model's figures beside the measured ones (at the
    audit's N and at population.size's default N_pop)."""
    side = modelled(
        result.features,
        setup.scores,
        truth,
        setup.calibrations,
        model=_shipped_model(),
        seconds=result.test_seconds,
        population=PopulationSettings().size,
    )
    return replace(result, modelled=side)


def _shipped_model() -> PopulationSet | None:
    """The population model shipped for the selected embedding backend (None if unreadable:
    the report then shows the measured figures alone)."""
    try:
        return load_shipped(embedding_backend()).model
    except VoxmeterError:
        return None


def _audit_on_workers(
    client: Client,
    pooled: PooledTrials,
    calibration: CalibrationSet,
    features: Sequence[str],
    test_seconds: float,
    *,
    evaluated: Mapping[str, Any] | None,
    loss: str,
    per_speaker: bool,
    block_progress: BlockProgress | None,
) -> tuple[dict[str, FeatureAudit], dict[str, float], str]:
    """(audits, fusion, description) with the calibration's weights, the score matrices
    computed by the workers in row blocks: only their mergeable summaries come back."""
    cals, fusion, description = calibration_weights(
        calibration, features, test_seconds, pooled.aliases, evaluated
    )
    rows = trial_rows(client, pooled, tuple(cals), fusion=fusion, progress=block_progress)
    audits = audit_blocks(
        rows,
        cals,
        pooled.truth,
        pooled.aliases,
        loss=loss,
        per_speaker=per_speaker,
        fit=speaker_fits_on_workers(client, block_progress),
    )
    return audits, fusion, description


def _lid_source(
    lid_source: str | None,
    calibration: CalibrationSet | None,
    features: Sequence[str],
    test_seconds: float,
) -> str:
    """Where the LID and fusion weights come from: the calibration when it covers every feature
    at this length, else cross-fitting on the evaluation speakers."""
    if lid_source is None:
        covered = calibration is not None and not calibration_gap(
            calibration, features, test_seconds
        )
        lid_source = "calibration" if covered else "crossfit"
    if lid_source == "calibration" and calibration is None:
        raise ValueError("LID source 'calibration' needs a calibration")
    return lid_source


def _setting_audit(
    pooled: PooledTrials,
    test_seconds: float,
    template_seconds: float | None,
    figures: tuple[Mapping[str, FeatureAudit], Mapping[str, float], str],
) -> SettingAudit:
    """The audit of one length setting: what was asked, what the trials held, the figures
    (audits, fusion weights, where the LID weights came from)."""
    audits, fusion, description = figures
    return SettingAudit(
        test_seconds=float(test_seconds),
        template_seconds=None if template_seconds is None else float(template_seconds),
        mean_test_seconds=float(np.mean(pooled.test_seconds)),
        mean_template_seconds=float(np.mean(pooled.template_seconds)),
        N=pooled.N,
        T=pooled.T,
        aliases=pooled.aliases,
        dropped=pooled.dropped,
        lid_source=description,
        fusion=fusion,
        features=audits,
    )


def _audit_matrices(
    setup: LidSetup, trials: Trials, *, loss: str, per_speaker: bool
) -> dict[str, FeatureAudit]:
    """:func:`audit_feature` of every matrix held here, with the LID weights of ``setup``."""
    return {
        name: audit_feature(
            name,
            setup.scores[name],
            trials.truth,
            setup.lid[name],
            setup.calibrations[name],
            trials.aliases,
            loss=loss,
            per_speaker=per_speaker,
        )
        for name in setup.scores
    }


def run_audit(
    speakers: Sequence[SpeakerUtterances],
    *,
    test_seconds: Sequence[float],
    template_seconds: Sequence[float | None],
    features: Sequence[str],
    loss: str = "ll",
    calibration: CalibrationSet | None = None,
    lid_source: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    skipped: Sequence[tuple[str, str]] = (),
    progress: Callable[[str], None] | None = None,
    client: Client | None = None,
    block_progress: BlockProgress | None = None,
) -> Audit:
    """Every (test, template) setting of the grids; the first pair is the main setting.

    The grid is the first template length against every test length plus the first test
    length against every other template length (the two panels of paper 000 Fig. 8). Settings
    the corpus cannot supply (fewer than 2 long-enough speakers) are skipped with a log line.
    """
    if not test_seconds or not template_seconds:
        raise ValueError("at least one test length and one template length are needed")
    pairs = [(t, template_seconds[0]) for t in test_seconds]
    pairs += [(test_seconds[0], d) for d in template_seconds[1:]]
    settings: list[SettingAudit] = []
    separable: SeparableNotes = {}
    for index, (test, template) in enumerate(pairs):
        label = f"test {test:g} s, template {'rest' if template is None else f'{template:g} s'}"
        if progress is not None:
            progress(label)
        try:
            settings.append(
                audit_setting(
                    speakers,
                    test_seconds=test,
                    template_seconds=template,
                    features=features,
                    loss=loss,
                    calibration=calibration,
                    lid_source=lid_source,
                    per_speaker=index == 0,
                    separable=separable,
                    evaluated=metadata,
                    client=client,
                    block_progress=block_progress,
                )
            )
        except NotEnoughSpeakersError as error:
            if index == 0:
                raise NotEnoughSpeakersError(
                    f"{error}; speech per speaker: {speech_listing(speakers)}; "
                    "try a shorter --template-seconds or --test-seconds"
                ) from error
            logger.warning("skipping %s: %s", label, error)
    warn_separable(separable)
    return Audit(tuple(settings), dict(metadata or {}), tuple(skipped))
