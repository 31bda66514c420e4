"""One bucket's fit: the rank model and the LID logistic of every feature and of ``combined`` on
the eq. 6 trials of one test length, in this process (:func:`fit_trials`) or from sums the
workers bring back (:mod:`monitor.calibration.fit_rows`)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from monitor.calibration.buckets import (
    COMBINED,
    BucketCalibration,
)
from monitor.calibration.fusion import fit_fusion_weights, fuse_scores
from monitor.calibration.protocol import (
    PooledTrials,
    Trials,
)
from monitor.disclosure.lid import LidCalibration

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)


SeparableNotes = dict[str, list[float]]
"""feature -> test lengths (seconds) whose dev scores were perfectly separable."""


def fit_lid_noting(
    name: str, S: np.ndarray, truth: np.ndarray, seconds: float, notes: SeparableNotes | None
) -> LidCalibration:
    """``fit_lid_calibration`` that records a separable fit under the feature's name in
    ``notes`` (reported once per feature by :func:`warn_separable`) instead of warning each
    time; without ``notes`` it warns as usual."""
    from monitor.calibration.lid_fit import fit_lid_calibration

    return lid_noting(name, seconds, notes, lambda: fit_lid_calibration(S, truth))


def lid_noting(
    name: str, seconds: float, notes: SeparableNotes | None, fit: Callable[[], LidCalibration]
) -> LidCalibration:
    """``fit()`` (an LID fit) with a separable fit noted as :func:`fit_lid_noting` does."""
    from monitor.calibration.lid_fit import SeparableWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calibration = fit()
    for warning in caught:
        if notes is not None and issubclass(warning.category, SeparableWarning):
            lengths = notes.setdefault(name, [])
            if seconds not in lengths:
                lengths.append(seconds)
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    return calibration


def warn_separable(notes: SeparableNotes) -> None:
    """One warning naming every feature (and length) whose LID fit was separable."""
    if notes:
        listed = "; ".join(
            f"{name} at {', '.join(f'{s:g}' for s in sorted(lengths))} s"
            for name, lengths in notes.items()
        )
        logger.warning(
            "LID calibration: the dev scores are perfectly separable for %s: the "
            "maximum-likelihood weight is infinite, so the L2 penalty sets it (more or harder "
            "dev speakers give a real fit)",
            listed,
        )


def fit_trials(
    trials: Trials,
    *,
    seconds: float,
    loss: str = "ll",
    features: Sequence[str] | None = None,
    separable: SeparableNotes | None = None,
) -> dict[str, BucketCalibration]:
    """One bucket per feature and for ``combined`` from the trials of one length setting.

    Per feature: rank histogram (fractional ties) → beta-binomial fit with ``loss``; LID
    logistic on the z-normalised rows. ``combined`` fuses the features' z-scores with
    weights from :func:`fit_fusion_weights` and is then fitted the same way.
    """
    from monitor.disclosure.ranks import rank_histogram

    names = list(features if features is not None else trials.scores)
    scores = {name: trials.scores[name] for name in names}
    calibrations: dict[str, BucketCalibration] = {}

    def fit_one(
        name: str, S: np.ndarray, fusion: Mapping[str, float] | None = None
    ) -> BucketCalibration:
        histogram = rank_histogram(S, trials.truth)
        lid = fit_lid_noting(name, S, trials.truth, seconds, separable)
        return fitted_bucket(trials, seconds, loss, histogram, lid, fusion)

    for name in names:
        calibrations[name] = fit_one(name, scores[name])
    if len(names) > 1:
        weights = fit_fusion_weights(scores, trials.truth)
        calibrations[COMBINED] = fit_one(COMBINED, fuse_scores(scores, weights), weights)
    return calibrations


def fitted_bucket(
    trials: Trials | PooledTrials,
    seconds: float,
    loss: str,
    histogram: np.ndarray,
    lid: LidCalibration,
    fusion: Mapping[str, float] | None = None,
) -> BucketCalibration:
    """The bucket of a feature from its rank histogram (beta-binomial fit with ``loss``) and
    LID fit on the trials of one length setting."""
    from monitor.disclosure.srd import fit_rank_model

    rank_fit = fit_rank_model(histogram, loss=loss)  # type: ignore[arg-type]
    return BucketCalibration(
        seconds=float(seconds),
        alpha=rank_fit.alpha,
        beta=rank_fit.beta,
        loss=loss,
        lid_weight=float(lid.weight),
        lid_bias=float(lid.bias),
        log_prior_odds=float(lid.log_prior_odds),
        n_identities=trials.N,
        n_trials=trials.T,
        mean_test_seconds=float(np.mean(trials.test_seconds)),
        template_seconds=float(np.mean(trials.template_seconds)),
        max_seconds=float(np.max(trials.test_seconds)),
        fusion=dict(fusion or {}),
    )
