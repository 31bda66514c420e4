"""``calibrate``'s score matrices in row groups on Dask workers (``--jobs``, ``--scheduler``).

This process pools a bucket's tests and templates (:func:`pool_trials`: T·D values, not T·N
scores) and scatters them to every worker once. Each task scores one group of rows of the LID
fit's layout (:func:`~monitor.disclosure.lid.fit_layout`) from the blocks the single-process run
scores (:func:`similarity_rows`, so the same bits), and returns only what its fits merge:

- rank counts (above, tied) per trial, concatenated into the rank histogram;
- the LID fit's first pass (:func:`scan_fit_group`: the mated z-scores, the extremes and the
  warm start's sample), then each Newton pass's six sums (:func:`fit_group_sums`), added here
  in group order as the fit's threads add them in one process;
- per evaluation of the fusion objective, its sums per group (:func:`fusion_sums`), added here
  in group order as :func:`fit_fusion_weights` adds them.

So no (T, N) matrix is ever whole in one place, and the calibration is the single-process one,
bit for bit. Scores are made again for each pass (a pass costs one scoring of the matrix).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from monitor.calibration.fit import (
    COMBINED,
    BucketCalibration,
    SeparableNotes,
    fit_fusion_sums,
    fitted_bucket,
    fusion_blocks,
    fusion_sums,
    lid_noting,
)
from monitor.calibration.protocol import PooledTrials
from monitor.cluster import DaskRows
from monitor.disclosure.lid import (
    FitLayout,
    FitScan,
    LidCalibration,
    SumsAt,
    fit_group_sums,
    fit_layout,
    fit_lid_passes,
    scan_fit_group,
)
from monitor.disclosure.ranks import (
    histogram_of_rank_counts,
    single_threaded_blas,
    true_rank_counts,
)
from monitor.evaluate.cluster import TrialLoader
from monitor.features.base import embedding_backend

if TYPE_CHECKING:
    from distributed import Client


@dataclass(frozen=True)
class SpanLoader:
    """Picklable loader of any rows [r0, r1) of a bucket's matrices (a :class:`DaskRows` load):
    the scoring ``blocks`` that cover them are made by ``loader`` (as this process makes them)
    and cut to the rows asked for."""

    loader: TrialLoader
    blocks: tuple[tuple[int, int], ...]

    def __call__(
        self, r0: int, r1: int, truth: np.ndarray, *pooled: np.ndarray
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        first = bisect.bisect_right([b0 for b0, _ in self.blocks], r0) - 1
        parts: list[dict[str, np.ndarray]] = []
        for b0, b1 in self.blocks[first:]:
            if b0 >= r1:
                break
            scores = self.loader(b0, b1, truth, *pooled)[0]
            parts.append({n: S[max(r0, b0) - b0 : min(r1, b1) - b0] for n, S in scores.items()})
        joined = {n: np.concatenate([part[n] for part in parts]) for n in self.loader.names}
        return joined, truth[r0:r1]


class BucketRows:
    """A bucket's score matrices on the workers, visited in the fit's row groups; the pooled
    observations are scattered once and shared by every pass."""

    def __init__(self, client: Client, pooled: PooledTrials) -> None:
        self.client = client
        self.pooled = pooled
        self.features = tuple(pooled.tests)
        self.layout = fit_layout(pooled.N)
        arrays = [pooled.truth]
        arrays += [a for f in self.features for a in (pooled.tests[f], pooled.templates[f])]
        self.shared = list(client.scatter(arrays, broadcast=True, hash=False))

    def rows(self, names: Sequence[str], fusion: Mapping[str, float] | None = None) -> DaskRows:
        """The matrices ``names`` (features, or ``combined`` fused with ``fusion``) in groups."""
        pooled = self.pooled
        loader = TrialLoader(
            tuple(names), self.features, pooled.N, embedding_backend(), dict(fusion or {})
        )
        return DaskRows(
            self.client,
            SpanLoader(loader, tuple(pooled.blocks())),
            (pooled.T, pooled.N),
            blocks=self.layout.groups(pooled.T),
            shared=self.shared,
        )


def _first_pass(
    scores: dict[str, np.ndarray], m: np.ndarray, row0: int, stride: int, layout: FitLayout
) -> tuple[np.ndarray, np.ndarray, FitScan]:
    """Row function: a group's rank counts (above, tied) and the LID fit's scan of it."""
    (S,) = scores.values()
    with single_threaded_blas():
        return (*true_rank_counts(S, m), scan_fit_group(S, m, row0, stride, layout))


def _newton_pass(
    scores: dict[str, np.ndarray],
    m: np.ndarray,
    row0: int,
    w: float,
    b: float,
    loss: bool,
    layout: FitLayout,
) -> npt.NDArray[np.float64]:
    """Row function: a group's logistic sums at (w, b) (z-normalised again on the worker)."""
    (S,) = scores.values()
    with single_threaded_blas():
        return fit_group_sums(S, row0, w, b, loss, layout)


