"""The figures do not depend on how many BLAS threads the process runs: Dask workers run one
(distributed's pre-spawn environment), the client as many as the machine has cores, and the
cluster tests compare the two bit for bit. Checked here at 1 and 8 threads in one process (8 is
more than most test machines have: OpenBLAS then splits every product it threads)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from monitor.blocks.synthetic import SyntheticMatrix
from monitor.scorefiles.matrix import matrix_report
from monitor.scorefiles.report import report_json
from tests.calibration.synthetic import synthetic_speakers


def at_thread_counts(compute: Callable[[], Any]) -> list[Any]:
    results = []
    for threads in (1, 8):
        with threadpool_limits(limits=threads, user_api="blas"):
            results.append(compute())
    return results


def test_matrix_report_and_lid_fit_at_1_and_8_blas_threads() -> None:
    from monitor.calibration.lid_fit import fit_lid_calibration

    S, m = SyntheticMatrix(T=7000, N=320, seed=9, separation=1.2)(0, 7000)
    one, many = at_thread_counts(lambda: fit_lid_calibration(S, m))
    assert one == many  # weight, bias and prior, bit for bit
    small, truth = S[:600], m[:600]
    one, many = at_thread_counts(
        lambda: report_json(matrix_report(small, truth, lid_weight=2.5, lid_bias=-3.0))
    )
    assert one == many


def test_calibration_at_1_and_8_blas_threads() -> None:
    from monitor.calibration.fit import calibrate_speakers

    speakers = synthetic_speakers(
        np.random.default_rng(5), n_speakers=12, n_utterances=7, overlap=0.8
    )

    def calibrate() -> str:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            calibration = calibrate_speakers(
                speakers,
                buckets=(3.0, 6.0),
                template_seconds=6.0,
                features=("f0", "phone", "embedding"),
            )
        calibration.metadata.pop("created")  # type: ignore[attr-defined]
        return calibration.to_json()

    one, many = at_thread_counts(calibrate)
    assert one == many
