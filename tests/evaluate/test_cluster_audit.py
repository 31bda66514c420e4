"""``evaluate`` on Dask: the score matrices computed by 2 worker processes in row blocks, only
their summaries coming back, give the single-process audit bit for bit."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from monitor.calibration.fit import COMBINED, CalibrationSet, calibrate_speakers
from monitor.calibration.protocol import pool_trials, scored_trials
from monitor.cli import app
from monitor.cluster import dask_client
from monitor.disclosure.lid import LidCalibration, lid_per_trial
from monitor.disclosure.matrix_scan import InMemoryRows
from monitor.evaluate.audit import Audit, audit_feature, audit_rows, run_audit
from monitor.evaluate.cluster import trial_rows
from tests.calibration.synthetic import synthetic_speakers
from tests.evaluate.test_cli_end_to_end import link_subset

pytest.importorskip("distributed")

FEATURES = ("f0", "phone", "embedding")
runner = CliRunner(env={"COLUMNS": "1000"})


def assert_identical(a: Any, b: Any, where: str = "audit") -> None:
    """Every number equal to the last bit (NaN equal to NaN), recursively."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            assert_identical(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, Mapping):
        assert list(a) == list(b), where
        for key in a:
            assert_identical(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), where
    elif isinstance(a, float):
        assert a == b or (math.isnan(a) and math.isnan(b)), (where, a, b)
    elif isinstance(a, list | tuple) and a and not isinstance(a[0], str):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_identical(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


@pytest.fixture(scope="module")
def speakers_and_calibration() -> tuple[list[Any], CalibrationSet]:
    rng = np.random.default_rng(11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        dev = synthetic_speakers(rng, n_speakers=6, n_utterances=6, overlap=0.85)
        calibration = calibrate_speakers(
            dev, buckets=(3.0, 6.0), template_seconds=6.0, features=FEATURES
        )
    # Rounded f0 counts and overlapping speakers: ties across the mated / non-mated split.
    evaluation = synthetic_speakers(rng, n_speakers=9, n_utterances=7, overlap=0.9)
    return evaluation, calibration


def _audit(speakers: list[Any], calibration: CalibrationSet | None, **options: Any) -> Audit:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return run_audit(
            speakers,
            test_seconds=[3.0, 6.0],
            template_seconds=[6.0, None],
            features=FEATURES,
            calibration=calibration,
            **options,
        )


def test_an_audit_on_two_workers_equals_the_single_process_audit(
    speakers_and_calibration, cluster_client
):
    speakers, calibration = speakers_and_calibration
    ticks: list[tuple[int, int, str]] = []
    local = _audit(speakers, calibration)
    spread = _audit(
        speakers,
        calibration,
        client=cluster_client,
        block_progress=lambda done, total, name: ticks.append((done, total, name)),
    )
    assert "bucket" in spread.main.lid_source and set(spread.main.features) == {
        *FEATURES,
        COMBINED,
    }
    assert_identical(spread, local)
    # One block per eq. 6 start (7 utterances): the bar moves block by block, every pass.
    assert {total for _, total, _ in ticks} == {7}
    assert {name for *_, name in ticks} == {*FEATURES, COMBINED}
    passes = len(ticks) // 7
    assert [done for done, _, _ in ticks] == [*range(1, 8)] * passes
    assert passes >= 3 * 4 * 2  # 3 settings, 4 features, mated scores then scan and LID


def test_a_cross_fitted_audit_on_two_workers_equals_the_single_process_audit(
    speakers_and_calibration, cluster_client
):
    speakers, _ = speakers_and_calibration
    local = _audit(speakers, None)
    spread = _audit(speakers, None, client=cluster_client)
    assert "cross-fitted" in spread.main.lid_source
    assert_identical(spread, local)


def test_row_blocks_in_memory_give_the_dense_figures(speakers_and_calibration):
    # audit_rows on any row source = audit_feature on the whole matrix (blocks of 4 rows).
    speakers, calibration = speakers_and_calibration
    pooled = pool_trials(speakers, test_seconds=3.0, template_seconds=6.0, features=("f0",))
    S = scored_trials(pooled).scores["f0"]
    cal = calibration.lookup("f0", 3.0)[0]
    lid_cal = LidCalibration(cal.lid_weight, cal.lid_bias, cal.log_prior_odds)
    lid = lid_per_trial(S, pooled.truth, cal.lid_weight)
    dense = audit_feature("f0", S, pooled.truth, lid, lid_cal, pooled.aliases, loss="ll")
    rows = InMemoryRows(S, pooled.truth, rows_per_block=4)
    blocked = audit_rows("f0", rows, pooled.truth, lid_cal, pooled.aliases, loss="ll")
    assert_identical(blocked, dense)


def test_workers_score_the_blocks_this_process_scores(speakers_and_calibration, cluster_client):
    speakers, _ = speakers_and_calibration
    pooled = pool_trials(speakers, test_seconds=3.0, template_seconds=None, features=FEATURES)
    local = scored_trials(pooled).scores
    rows = trial_rows(cluster_client, pooled, FEATURES)
    for name in FEATURES:
        spread = np.concatenate(rows[name].map(lambda S, m, row0: S))
        assert np.array_equal(spread, local[name]), name


@pytest.mark.slow
@pytest.mark.timeout(180)  # a lost worker must fail the test, not hang it
def test_an_audit_on_dask_scheduler_and_worker_processes(speakers_and_calibration, dask_processes):
    # A cluster started as on real machines: `dask scheduler` + `dask worker tcp://...`.
    speakers, calibration = speakers_and_calibration
    local = _audit(speakers[:5], calibration)
    with dask_client(1, dask_processes) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        spread = _audit(speakers[:5], calibration, client=client)
    assert_identical(spread, local)


@pytest.mark.corpus
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:LID calibration:RuntimeWarning")
def test_evaluate_with_two_jobs_writes_the_single_process_report(
    corpus_root: Path, corpus_speakers: list[dict[str, str]], tmp_path: Path
):
    corpus = tmp_path / "corpus"
    link_subset(corpus_root, corpus_speakers, corpus, per_split=3, utterances=5)
    documents = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs{jobs}"
        args = ["evaluate", str(corpus), "--out", str(out), "--features", "f0,phone"]
        args += ["--test-seconds", "2,4", "--template-seconds", "4", "--jobs", jobs]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        document = json.loads((out / "report.json").read_text())
        document.pop("created")
        documents[jobs] = document
    assert documents["1"]["N"] == 6
    assert documents["2"] == documents["1"]
    shutil.rmtree(corpus)
