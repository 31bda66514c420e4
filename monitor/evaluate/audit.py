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
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from monitor.calibration.fit import (
    COMBINED,
    LOSSES,
    CalibrationSet,
    SeparableNotes,
    fit_fusion_weights,
    fit_lid_noting,
    fuse_scores,
    warn_separable,
)
from monitor.calibration.protocol import (
    NotEnoughSpeakersError,
    SpeakerUtterances,
    Trials,
    pool_trials,
    scored_trials,
    speech_listing,
)
from monitor.disclosure.baselines import baselines_of_blocks, split_mated
from monitor.disclosure.blocks import (
    BlockCounter,
    ScoreBlocks,
    gap_values,
    matrix_blocks,
    pooled_blocks,
    sweep_eer,
)
from monitor.disclosure.lid import (
    LidCalibration,
    LidSummary,
    lid_per_trial,
    lid_summary,
)
from monitor.disclosure.matrix_scan import RowSource, mated_scores
from monitor.disclosure.ranks import histogram_of_rank_counts, true_rank_counts
from monitor.disclosure.srd import RankFit, SrdStats, fit_rank_model, srd_stats
from monitor.disclosure.zebra import ZebraResult, zebra_of_blocks
from monitor.errors import InputError
from monitor.evaluate.cluster import (
    BlockProgress,
    gathered_trials,
    speaker_fits_on_workers,
    trial_rows,
)

if TYPE_CHECKING:
    from distributed import Client

logger = logging.getLogger(__name__)

LID_SOURCES = ("calibration", "crossfit")


@dataclass(frozen=True)
class FeatureAudit:
    """Every figure of one feature in one length setting (bits, fractions as in DESIGN §0)."""

    feature: str
    histogram: np.ndarray  # (N,) rank histogram (fractional ties), trial counts
    histogram_stats: SrdStats
    fits: Mapping[str, RankFit]  # all five losses
    loss: str  # the loss whose fit is "the model"
    EER: float  # threshold sweep (§6.1)
    EER_rocch: float
    lid: np.ndarray  # (T,) LID per trial, bits
    lid_summary: LidSummary
    zebra: ZebraResult
    per_speaker: Mapping[str, float]  # alias -> MeanD of the speaker's LL-fitted model, bits

    @property
    def model(self) -> RankFit:
        return self.fits[self.loss]


@dataclass(frozen=True)
class SettingAudit:
    """One (test seconds, template seconds) setting of the protocol."""

    test_seconds: float
    template_seconds: float | None
    mean_test_seconds: float
    mean_template_seconds: float
    N: int
    T: int
    aliases: tuple[str, ...]
    dropped: tuple[str, ...]
    lid_source: str  # how the LID weights were obtained (printed in the report)
    features: Mapping[str, FeatureAudit]
    fusion: Mapping[str, float] = field(default_factory=dict)  # w_f of combined


