"""A bucket fitted over row groups of its score matrices kept on workers (``calibrate --jobs``,
``--scheduler``): what a group is, and how the groups' results add.

This process pools a bucket's tests and templates (:func:`pool_trials`: T·D values, not T·N
scores) and scatters them to every worker once. The workers score every feature once, in the
blocks the single-process run scores (:func:`similarity_rows`, so the same bits, one task per
block), join them into the row groups of the LID fit's layout
(:func:`~monitor.disclosure.lid.fit_layout`) and keep them while the bucket is fitted. Each pass
over the groups returns only what the fits merge:

- rank counts (above, tied) per trial, concatenated into the rank histogram;
- the LID fit's first pass (:func:`scan_fit_group`: the mated z-scores, the extremes and the
  warm start's sample), then each Newton pass's six sums (:func:`fit_group_sums`), added here
  in group order as the fit's threads add them in one process;
- per evaluation of the fusion objective, its sums per group (:func:`fusion_sums`), added here
  in group order as :func:`fit_fusion_weights` adds them.

So no (T, N) matrix is ever whole in this process (each worker holds its groups), and the
calibration is the single-process one, bit for bit. ``combined`` is fused on the workers from
the kept features at each pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from monitor.blocks.workers import DaskRows, regrouped_rows
from monitor.calibration.bucket_fit import SeparableNotes, fitted_bucket, lid_noting
from monitor.calibration.buckets import COMBINED, BucketCalibration
from monitor.calibration.fusion import fit_fusion_sums, fuse_scores, fusion_blocks, fusion_sums
from monitor.calibration.lid_fit import (
    FitLayout,
    FitScan,
    SumsAt,
    fit_group_sums,
    fit_layout,
    fit_lid_passes,
    scan_fit_group,
)
from monitor.calibration.protocol import PooledTrials
from monitor.calibration.trial_rows import TrialLoader, pooled_arrays
from monitor.disclosure.lid import LidCalibration
from monitor.disclosure.ranks import (
    histogram_of_rank_counts,
    single_threaded_blas,
    true_rank_counts,
)
from monitor.features.base import embedding_backend

if TYPE_CHECKING:
    from monitor.blocks.workers import Client

Blocks = dict[str, np.ndarray]
"""A group's rows of every feature's score matrix."""


def bucket_rows(client: Client, pooled: PooledTrials, layout: FitLayout) -> DaskRows:
    """Every feature's score matrix of a bucket on the workers, kept there in the fit's row
    groups: scored in the blocks this process scores (one task each, so the workers share the
    scoring), then cut and joined into groups."""
    features = tuple(pooled.tests)
    return regrouped_rows(
        client,
        TrialLoader(features, features, pooled.N, embedding_backend()),
        (pooled.T, pooled.N),
        blocks=pooled.blocks(),
        groups=layout.groups(pooled.T),
        shared=pooled_arrays(pooled),
    )


def _matrix(scores: Blocks, name: str, fusion: Mapping[str, float]) -> np.ndarray:
    """A group's rows of matrix ``name``: a feature's scores, or ``combined`` fused from them."""
    return fuse_scores({f: scores[f] for f in fusion}, fusion) if name == COMBINED else scores[name]


def _first_pass(
    scores: Blocks,
    m: np.ndarray,
    row0: int,
    name: str,
    fusion: Mapping[str, float],
    stride: int,
    layout: FitLayout,
) -> tuple[np.ndarray, np.ndarray, FitScan]:
    """Row function: a group's rank counts (above, tied) and the LID fit's scan of it."""
    with single_threaded_blas():
        S = _matrix(scores, name, fusion)
        return (*true_rank_counts(S, m), scan_fit_group(S, m, row0, stride, layout))


def _newton_pass(
    scores: Blocks,
    m: np.ndarray,
    row0: int,
    name: str,
    fusion: Mapping[str, float],
    w: float,
    b: float,
    loss: bool,
    layout: FitLayout,
) -> npt.NDArray[np.float64]:
    """Row function: a group's logistic sums at (w, b) (z-normalised again on the worker)."""
    with single_threaded_blas():
        return fit_group_sums(_matrix(scores, name, fusion), row0, w, b, loss, layout)


def _fusion_pass(
    scores: Blocks, m: np.ndarray, row0: int, names: tuple[str, ...], w: np.ndarray
) -> npt.NDArray[np.float64]:
    """Row function: a group's sums of the fusion objective at weights w."""
    with single_threaded_blas():
        return fusion_sums({n: scores[n] for n in names}, m, w)


class _MatrixFit:
    """The rank histogram and LID fit of one matrix (a feature's, or ``combined`` with
    ``fusion``) on the workers: the first pass gives the rank counts with the fit's scan,
    later passes the Newton sums."""

    def __init__(
        self, rows: DaskRows, layout: FitLayout, name: str, fusion: Mapping[str, float]
    ) -> None:
        self.rows, self.layout, self.name, self.fusion = rows, layout, name, dict(fusion)
        self.histogram = np.empty(0)

    def scans(self, stride: int) -> list[FitScan]:
        parts = self.rows.map(_first_pass, self.name, self.fusion, stride, self.layout)
        above = np.concatenate([part[0] for part in parts])
        ties = np.concatenate([part[1] for part in parts])
        self.histogram = histogram_of_rank_counts(above, ties, self.rows.shape[1])
        return [part[2] for part in parts]

    def sums(self, scan: FitScan) -> SumsAt:
        def sums_at(w: float, b: float, loss: bool) -> npt.NDArray[np.float64]:
            parts = self.rows.map(_newton_pass, self.name, self.fusion, w, b, loss, self.layout)
            return sum(parts, np.zeros(6))

        return sums_at

    def lid(self) -> LidCalibration:
        with single_threaded_blas():  # the warm start's sums in this process, as in one
            return fit_lid_passes(self.rows.shape, self.scans, self.sums)


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
    layout = fit_layout(pooled.N)
    rows = bucket_rows(client, pooled, layout)
    names = tuple(features if features is not None else pooled.tests)

    def fit_one(name: str, fusion: Mapping[str, float] | None = None) -> BucketCalibration:
        matrix = _MatrixFit(rows, layout, name, fusion or {})
        lid = lid_noting(name, seconds, separable, matrix.lid)
        return fitted_bucket(pooled, seconds, loss, matrix.histogram, lid, fusion)

    try:
        calibrations = {name: fit_one(name) for name in names}
        if len(names) > 1:
            assert fusion_blocks(pooled.T, pooled.N) == rows.blocks  # as fit_fusion_weights

            def block_sums(w: np.ndarray) -> list[Any]:
                return rows.map(_fusion_pass, names, w)

            weights = fit_fusion_sums(names, pooled.T, block_sums)
            calibrations[COMBINED] = fit_one(COMBINED, weights)
    finally:
        rows.release()
    return calibrations