def _fusion_pass(
    scores: dict[str, np.ndarray], m: np.ndarray, row0: int, w: np.ndarray
) -> npt.NDArray[np.float64]:
    """Row function: a group's sums of the fusion objective at weights w."""
    with single_threaded_blas():
        return fusion_sums(scores, m, w)


class _MatrixFit:
    """The rank histogram and LID fit of one matrix on the workers: the first pass gives the
    rank counts with the fit's scan, later passes the Newton sums."""

    def __init__(self, rows: DaskRows, layout: FitLayout, shape: tuple[int, int]) -> None:
        self.rows, self.layout, self.shape = rows, layout, shape
        self.histogram = np.empty(0)

    def scans(self, stride: int) -> list[FitScan]:
        parts = self.rows.map(_first_pass, stride, self.layout)
        above = np.concatenate([part[0] for part in parts])
        ties = np.concatenate([part[1] for part in parts])
        self.histogram = histogram_of_rank_counts(above, ties, self.shape[1])
        return [part[2] for part in parts]

    def sums(self, scan: FitScan) -> SumsAt:
        def sums_at(w: float, b: float, loss: bool) -> npt.NDArray[np.float64]:
            parts = self.rows.map(_newton_pass, w, b, loss, self.layout)
            return sum(parts, np.zeros(6))

        return sums_at

    def lid(self) -> LidCalibration:
        with single_threaded_blas():  # the warm start's sums in this process, as in one
            return fit_lid_passes(self.shape, self.scans, self.sums)


def fit_on_workers(
    client: Client,
    pooled: PooledTrials,
    *,
    seconds: float,
    loss: str = "ll",
    features: Sequence[str] | None = None,
    separable: SeparableNotes | None = None,
) -> dict[str, BucketCalibration]:
    """:func:`~monitor.calibration.fit.fit_trials` of a bucket's pooled trials, its matrices
    scored and fitted in row groups on the workers: the same buckets, bit for bit."""
    bucket = BucketRows(client, pooled)
    names = list(features if features is not None else pooled.tests)
    shape = (pooled.T, pooled.N)

    def fit_one(
        name: str, rows: DaskRows, fusion: Mapping[str, float] | None = None
    ) -> BucketCalibration:
        matrix = _MatrixFit(rows, bucket.layout, shape)
        lid = lid_noting(name, seconds, separable, matrix.lid)
        return fitted_bucket(pooled, seconds, loss, matrix.histogram, lid, fusion)

    calibrations = {name: fit_one(name, bucket.rows([name])) for name in names}
    if len(names) > 1:
        all_rows = bucket.rows(names)
        assert fusion_blocks(*shape) == all_rows.blocks  # the blocks fit_fusion_weights sums

        def block_sums(w: np.ndarray) -> list[Any]:
            return all_rows.map(_fusion_pass, w)

        weights = fit_fusion_sums(names, pooled.T, block_sums)
        calibrations[COMBINED] = fit_one(COMBINED, bucket.rows([COMBINED], weights), weights)
    return calibrations
