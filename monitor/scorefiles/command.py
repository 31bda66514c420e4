"""``voxmeter score``: which inputs were given, read them, and the report they make (pooled
trials, a matrix here, or a .npy matrix in row blocks on Dask workers).

Imports numpy and pyarrow only; what a matrix needs is imported when a matrix is given, so
``--scores/--key`` starts fast.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from monitor.errors import InputError
from monitor.scorefiles.matrix_files import read_matrix_trials
from monitor.scorefiles.report import FIT_LOSSES, ScoreReport, pairs_report
from monitor.scorefiles.trials import read_scores_key
from monitor.userfiles import regular_file

if TYPE_CHECKING:
    pass


def score_report_from_files(
    *,
    scores: Path | None = None,
    key: Path | None = None,
    matrix: Path | None = None,
    truth: Path | None = None,
    dev_matrix: Path | None = None,
    dev_truth: Path | None = None,
    lid_weight: float | None = None,
    lid_bias: float | None = None,
    fit_loss: str = "cll",
    jobs: int = 1,
    scheduler: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ScoreReport:
    """Check which inputs were given, read them, and build the report (InputError on misuse).

    With ``jobs`` > 1 or a ``scheduler`` a .npy matrix is scored in row blocks by Dask workers
    (:mod:`monitor.scorefiles.npy_rows`; ``progress(done, total)`` per pass); same figures."""
    from monitor.blocks.workers import uses_cluster

    on_workers = uses_cluster(jobs, scheduler)
    pair_mode = scores is not None or key is not None
    matrix_mode = matrix is not None or truth is not None
    _check_mode(pair_mode, matrix_mode, fit_loss)
    if pair_mode:
        extras = [dev_matrix, dev_truth, lid_weight, lid_bias]
        return _pairs_report(*_pair_inputs(scores, key, extras, on_workers))
    if matrix is None or truth is None:
        raise InputError("--matrix" if matrix is None else "--truth", "missing: give both")
    _check_matrix_options(dev_matrix, dev_truth, lid_weight, lid_bias)
    _check_files(matrix, truth, dev_matrix, dev_truth)
    if on_workers:
        from monitor.scorefiles.npy_rows import matrix_report_on_workers

        try:
            return matrix_report_on_workers(
                matrix,
                truth,
                jobs=jobs,
                scheduler=scheduler,
                dev_paths=(dev_matrix, dev_truth) if dev_matrix and dev_truth else None,
                lid_weight=lid_weight,
                lid_bias=lid_bias,
                fit_loss=fit_loss,
                progress=progress,
            )
        except ValueError as error:  # the metrics refuse what the workers read
            raise InputError(str(matrix), f"cannot be scored: {error}") from error
    from monitor.scorefiles.matrix import matrix_report  # keeps `voxmeter score` start-up fast

    S, m = read_matrix_trials(matrix, truth)
    dev = read_matrix_trials(dev_matrix, dev_truth) if dev_matrix and dev_truth else None
    try:
        return matrix_report(
            S, m, dev=dev, lid_weight=lid_weight, lid_bias=lid_bias, fit_loss=fit_loss
        )
    except ValueError as error:  # input the readers accepted but the metrics cannot use
        raise InputError(str(matrix), f"cannot be scored: {error}") from error


def _check_mode(pair_mode: bool, matrix_mode: bool, fit_loss: str) -> None:
    """One kind of input, pairs or a matrix, and a loss the fit knows."""
    if pair_mode and matrix_mode:
        raise InputError("--scores/--key", "cannot be combined with --matrix/--truth")
    if not pair_mode and not matrix_mode:
        raise InputError("voxmeter score", "give --scores S --key K, or --matrix M --truth T")
    if fit_loss not in FIT_LOSSES:
        raise InputError("--fit-loss", f"{fit_loss!r} is not one of {', '.join(FIT_LOSSES)}")


def _pair_inputs(
    scores: Path | None, key: Path | None, extras: list[object], on_workers: bool
) -> tuple[Path, Path]:
    """Scores and key, both given, and none of the options only a matrix takes."""
    if scores is None or key is None:
        raise InputError("--scores" if scores is None else "--key", "missing: give both")
    if any(x is not None for x in extras):
        raise InputError("--scores/--key", "dev data and LID options need --matrix/--truth")
    if on_workers:
        raise InputError("--jobs/--scheduler", "only a --matrix is scored on Dask workers")
    return scores, key


def _pairs_report(scores: Path, key: Path) -> ScoreReport:
    """The report of a score file and its key (pooled trials)."""
    _check_files(scores, key)
    pairs = read_scores_key(scores, key)
    try:
        return pairs_report(pairs)
    except ValueError as error:  # input the readers accepted but the metrics cannot use
        raise InputError(f"{scores} + {key}", f"cannot be scored: {error}") from error


def _check_matrix_options(
    dev_matrix: Path | None,
    dev_truth: Path | None,
    lid_weight: float | None,
    lid_bias: float | None,
) -> None:
    """Where a matrix's LID calibration comes from: dev data, a weight and bias, or neither."""
    if (dev_matrix is None) != (dev_truth is None):
        raise InputError("--dev-matrix/--dev-truth", "give both or neither")
    if (lid_weight is None) != (lid_bias is None):
        raise InputError("--lid-weight/--lid-bias", "give both or neither")
    if lid_weight is not None and dev_matrix is not None:
        raise InputError("--lid-weight", "give either a dev matrix or a weight and bias, not both")
    for name, value in (("--lid-weight", lid_weight), ("--lid-bias", lid_bias)):
        if value is not None and not math.isfinite(value):
            raise InputError(name, f"must be a finite number, got {value}")


def _check_files(*paths: Path | None) -> None:
    """Every file given is a regular file, before any is read: a FIFO or /dev/zero named as
    the second file must not wait for, or read, the first one."""
    for path in paths:
        if path is not None:
            regular_file(path)
