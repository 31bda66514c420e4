"""Figures against a declared population of N_pop identities (``[population] size``).

The scorer's own figures say how far speech narrows down who speaks among the N templates
present, at most log2 N bits. A household is not told apart from a few hundred reference
voices but from its town, country or the world: :class:`PopulationView` restates each
feature's LID and SRD against N_pop through the population model fitted on the reference
templates (:mod:`monitor.disclosure.population`; the shipped one comes with the reference
population, :mod:`monitor.population.shipped`). The ceiling becomes log2 N_pop; where the
subject's score lies beyond what the reference population can validate, the figure is the
lower bound at the edge of that range and is flagged "at least". The cost is O(N + K) per
figure: nothing loops over N_pop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.calibration.buckets import CalibrationSet
from monitor.disclosure.population import PopulationSet, population_figures

FloatArray = npt.NDArray[np.floating]
MIN_COMPARABLE = 3
"""Fewest comparable templates a row is restricted to (the subject and two impostors)."""


@dataclass(frozen=True)
class PopulationFigure:
    """One (feature, measure) figure of some evidence against N_pop (the model's estimate, what
    a budget compares) and, where the subject's score lies beyond what the reference
    population can validate, the lower bound it does vouch for (else None)."""

    bits: float
    at_least: float | None


@dataclass(frozen=True)
class PopulationView:
    """The population model and the declared population size N_pop (identities).

    ``comparable``: the templates whose scores are of one kind with the subject's (None: all).
    An attacker holding anonymised templates for the household only (the lazy-informed one)
    scores the rest of the population by their clean templates, against which anonymised
    speech scores low and close together: the row's mean and spread then describe that
    mismatch, and a household template stands out of it by "anonymised the same way", not
    by "the same voice". The model, fitted on rows of one kind, would read that margin as
    identity and carry it to N_pop; the figures are therefore taken over the comparable
    templates alone (while at least three are, and the subject is one of them)."""

    models: PopulationSet
    size: float
    comparable: npt.NDArray[np.intp] | None = None
    sample: npt.NDArray[np.bool_] | None = None
    """(N,): the templates that are a random sample of the population (the shipped reference
    speakers, not the household): where enough of them lie near a window, the population
    holds proportionally as many near it (:func:`population_figures`)."""

    @property
    def ceiling_bits(self) -> float:
        return math.log2(self.size)

    def restricted(self, comparable: npt.NDArray[np.intp]) -> PopulationView:
        """This view with the figures taken over the templates ``comparable`` (indices)."""
        kept = np.asarray(comparable, dtype=np.intp)
        return PopulationView(self.models, self.size, kept, self.sample)

    def _row(
        self, scores: FloatArray, index: int
    ) -> tuple[FloatArray, int, npt.NDArray[np.bool_] | None]:
        """The scores the figures read (the comparable templates), the subject among them and
        which of them are sampled."""
        kept, sample = self.comparable, self.sample
        if sample is not None and sample.shape != np.shape(scores):
            sample = None  # a row of other templates (a test's scorer): no sample known
        if kept is None or kept.size < MIN_COMPARABLE or not np.any(kept == index):
            return scores, index, sample
        subset = None if sample is None else sample[kept]
        return np.asarray(scores)[kept], int(np.flatnonzero(kept == index)[0]), subset

    def figures(
        self,
        scores: FloatArray,
        index: int,
        feature: str,
        seconds: float,
        calibration: CalibrationSet,
    ) -> tuple[PopulationFigure, PopulationFigure]:
        """(LID, SRD) of the subject ``index`` among N_pop from one row of scores (N,) of
        ``feature`` (``combined``: the fused row) behind ``seconds`` of speech; the templates
        present are members of the population. Only LID carries an "at least" bound."""
        bucket, _ = calibration.lookup(feature, seconds)
        scores, index, sample = self._row(scores, index)
        result = population_figures(
            scores,
            index,
            model=self.models.lookup(feature, seconds),
            population=self.size,
            lid_weight=bucket.lid_weight,
            alpha=bucket.alpha,
            beta=bucket.beta,
            lid_bias=bucket.lid_bias,
            log_prior_odds=bucket.log_prior_odds,
            sample=sample,
        )
        beyond = bool(result.beyond_reference[0])
        return (
            PopulationFigure(
                float(result.lid_bits[0]),
                float(result.lid_at_least_bits[0]) if beyond else None,
            ),
            PopulationFigure(float(result.srd_bits[0]), None),
        )
