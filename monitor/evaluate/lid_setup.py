"""Where a setting's LID weights come from: a speaker-disjoint calibration covering every
feature, or cross-fitting on two halves of the evaluation speakers."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from monitor.calibration.bucket_fit import SeparableNotes, fit_lid_noting
from monitor.calibration.buckets import COMBINED, CalibrationSet
from monitor.calibration.fusion import fit_fusion_weights, fuse_scores
from monitor.calibration.protocol import (
    Trials,
)
from monitor.disclosure.lid import LidCalibration, lid_per_trial
from monitor.evaluate.results import LID_SOURCES

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)


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
    if source == "calibration":
        return _from_calibration(trials, scores, features, calibration, seconds, evaluated)
    return _crossfitted(trials, scores, features, seconds, separable)


def _from_calibration(
    trials: Trials,
    scores: dict[str, np.ndarray],
    features: Sequence[str],
    calibration: CalibrationSet | None,
    seconds: float,
    evaluated: Mapping[str, Any] | None,
) -> LidSetup:
    """w_f and the combined weights from the calibration at ``seconds``: fitted on
    speaker-disjoint dev data, so the evaluation speakers only ever test them."""
    combine = len(features) > 1
    if calibration is None:
        raise ValueError("LID source 'calibration' needs a calibration")
    cals, fusion, description = calibration_weights(
        calibration, features, seconds, trials.aliases, evaluated
    )
    if combine:
        scores[COMBINED] = fuse_scores(scores, fusion)
    lid = {name: lid_per_trial(scores[name], trials.truth, cals[name].weight) for name in cals}
    return LidSetup(scores, lid, cals, fusion, description)


def _crossfitted(
    trials: Trials,
    scores: dict[str, np.ndarray],
    features: Sequence[str],
    seconds: float,
    separable: SeparableNotes | None,
) -> LidSetup:
    """The weights fitted on the trials of half the evaluation speakers and applied to the
    other half, both ways: with no calibration, no speaker tests weights fitted on itself."""
    combine = len(features) > 1
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
