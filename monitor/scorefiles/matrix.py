"""``voxmeter score --matrix``: the 1-to-N report of a score matrix visited in row blocks.

Apart from :mod:`monitor.scorefiles.report` so that the pooled-trial path (``--scores/--key``) never
imports what only a matrix needs (LID, SRD and their scipy fits).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from monitor.calibration.lid_fit import fit_lid_calibration
from monitor.disclosure.baselines import (
    baselines_of_blocks,
    linkability_bins,
    linkability_of_counts,
)
from monitor.disclosure.blocks import matrix_blocks
from monitor.disclosure.lid import LidCalibration, cllr_of_costs, lid_summary
from monitor.disclosure.matrix_scan import (
    InMemoryRows,
    MatrixScan,
    RowSource,
    merge_scans,
    rows_between,
    rows_histogram,
    rows_lid_costs,
    rows_mated,
    rows_scan,
)
from monitor.disclosure.ranks import check_scores, histogram_of_rank_counts
from monitor.disclosure.srd import fit_rank_model, srd_stats
from monitor.disclosure.zebra import zebra_of_blocks
from monitor.scorefiles.report import FIT_LOSSES, LID_SOURCES, ScoreReport, collect_notes


def _matrix_pooled_metrics(rows: RowSource, mated: np.ndarray, scan: MatrixScan) -> dict[str, Any]:
    """ZEBRA and baselines of a matrix's mated / non-mated split from its first-pass scan, plus
    one more pass for the linkability histograms; the split is never copied out."""
    T, N = rows.shape
    if N < 2:
        raise ValueError("non-targets: no scores")
    blocks = matrix_blocks(mated, scan.counts)

    def between(low: float, high: float) -> np.ndarray:
        return np.concatenate(rows.map(rows_between, low, high))

    eer, eer_hull, min_cost = baselines_of_blocks(blocks, between)
    grid = linkability_bins(T, scan.low, scan.high)
    if grid is None or isinstance(grid, float):
        link = math.nan if grid is None else grid
    else:
        edges, scale = grid
        mated_counts = np.histogram(mated.astype(np.float64) / scale, bins=edges)[0]
        non_counts = sum(rows.map(rows_histogram, edges, scale)) - mated_counts
        link = linkability_of_counts(mated_counts, non_counts, edges)
    return {
        "n_tar": T,
        "n_non": T * (N - 1),
        "zebra": zebra_of_blocks(blocks),
        "EER": eer,
        "EER_rocch": eer_hull,
        "min_Cllr": min_cost,
        "linkability": link,
    }


def matrix_report(
    S: np.ndarray,
    m: np.ndarray,
    *,
    dev: tuple[np.ndarray, np.ndarray] | None = None,
    lid_weight: float | None = None,
    lid_bias: float | None = None,
    fit_loss: str = "cll",
) -> ScoreReport:
    """1-to-N report of a (T, N) matrix with truth (T,): SRD, LID, and ZEBRA/baselines on the
    mated/non-mated split. The LID calibration comes from ``dev``, from the given weight and
    bias, or else from the evaluation matrix itself (reported as such)."""
    check_scores(S)
    return rows_report(
        InMemoryRows(S, m),
        dev=dev,
        lid_weight=lid_weight,
        lid_bias=lid_bias,
        fit_loss=fit_loss,
        fit_on_eval=lambda: fit_lid_calibration(S, m),
    )


def rows_report(
    rows: RowSource,
    *,
    dev: tuple[np.ndarray, np.ndarray] | None = None,
    lid_weight: float | None = None,
    lid_bias: float | None = None,
    fit_loss: str = "cll",
    fit_on_eval: Callable[[], LidCalibration] | None = None,
) -> ScoreReport:
    """:func:`matrix_report` of a matrix visited in row blocks, in memory or on Dask workers
    (:class:`monitor.blocks.workers.DaskRows`); the figures do not depend on where the rows are.
    ``fit_on_eval`` fits the LID calibration on the whole matrix when neither a dev matrix nor
    a weight and bias is given (a matrix spread over workers needs one of them)."""
    if fit_loss not in FIT_LOSSES:
        raise ValueError(f"fit_loss {fit_loss!r} is not one of {FIT_LOSSES}")
    T, N = rows.shape
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mated = np.concatenate(rows.map(rows_mated))
        scan = merge_scans(rows.map(rows_scan, mated))
        hist = histogram_of_rank_counts(scan.above, scan.ties, N)
        fit = fit_rank_model(hist, loss=fit_loss)  # type: ignore[arg-type]
        if lid_weight is not None and lid_bias is not None:
            source = "given"
            cal = LidCalibration(lid_weight, lid_bias, -math.log(N - 1))
        elif dev is not None:
            source = "dev"
            cal = fit_lid_calibration(*dev)
        elif fit_on_eval is not None:
            source = "eval"
            cal = fit_on_eval()
        else:
            raise ValueError("the LID calibration needs a dev matrix or a weight and bias here")
        lid_rows, cost_rows = zip(*rows.map(rows_lid_costs, cal), strict=True)
        lid = lid_summary(np.concatenate(lid_rows), cal)
        value = cllr_of_costs(np.concatenate(cost_rows), N)
        metrics = _matrix_pooled_metrics(rows, mated, scan)
    notes = list(collect_notes(caught))
    if fit.at_bound:
        notes.append(
            f"beta-binomial fit ({fit_loss}) stopped at the parameter bound: the histogram is "
            "degenerate (e.g. every trial at rank 1)"
        )
    if source == "eval":
        notes.append("LID calibration " + LID_SOURCES["eval"])
    return ScoreReport(
        Cllr=value,
        srd=srd_stats(hist),
        fit=fit,
        lid=lid,
        lid_source=source,
        top1_linkage=float(np.mean(mated > scan.best_other)),
        T=T,
        N=N,
        notes=tuple(notes),
        **metrics,
    )