@dataclass(frozen=True)
class Audit:
    """A whole audit: settings (the first is the main one) plus provenance."""

    settings: tuple[SettingAudit, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    skipped: tuple[tuple[str, str], ...] = ()  # (file, reason) never used
    protected: ProtectedAudit | None = None  # when --protected was given

    @property
    def main(self) -> SettingAudit:
        return self.settings[0]


def calibration_gap(calibration: CalibrationSet, features: Sequence[str], seconds: float) -> str:
    """Why ``calibration`` cannot supply the LID and fusion weights here ("" when it can):
    a missing feature, or a ``combined`` fitted on another feature set."""
    wanted = [*features, COMBINED] if len(features) > 1 else list(features)
    missing = [f for f in wanted if f not in calibration.features]
    if missing:
        return f"the calibration has no bucket for {missing}"
    if len(features) > 1:
        fusion = calibration.lookup(COMBINED, seconds)[0].fusion
        if fusion and set(fusion) != set(features):
            return (
                f"the calibration's combined was fitted on {sorted(fusion)}, "
                f"not on {sorted(features)}"
            )
    return ""


@dataclass(frozen=True)
class LidSetup:
    """Scores with ``combined``, per-trial LID and the calibrations behind them."""

    scores: Mapping[str, np.ndarray]  # feature -> (T, N), including combined
    lid: Mapping[str, np.ndarray]  # feature -> (T,) bits
    calibrations: Mapping[str, LidCalibration]
    fusion: Mapping[str, float]  # w_f of combined (mean over folds when cross-fitted)
    description: str  # how the weights were obtained, for the report


def dev_overlap(
    calibration: CalibrationSet, aliases: Sequence[str], evaluated: Mapping[str, Any] | None
) -> str:
    """What is true of the calibration's dev speakers against the evaluated ones: disjoint,
    overlapping (how many), or unknown. Uses the dev speaker list a calibration records
    (``dev_speakers``), else compares corpus name and split."""
    info = calibration.metadata
    corpus = info.get("corpus", "an unknown corpus")
    split = info.get("split")
    where = f"{corpus}{f', split {split}' if split else ''}"
    dev = info.get("dev_speakers")
    evaluated = evaluated or {}
    same_corpus = corpus == evaluated.get("corpus")
    if isinstance(dev, list):
        shared = sorted(set(aliases) & {str(a) for a in dev})
        if not shared:
            return f"dev corpus {where}: speaker-disjoint from the evaluated speakers"
        if not same_corpus:
            return (
                f"dev corpus {where}: {len(shared)} of the {len(aliases)} evaluated speaker ids "
                "are also dev speaker ids (NOT speaker-disjoint if they are the same people)"
            )
        return (
            f"dev corpus {where}: NOT speaker-disjoint, {len(shared)} of the {len(aliases)} "
            "evaluated speakers were dev speakers (LID is optimistic)"
        )
    if not same_corpus:
        return f"dev corpus {where} (another corpus)"
    eval_split = evaluated.get("split")
    if split and eval_split and split != eval_split:
        return f"dev corpus {where}: speaker-disjoint if the corpus's splits are"
    evaluated_part = f"split {eval_split}" if eval_split else "every speaker"
    return (
        f"dev corpus {where}: the evaluation ({evaluated_part} of the same corpus) includes "
        "dev speakers, so NOT speaker-disjoint (LID is optimistic)"
    )


def calibration_weights(
    calibration: CalibrationSet,
    features: Sequence[str],
    seconds: float,
    aliases: Sequence[str],
    evaluated: Mapping[str, Any] | None,
) -> tuple[dict[str, LidCalibration], dict[str, float], str]:
    """The LID calibration of every feature (and ``combined``), the fusion weights and how
    they were obtained, from ``calibration``'s bucket for ``seconds`` (ValueError if it lacks
    some feature)."""
    problem = calibration_gap(calibration, features, seconds)
    if problem:
        raise ValueError(problem)
    combine = len(features) > 1
    wanted = [*features, COMBINED] if combine else list(features)
    cals = {}
    extrapolated = False
    for name in wanted:
        bucket, flag = calibration.lookup(name, seconds)
        extrapolated |= flag
        cals[name] = LidCalibration(bucket.lid_weight, bucket.lid_bias, bucket.log_prior_odds)
    fusion = calibration.fusion_weights(seconds, features) if combine else {}
    bucket_seconds = calibration.lookup(features[0], seconds)[0].seconds
    description = (
        f"calibration weights of the {bucket_seconds:g} s bucket, fitted on "
        f"{dev_overlap(calibration, aliases, evaluated)}"
        + (", extrapolated beyond the calibrated lengths" if extrapolated else "")
    )
    return cals, dict(fusion), description


def lid_weights(
    trials: Trials,
    features: Sequence[str],
    *,
    calibration: CalibrationSet | None,
    seconds: float,
    source: str = "calibration",
    separable: SeparableNotes | None = None,
    evaluated: Mapping[str, Any] | None = None,
) -> LidSetup:
    """Scores (with ``combined``), per-trial LID and the LID calibration of every feature.

    ``source="calibration"`` takes w_f and the combined weights from ``calibration`` at
    ``seconds`` (speaker-disjoint dev data); ``"crossfit"`` fits them on the trials of half the
    evaluation speakers and applies them to the other half, both ways (speakers alternate
    between halves in alias order).
    """
    if source not in LID_SOURCES:
        raise ValueError(f"unknown LID source {source!r}; known: {', '.join(LID_SOURCES)}")
    scores = {name: trials.scores[name] for name in features}
    combine = len(features) > 1
    if source == "calibration":
        if calibration is None:
            raise ValueError("LID source 'calibration' needs a calibration")
        cals, fusion, description = calibration_weights(
            calibration, features, seconds, trials.aliases, evaluated
        )
        if combine:
            scores[COMBINED] = fuse_scores(scores, fusion)
        lid = {name: lid_per_trial(scores[name], trials.truth, cals[name].weight) for name in cals}
        return LidSetup(scores, lid, cals, fusion, description)

    half = np.arange(trials.N) % 2  # speakers alternate between halves
    row_half = half[trials.truth]
    if np.unique(row_half).size < 2:
        raise ValueError("cross-fitting the LID weight needs at least 2 speakers")
    names = [*features, COMBINED] if combine else list(features)
    lid = {name: np.empty(trials.T) for name in names}
    combined = np.empty_like(scores[features[0]]) if combine else None
    weights: dict[str, list[LidCalibration]] = {name: [] for name in names}
    fusions: list[dict[str, float]] = []
    for h in (0, 1):
        dev, ev = row_half != h, row_half == h
        fold = {
            f: fit_lid_noting(f, scores[f][dev], trials.truth[dev], seconds, separable)
            for f in features
        }
        if combine:
            fusion = fit_fusion_weights({f: scores[f][dev] for f in features}, trials.truth[dev])
            fused = fuse_scores(scores, fusion)
            fusions.append(fusion)
            fold[COMBINED] = fit_lid_noting(
                COMBINED, fused[dev], trials.truth[dev], seconds, separable
            )
            combined[ev] = fused[ev]  # type: ignore[index]
        for name in names:
            matrix = combined if name == COMBINED else scores[name]
            lid[name][ev] = lid_per_trial(matrix[ev], trials.truth[ev], fold[name].weight)  # type: ignore[index]
            weights[name].append(fold[name])
    if combine:
        scores[COMBINED] = combined  # type: ignore[assignment]
    cals = {
        name: LidCalibration(
            float(np.mean([c.weight for c in folds])),
            float(np.mean([c.bias for c in folds])),
            float(np.mean([c.log_prior_odds for c in folds])),
        )
        for name, folds in weights.items()
    }
    description = (
        "cross-fitted on the evaluation speakers: weights fitted on one half of the speakers "
        "applied to the other half and vice versa (mean weight shown)"
    )
    fusion_mean = {f: float(np.mean([w[f] for w in fusions])) for f in features} if combine else {}
    return LidSetup(scores, lid, cals, fusion_mean, description)


SpeakerCounts = tuple[np.ndarray, np.ndarray]
"""One speaker's rank counts (above (t,), tied (t,)) over its own trials, in row order."""
FitSpeakers = Callable[[Sequence[SpeakerCounts], int], list[float]]
"""Fits each speaker's LL rank model and returns its MeanD (here, or on Dask workers)."""


def speaker_meands(speakers: Sequence[SpeakerCounts], N: int) -> list[float]:
    """MeanD (bits) of the LL-fitted rank model of each speaker's own histogram (N bins)."""
    return [
        fit_rank_model(histogram_of_rank_counts(above, ties, N), loss="ll").stats.MeanD
        for above, ties in speakers
    ]


def per_speaker_meand(
    above: np.ndarray,
    ties: np.ndarray,
    truth: np.ndarray,
    aliases: Sequence[str],
    *,
    fit: FitSpeakers = speaker_meands,
) -> dict[str, float]:
    """MeanD of each speaker's LL-fitted rank model (paper 000 Fig. 6; LL suits sparse data),
    from the rank counts (T,) of :func:`~monitor.disclosure.ranks.true_rank_counts`. Rows are
    grouped by one stable sort (each speaker's rows stay in row order, so its histogram is the
    same bits as from a mask), and ``fit`` fits them all."""
    N = len(aliases)
    order = np.argsort(truth, kind="stable")
    rows = np.split(order, np.cumsum(np.bincount(truth, minlength=N))[:-1])
    present = [i for i in range(N) if rows[i].size]
    meands = fit([(above[rows[i]], ties[rows[i]]) for i in present], N)
    return {aliases[i]: value for i, value in zip(present, meands, strict=True)}


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
) -> SettingAudit:
    """Audit one length setting. ``lid_source`` None: the calibration when it covers every
    feature, else cross-fitting.

    With a Dask ``client`` the score matrices are computed by its workers in row blocks and
    only their mergeable summaries come back (:mod:`monitor.evaluate.cluster`); cross-fitting
    still brings the matrices here, as its fits need every dev score at once. The figures are
    those of the single-process run, bit for bit.
    """
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; known: {', '.join(LOSSES)}")
    pooled = pool_trials(
        speakers, test_seconds=test_seconds, template_seconds=template_seconds, features=features
    )
    if lid_source is None:
        covered = calibration is not None and not calibration_gap(
            calibration, features, test_seconds
        )
        lid_source = "calibration" if covered else "crossfit"
    if lid_source == "calibration" and calibration is None:
        raise ValueError("LID source 'calibration' needs a calibration")
    if client is not None and lid_source == "calibration" and calibration is not None:
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
        audits = {
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
        fusion, description = dict(setup.fusion), setup.description
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


def composition_curves(
    lengths: np.ndarray, disclosure: np.ndarray, ceiling: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Shape curves of §5.7 anchored at the shortest length: D(L0)·(L/L0) and D(L0)·√(L/L0),
    capped at ``ceiling`` (log2 N per length) when given: no disclosure exceeds log2 N."""
    lengths = np.asarray(lengths, dtype=np.float64)
    disclosure = np.asarray(disclosure, dtype=np.float64)
    order = np.argsort(lengths)
    L0, D0 = lengths[order[0]], disclosure[order[0]]
    steps = lengths / L0
    curves = {"basic": D0 * steps, "advanced": D0 * np.sqrt(steps)}
    if ceiling is not None:
        cap = np.asarray(ceiling, dtype=np.float64)
        curves = {name: np.minimum(curve, cap) for name, curve in curves.items()}
    return curves


def finite_or_none(value: float) -> float | None:
    """JSON-friendly number: NaN becomes None (inf stays, JSON writer spells it)."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


@dataclass(frozen=True)
class ProtectedAudit:
    """Paper 002: speaker similarity matrices of originals (O) and protected versions (P)."""

    corpus: str
    feature: str
    aliases: tuple[str, ...]
    segments: int
    M_OO: np.ndarray  # (N, N) sigmoid of mean PAV-calibrated LLRs
    M_OP: np.ndarray
    M_PP: np.ndarray
    D_diag_OO: float
    D_diag_OP: float
    D_diag_PP: float
    DeID: float  # fraction
    GVD_dB: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "corpus": self.corpus,
            "feature": self.feature,
            "N": len(self.aliases),
            "segments": self.segments,
            "aliases": list(self.aliases),
            "D_diag_OO": self.D_diag_OO,
            "D_diag_OP": self.D_diag_OP,
            "D_diag_PP": self.D_diag_PP,
            "DeID": self.DeID,
            "GVD_dB": self.GVD_dB,
            "M_OO": self.M_OO.tolist(),
            "M_OP": self.M_OP.tolist(),
            "M_PP": self.M_PP.tolist(),
        }


def protected_audit(
    original: Sequence[SpeakerUtterances],
    protected: Sequence[SpeakerUtterances],
    *,
    corpus: str,
    feature: str = "embedding",
) -> ProtectedAudit:
    """M_OO, M_OP, M_PP, DeID and GVD on utterances present in both corpora (same speaker
    folder and file stem); segment = utterance, oracle (PAV) calibration per matrix, pairs of
    the same utterance left out of all three (DESIGN §4, §10 A20)."""
    from monitor.disclosure.similarity_matrices import (
        deid,
        diagonal_dominance,
        gvd,
        oracle_pair_llr,
        speaker_similarity_matrix,
    )
    from monitor.features.base import TemplateBatch, get_feature

    by_alias = {s.alias: s for s in protected}
    rows_o: list[np.ndarray] = []
    rows_p: list[np.ndarray] = []
    speaker_of: list[str] = []
    for speaker in original:
        other = by_alias.get(speaker.alias)
        if other is None:
            continue
        index = {u: i for i, u in enumerate(other.utterances)}
        common = [(i, index[u]) for i, u in enumerate(speaker.utterances) if u in index]
        if len(common) < 2:
            continue
        mine, theirs = (np.array(c) for c in zip(*common, strict=True))
        rows_o.append(np.asarray(speaker.values[feature])[mine])
        rows_p.append(np.asarray(other.values[feature])[theirs])
        speaker_of += [speaker.alias] * len(common)
    aliases = tuple(dict.fromkeys(speaker_of))
    if len(aliases) < 2:
        raise InputError(
            corpus,
            "fewer than 2 speakers share 2 or more utterances (same folder and file name) "
            "with the evaluation corpus",
        )
    X_o, X_p = np.concatenate(rows_o), np.concatenate(rows_p)
    labels = np.array(speaker_of)
    extractor = get_feature(feature)

    def matrix(A: np.ndarray, B: np.ndarray) -> np.ndarray:
        scores = extractor.similarities(A, TemplateBatch(feature, B))
        return speaker_similarity_matrix(oracle_pair_llr(scores, labels), labels)

    M_OO, M_OP, M_PP = matrix(X_o, X_o), matrix(X_o, X_p), matrix(X_p, X_p)
    return ProtectedAudit(
        corpus=corpus,
        feature=feature,
        aliases=tuple(sorted(aliases)),  # the matrices' order (np.unique)
        segments=int(labels.size),
        M_OO=M_OO,
        M_OP=M_OP,
        M_PP=M_PP,
        D_diag_OO=diagonal_dominance(M_OO),
        D_diag_OP=diagonal_dominance(M_OP),
        D_diag_PP=diagonal_dominance(M_PP),
        DeID=deid(M_OO, M_OP),
        GVD_dB=gvd(M_OO, M_PP),
    )
