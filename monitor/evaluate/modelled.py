"""The audit's measured figures beside the population model's, per feature.

The audit measures each trial against the N speakers of the corpus it was given. The daemon
states its figures against a population of N_pop through the population model shipped with the
reference population (:mod:`monitor.population.shipped`). Beside each measured figure the report
therefore shows what the model predicts for the same trials at the same N (does the model match
what was measured on these speakers, whom the shipped population has never seen?) and at N_pop,
with the share of trials whose evidence lies beyond what the reference can validate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from monitor.disclosure.lid import LidCalibration
from monitor.disclosure.population import PopulationSet, population_figures
from monitor.evaluate.results import FeatureAudit

MIN_TEMPLATES = 3
"""population_figures needs the subject and two impostors in a row."""


def modelled_feature(
    audit: FeatureAudit,
    scores: np.ndarray,
    truth: np.ndarray,
    cal: LidCalibration,
    *,
    model: PopulationSet,
    seconds: float,
    population: float,
) -> dict[str, float] | None:
    """Measured and modelled mean LID and rank-1 rate of one feature's trials (T, N) at the
    audit's N, and the modelled figures at ``population`` (None when the model has no such
    feature or the matrix is too small)."""
    T, N = scores.shape
    if audit.feature not in model.features or N < MIN_TEMPLATES or T == 0:
        return None
    fit = audit.model
    alpha, beta = (fit.alpha, fit.beta) if fit.alpha > 0 and fit.beta > 0 else (1.0, 1.0)
    common = {
        "model": model.lookup(audit.feature, seconds),
        "lid_weight": cal.weight,
        "alpha": alpha,
        "beta": beta,
        "lid_bias": cal.bias,
        "log_prior_odds": cal.log_prior_odds,
    }
    at_n = population_figures(scores, truth, population=float(N), **common)  # type: ignore[arg-type]
    at_pop = population_figures(scores, truth, population=population, **common)  # type: ignore[arg-type]
    return {
        "N": float(N),
        "ALID_measured": float(np.mean(audit.lid)),
        "ALID_modelled": float(np.mean(at_n.lid_bits)),
        "rank1_measured": float(audit.histogram[0] / max(audit.histogram.sum(), 1.0)),
        "rank1_modelled": float(np.mean(at_n.rank1_probability)),
        "N_pop": float(population),
        "ceiling_bits_at_N_pop": math.log2(population),
        "ALID_at_N_pop": float(np.mean(at_pop.lid_bits)),
        "rank1_at_N_pop": float(np.mean(at_pop.rank1_probability)),
        "beyond_reference_share": float(np.mean(at_pop.beyond_reference)),
    }


def modelled(
    audits: Mapping[str, FeatureAudit],
    scores: Mapping[str, np.ndarray],
    truth: np.ndarray,
    calibrations: Mapping[str, LidCalibration],
    *,
    model: PopulationSet | None,
    seconds: float,
    population: float,
) -> dict[str, dict[str, float]]:
    """:func:`modelled_feature` of every feature the model covers (empty without a model)."""
    if model is None:
        return {}
    out = {}
    for name, audit in audits.items():
        row = modelled_feature(
            audit,
            scores[name],
            truth,
            calibrations[name],
            model=model,
            seconds=seconds,
            population=population,
        )
        if row is not None:
            out[name] = row
    return out
