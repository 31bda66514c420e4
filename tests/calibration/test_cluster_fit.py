"""``calibrate`` on Dask: the score matrices scored and fitted by 2 worker processes in the LID
fit's row groups (rank counts, the fit's scan and Newton sums, the fusion objective's sums)
give the single-process calibration bit for bit, and never come back whole."""

from __future__ import annotations

import json
import shutil
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import monitor.calibration.lid_fit as lid_fit
import monitor.calibration.protocol as protocol
import monitor.disclosure.lid as lid_module
from monitor.blocks.workers import DaskRows
from monitor.calibration.bucket_fit import fit_trials
from monitor.calibration.buckets import COMBINED, CalibrationSet
from monitor.calibration.fit import calibrate_speakers
from monitor.calibration.fit_rows import fit_on_workers
from monitor.calibration.protocol import pool_trials, scored_trials
from monitor.cli import app
from tests.calibration.synthetic import synthetic_speakers
from tests.evaluate.test_cli_end_to_end import link_subset

pytest.importorskip("distributed")

FEATURES = ("f0", "phone", "embedding")
runner = CliRunner(env={"COLUMNS": "1000"})


def _calibrate(speakers: list[Any], **options: Any) -> CalibrationSet:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        calibration = calibrate_speakers(
            speakers, buckets=(3.0, 6.0), template_seconds=6.0, features=FEATURES, **options
        )
    calibration.metadata.pop("created")  # type: ignore[attr-defined]
    return calibration


@pytest.fixture(scope="module")
def speakers() -> list[Any]:
    return synthetic_speakers(np.random.default_rng(5), n_speakers=12, n_utterances=7, overlap=0.8)


def test_a_calibration_on_two_workers_equals_the_single_process_one(speakers, cluster_client):
    local = _calibrate(speakers)
    spread = _calibrate(speakers, client=cluster_client)
    assert set(local.features) == {*FEATURES, COMBINED}
    assert spread.to_json() == local.to_json()  # every figure, to the last bit


def test_many_row_groups_warm_start_and_no_whole_matrix_in_this_process(
    speakers, cluster_client, monkeypatch
):
    # Groups of 2 blocks of 5 rows (9 groups per matrix) and a warm start on a sample: the
    # path of a large matrix, with the layout (fixed here) sent to the workers with each task.
    monkeypatch.setattr(lid_module, "CACHE_ELEMENTS", 60)
    monkeypatch.setattr(lid_fit, "_GROUP_BLOCKS", 2)
    monkeypatch.setattr(lid_fit, "_WARM_SAMPLE", 64)
    local = _calibrate(speakers)

    def never(*args: Any) -> None:
        raise AssertionError("a score block was computed in this process")

    largest: list[int] = []
    original = DaskRows.map

    def watched(self: DaskRows, function: Any, *args: Any) -> list[Any]:
        results = original(self, function, *args)
        largest.append(max(_largest_array(r) for r in results))
        return results

    monkeypatch.setattr(protocol, "similarity_rows", never)
    monkeypatch.setattr(DaskRows, "map", watched)
    spread = _calibrate(speakers, client=cluster_client)
    assert spread.to_json() == local.to_json()
    T, N = 7 * 12, 12
    assert local.metadata["buckets"][0]["trials"] == T
    # What comes back per group: per-trial values of its ≤ 10 rows, a few sample entries.
    assert 0 < max(largest) <= 2 * 5 * N < T * N // 4


def _largest_array(value: Any) -> int:
    """Entries of the largest numpy array inside a task's result."""
    if isinstance(value, np.ndarray):
        return int(value.size)
    if isinstance(value, tuple | list):
        return max((_largest_array(v) for v in value), default=0)
    if hasattr(value, "__dataclass_fields__"):
        return max(
            (_largest_array(getattr(value, f)) for f in value.__dataclass_fields__), default=0
        )
    return 0


@pytest.mark.slow
def test_this_process_holds_a_fraction_of_the_single_process_memory(cluster_client):
    # 3000 trials x 300 identities, 3 features: the single-process fit holds the three matrices
    # (7.2 MB each) with the fused one and the fusion's z-scores (~110 MB traced); on the
    # workers this process holds the pooled observations it scatters and what comes back
    # (~20 MB measured).
    speakers = synthetic_speakers(np.random.default_rng(5), 300, 10, overlap=0.8)
    pooled = pool_trials(speakers, test_seconds=3.0, template_seconds=6.0, features=FEATURES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        spread, spread_peak = traced(
            lambda: fit_on_workers(cluster_client, pooled, seconds=3.0, features=FEATURES)
        )
        local, local_peak = traced(
            lambda: fit_trials(scored_trials(pooled), seconds=3.0, features=FEATURES)
        )
    assert spread == local
    assert spread_peak < local_peak / 3


def traced(run: Any) -> tuple[Any, int]:
    """run() and the peak of the Python heap (tracemalloc) while it ran, in bytes."""
    tracemalloc.start()
    try:
        return run(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.corpus
@pytest.mark.slow
def test_calibrate_with_two_jobs_writes_the_single_process_calibration(
    corpus_root: Path, corpus_speakers: list[dict[str, str]], tmp_path: Path
):
    corpus = tmp_path / "corpus"
    link_subset(corpus_root, corpus_speakers, corpus, per_split=4, utterances=5)
    documents = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs{jobs}.json"
        args = ["calibrate", str(corpus), "--out", str(out), "--features", "f0,phone"]
        args += ["--buckets", "2,4", "--template-seconds", "4", "--no-cache", "--jobs", jobs]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        document = json.loads(out.read_text())
        document["metadata"].pop("created")
        documents[jobs] = document
    assert documents["1"]["metadata"]["speakers"] == 8
    assert set(documents["1"]["features"]) == {"f0", "phone", COMBINED}
    assert documents["2"] == documents["1"]
    shutil.rmtree(corpus)
