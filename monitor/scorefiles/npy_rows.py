"""``voxmeter score --matrix M.npy --jobs N`` (or ``--scheduler``): a block is a run of the
matrix's rows, read by a worker straight from the file.

This process reads only the .npy header and the truth; every worker memory-maps the file by
its absolute path and reads its own blocks of rows, so the matrix is never whole anywhere (and
never pickled). On a cluster of several machines the file must be visible to every worker at
that same path (a shared file system); a worker that cannot open it is one error line here.
The figures are those of the single-process report (:func:`monitor.scorefiles.report.rows_report`
merges exactly).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from monitor.blocks.workers import DaskRows, dask_client
from monitor.calibration.lid_fit import (
    FitLayout,
    FitScan,
    SumsAt,
    fit_group_sums,
    fit_layout,
    fit_lid_passes,
    scan_fit_group,
)
from monitor.disclosure.lid import LidCalibration
from monitor.disclosure.ranks import chunk_rows, single_threaded_blas
from monitor.errors import InputError
from monitor.scorefiles.matrix_files import check_matrix_truth, read_matrix_trials, read_truth

if TYPE_CHECKING:
    from monitor.blocks.workers import Client
    from monitor.scorefiles.report import ScoreReport

#: progress(done, total) of the row blocks of one pass over the matrix.
PassProgress = Callable[[int, int], None]


def _as_scores(array: np.ndarray) -> np.ndarray:
    """float32 and float64 stay as they are; integers widen to float64 (as ``read_matrix``)."""
    keep = array.dtype in (np.dtype(np.float32), np.dtype(np.float64))
    return np.array(array, copy=True) if keep else array.astype(np.float64)


def open_npy_matrix(path: Path) -> np.ndarray:
    """The .npy score matrix memory-mapped read-only, its shape and type checked (InputError);
    its values are checked block by block where they are read."""
    if path.suffix.lower() != ".npy":
        raise InputError(
            str(path),
            "--jobs/--scheduler read the matrix on the workers from a .npy file "
            "(np.save it, or score it without --jobs)",
        )
    if not path.is_file():
        raise InputError(str(path), "no such file")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise InputError(str(path), f"not a readable .npy array ({error})") from None
    if not isinstance(array, np.ndarray):  # an .npz archive under a .npy name
        raise InputError(str(path), "a .npz (zip) archive, not a .npy array")
    if array.ndim != 2:
        raise InputError(
            str(path), f"expected a 2-D (trials × identities) array, got shape {array.shape}"
        )
    if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise InputError(str(path), f"expected numbers, got dtype {array.dtype}")
    if array.size == 0:
        raise InputError(str(path), f"empty matrix (shape {array.shape})")
    return array


@dataclass(frozen=True)
class NpyRows:
    """Picklable :class:`DaskRows` loader: rows [r0, r1) of the .npy at ``path`` (absolute),
    memory-mapped on the worker, with their truth (the scattered truth array)."""

    path: str

    def __call__(self, r0: int, r1: int, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        matrix = np.load(self.path, mmap_mode="r", allow_pickle=False)
        return _as_scores(matrix[r0:r1]), truth[r0:r1]


def _scan_group(S: np.ndarray, m: np.ndarray, row0: int, stride: int, layout: FitLayout) -> FitScan:
    """Row function: the LID fit's first pass over one row group."""
    with single_threaded_blas():
        return scan_fit_group(S, m, row0, stride, layout)


def _group_sums(
    S: np.ndarray, m: np.ndarray, row0: int, w: float, b: float, loss: bool, layout: FitLayout
) -> np.ndarray:
    """Row function: one Newton pass's six sums over one row group."""
    with single_threaded_blas():
        return fit_group_sums(S, row0, w, b, loss, layout)


def fit_lid_on_workers(
    client: Client, load: NpyRows, truth: np.ndarray, shape: tuple[int, int]
) -> LidCalibration:
    """:func:`~monitor.disclosure.lid.fit_lid_calibration` of the matrix, its passes run by the
    workers over the fit's fixed row groups and added here in row order: the same bits as the
    fit in one process, and the matrix is never read here."""
    T, N = shape
    layout = fit_layout(N)
    groups = DaskRows(client, load, shape, blocks=layout.groups(T), shared=[truth])

    def scans(stride: int) -> list[FitScan]:
        return groups.map(_scan_group, stride, layout)

    def sums(_scan: FitScan) -> SumsAt:
        def at(w: float, b: float, loss: bool) -> np.ndarray:
            parts = groups.map(_group_sums, w, b, loss, layout)
            return sum(parts, np.zeros(6))

        return at

    with single_threaded_blas():  # the warm start's sums here, as in one process
        return fit_lid_passes(shape, scans, sums)


def matrix_report_on_workers(
    matrix: Path,
    truth_path: Path,
    *,
    jobs: int,
    scheduler: str | None,
    dev_paths: tuple[Path, Path] | None,
    lid_weight: float | None,
    lid_bias: float | None,
    fit_loss: str,
    progress: PassProgress | None = None,
) -> ScoreReport:
    """:func:`monitor.scorefiles.matrix.rows_report` of a .npy matrix whose row blocks Dask workers
    read (a LocalCluster of ``jobs`` processes, or ``scheduler``). Without a dev matrix or a
    weight and bias, the LID calibration is fitted on the matrix itself by the workers too
    (:func:`fit_lid_on_workers`). ``dev_paths``: the dev matrix and its truth, read here."""
    from monitor.scorefiles.matrix import rows_report

    S = open_npy_matrix(matrix)
    truth = read_truth(truth_path)
    check_matrix_truth(S, truth, matrix, truth_path)
    dev = read_matrix_trials(*dev_paths) if dev_paths is not None else None

    T, N = (int(n) for n in S.shape)
    load = NpyRows(os.path.abspath(matrix))
    with dask_client(jobs, scheduler) as client:

        def fit_on_eval() -> LidCalibration:
            return fit_lid_on_workers(client, load, truth, (T, N))

        rows = DaskRows(
            client,
            load,
            (T, N),
            rows_per_task=chunk_rows(N),
            shared=[truth],
            progress=progress,
        )
        try:
            return rows_report(
                rows,
                dev=dev,
                lid_weight=lid_weight,
                lid_bias=lid_bias,
                fit_loss=fit_loss,
                fit_on_eval=fit_on_eval,
            )
        except (FileNotFoundError, PermissionError) as error:  # raised on a worker
            raise InputError(
                str(matrix),
                f"a Dask worker cannot read it ({error}); every worker must see the file "
                "at this path",
            ) from None
