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

from monitor.blocks.workers import dask_client
from monitor.calibration.buckets import COMBINED, CalibrationSet
from monitor.calibration.fit import calibrate_speakers
from monitor.calibration.protocol import pool_trials, scored_trials
from monitor.calibration.trial_rows import trial_rows
from monitor.cli import app
from monitor.disclosure.lid import LidCalibration, lid_per_trial
from monitor.evaluate.audit import audit_blocks, audit_feature, run_audit
from monitor.evaluate.results import Audit
from tests.calibration.synthetic import synthetic_speakers
from tests.evaluate.test_cli_end_to_end import link_subset

pytest.importorskip("distributed")

FEATURES = ("f0", "phone", "embedding")
runner = CliRunner(env={"COLUMNS": "1000"})


SINGLE_PROCESS_ONLY = {"modelled"}
"""What only the single-process audit adds: the population model beside the measured figures
needs the score matrices, which a cluster's workers never send back."""


def assert_identical(a: Any, b: Any, where: str = "audit") -> None:
    """Every number equal to the last bit (NaN equal to NaN), recursively."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            if f.name in SINGLE_PROCESS_ONLY:
                continue
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
    # One block per eq. 6 start (7 utterances): the bar moves block by block, every pass
    # (3 settings, each 2 passes plus one for the EER gaps when a crossing falls in one).
    blocks = [(done, total) for done, total, what in ticks if what.startswith("pass ")]
    passes = len(blocks) // 7
    assert {total for _, total in blocks} == {7} and 6 <= passes <= 9
    assert [done for done, _ in blocks] == [*range(1, 8)] * passes
    # The main setting's per-speaker fits run on the workers too, batch by batch.
    fits = [(done, total) for done, total, what in ticks if what == "per-speaker fits"]
    assert fits[-1] == (9, 9) and len(fits) >= 2 * 4  # 4 matrices, at least 2 batches each


def test_a_cross_fitted_audit_on_two_workers_equals_the_single_process_audit(
    speakers_and_calibration, cluster_client
):
    speakers, _ = speakers_and_calibration
    local = _audit(speakers, None)
    spread = _audit(speakers, None, client=cluster_client)
    assert "cross-fitted" in spread.main.lid_source
    assert_identical(spread, local)


class MatricesInBlocks:
    """A row source over several in-memory matrices: blocks of ``{name: S rows}``."""

    def __init__(self, scores: dict[str, np.ndarray], m: np.ndarray, rows_per_block: int):
        self.scores, self.m, self.step = scores, m, rows_per_block
        self.shape = next(iter(scores.values())).shape

    def map(self, function, *args):
        return [
            function(
                {n: S[r0 : r0 + self.step] for n, S in self.scores.items()},
                self.m[r0 : r0 + self.step],
                r0,
                *args,
            )
            for r0 in range(0, self.shape[0], self.step)
        ]


def test_row_blocks_in_memory_give_the_dense_figures(speakers_and_calibration):
    # audit_blocks on blocks of 4 rows = audit_feature on each whole matrix, bit for bit.
    speakers, calibration = speakers_and_calibration
    pooled = pool_trials(speakers, test_seconds=3.0, template_seconds=6.0, features=FEATURES)
    scores = scored_trials(pooled).scores
    cals = {
        name: LidCalibration(b.lid_weight, b.lid_bias, b.log_prior_odds)
        for name in FEATURES
        for b in [calibration.lookup(name, 3.0)[0]]
    }
    dense = {
        name: audit_feature(
            name,
            S,
            pooled.truth,
            lid_per_trial(S, pooled.truth, cals[name].weight),
            cals[name],
            pooled.aliases,
            loss="ll",
        )
        for name, S in scores.items()
    }
    rows = MatricesInBlocks(dict(scores), pooled.truth, rows_per_block=4)
    blocked = audit_blocks(rows, cals, pooled.truth, pooled.aliases, loss="ll")
    assert_identical(blocked, dense)


def test_workers_score_the_blocks_this_process_scores(speakers_and_calibration, cluster_client):
    speakers, _ = speakers_and_calibration
    pooled = pool_trials(speakers, test_seconds=3.0, template_seconds=None, features=FEATURES)
    local = scored_trials(pooled).scores
    blocks = trial_rows(cluster_client, pooled, FEATURES).map(lambda scores, m, row0: scores)
    for name in FEATURES:
        spread = np.concatenate([block[name] for block in blocks])
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
