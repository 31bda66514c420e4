"""Per-speaker mean disclosure (paper 000 Fig. 6): each speaker's LL-fitted rank model, fitted
here or on Dask workers in batches of speakers (each fit is independent)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from monitor.blocks.workers import map_batches
from monitor.calibration.trial_rows import BlockProgress
from monitor.disclosure.ranks import histogram_of_rank_counts
from monitor.disclosure.srd import fit_rank_model

if TYPE_CHECKING:
    from monitor.blocks.workers import Client

logger = logging.getLogger(__name__)


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


def _meand_batch(
    batch: list[tuple[int, np.ndarray, np.ndarray]], N: int
) -> list[tuple[int, float]]:
    """A block of work: the per-speaker MeanDs of a batch of (index, above, tied) speakers."""
    values = speaker_meands([(above, ties) for _, above, ties in batch], N)
    return [(index, value) for (index, _, _), value in zip(batch, values, strict=True)]


def speaker_fits_on_workers(
    client: Client, progress: BlockProgress | None = None
) -> Callable[[Sequence[tuple[np.ndarray, np.ndarray]], int], list[float]]:
    """A per-speaker fitter (:data:`FitSpeakers`) whose fits run on the workers in batches of
    speakers (each fit is independent, so the values are the same);
    ``progress(done, total, "per-speaker fits")`` as batches finish."""

    def fit(speakers: Sequence[tuple[np.ndarray, np.ndarray]], N: int) -> list[float]:
        values: list[float] = [math.nan] * len(speakers)
        items = [(i, above, ties) for i, (above, ties) in enumerate(speakers)]
        fitted = 0

        def done(batch: list[Any], results: list[tuple[int, float]]) -> None:
            nonlocal fitted
            for index, value in results:
                values[index] = value
            fitted += len(results)
            if progress is not None:
                progress(fitted, len(values), "per-speaker fits")

        map_batches(client, _meand_batch, items, N, done=done)
        return values

    return fit
