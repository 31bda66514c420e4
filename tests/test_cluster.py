"""Dask: a LocalCluster of 2 worker processes (loopback, no dashboard) gives the single-process
figures exactly — the score-matrix report in row blocks, feature extraction, and enrolment."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from monitor.blocks.synthetic import SyntheticMatrix
from monitor.blocks.workers import DaskRows, dask_client
from monitor.cli import app
from monitor.disclosure.matrix_scan import InMemoryRows
from monitor.errors import InputError
from monitor.features.base import embedding_backend
from monitor.features.extract import _extract_batch, extract_many
from monitor.scorefiles.matrix import matrix_report, rows_report
from monitor.scorefiles.report import report_json
from monitor.store import open_store

distributed = pytest.importorskip("distributed")

runner = CliRunner(env={"COLUMNS": "1000"})
GIVEN = {"lid_weight": 2.5, "lid_bias": -3.0}


def test_synthetic_rows_do_not_depend_on_the_blocking():
    make = SyntheticMatrix(T=9, N=5, seed=3)
    whole, truth = make(0, 9)
    parts = [make(0, 4), make(4, 7), make(7, 9)]
    assert np.array_equal(whole, np.concatenate([p[0] for p in parts]))
    assert np.array_equal(truth, np.concatenate([p[1] for p in parts]))
    assert whole.dtype == np.float32 and np.all(whole[np.arange(9), truth] > whole.min())


def test_matrix_report_on_two_workers_equals_the_single_process_report(cluster_client):
    # Rounded scores make ties across classes; blocks of 37 rows split the 211 trials unevenly.
    make = _Rounded(SyntheticMatrix(T=211, N=150, seed=1, separation=1.5))
    S, m = make(0, 211)
    local = report_json(matrix_report(S, m, **GIVEN))
    spread = DaskRows(cluster_client, make, (211, 150), rows_per_task=37)
    assert report_json(rows_report(spread, **GIVEN)) == local
    in_memory = InMemoryRows(S, m, rows_per_block=50)
    assert report_json(rows_report(in_memory, **GIVEN)) == local


class _Rounded:
    """Picklable loader: the synthetic rows rounded to quarters (many exact ties)."""

    def __init__(self, make: SyntheticMatrix) -> None:
        self.make = make

    def __call__(self, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray]:
        S, m = self.make(r0, r1)
        return np.round(S * 4) / 4, m


def _row_sums(S: np.ndarray, m: np.ndarray, row0: int, scale: float) -> np.ndarray:
    return scale * S.sum(axis=1) + m


def test_kept_blocks_are_loaded_once_and_give_the_loaded_rows(cluster_client):
    make = SyntheticMatrix(T=50, N=7, seed=2)
    S, m = make(0, 50)
    kept = DaskRows(cluster_client, make, (50, 7), rows_per_task=12, keep=True)
    for scale in (2.0, 2.0, 3.0):  # three passes over the same kept blocks
        spread = np.concatenate(kept.map(_row_sums, scale))
        assert np.array_equal(spread, _row_sums(S, m, 0, scale))
    futures = list(kept.kept)
    assert len(futures) == 5 and all(f.status == "finished" for f in futures)
    kept.map(_row_sums, 1.0)
    assert kept.kept == futures  # not loaded again
    kept.release()
    assert kept.kept == []


def test_a_distributed_matrix_needs_a_given_calibration(cluster_client):
    spread = DaskRows(cluster_client, SyntheticMatrix(T=20, N=10), (20, 10), rows_per_task=8)
    with pytest.raises(ValueError, match="dev matrix or a weight and bias"):
        rows_report(spread)


def test_an_unreachable_scheduler_is_one_line():
    unreachable = r"^--scheduler: cannot reach tcp://127\.0\.0\.1:9"
    with pytest.raises(InputError, match=unreachable), dask_client(1, "tcp://127.0.0.1:9"):
        pass


@pytest.mark.corpus
def test_extraction_on_a_given_scheduler_equals_the_single_process_run(
    corpus_root: Path, local_cluster, tmp_path: Path
):
    paths = sorted((corpus_root / "0024").glob("*.flac"))[:4]
    (tmp_path / "bad.wav").write_text("not audio\n")
    paths.append(tmp_path / "bad.wav")
    seen: list[int] = []
    serial = extract_many(paths, features=("f0", "phone"))
    remote = extract_many(
        paths,
        features=("f0", "phone"),
        scheduler=local_cluster.scheduler_address,
        progress=lambda done, total, path: seen.append(done),
    )
    assert seen == [1, 2, 3, 4, 5]  # the bar moves file by file
    assert list(remote.files) == list(serial.files)
    assert {p: str(e) for p, e in remote.errors.items()} == {
        p: str(e) for p, e in serial.errors.items()
    }
    for path, result in serial.files.items():
        for name in ("f0", "phone"):
            assert np.array_equal(
                result.observations[name].values, remote.files[path].observations[name].values
            )


@pytest.mark.slow
@pytest.mark.corpus
def test_enroll_with_two_workers_stores_the_single_process_templates(
    corpus_root: Path, corpus_speakers: list[dict[str, str]], tmp_path: Path
):
    root = tmp_path / "corpus"
    rows = corpus_speakers[:3]
    for row in rows:
        (root / row["speaker"]).mkdir(parents=True)
        for source in sorted((corpus_root / row["speaker"]).glob("*.flac"))[:2]:
            (root / row["speaker"] / source.name).symlink_to(source)
    with open(root / "speakers.tsv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    templates = {}
    for jobs in ("1", "2"):
        db = tmp_path / f"jobs{jobs}.db"
        args = ["enroll", str(root), "--db", str(db), "--features", "f0,phone", "--no-cache"]
        result = runner.invoke(app, [*args, "--jobs", jobs])
        assert result.exit_code == 0, result.output
        with open_store(db) as store:
            templates[jobs] = {
                i.alias: {f: store.template(i.alias, f).values for f in i.templates}
                for i in store.identities()
            }
    assert templates["1"].keys() == templates["2"].keys() and len(templates["1"]) == 3
    for alias, features in templates["1"].items():
        for name, values in features.items():
            assert np.array_equal(values, templates["2"][alias][name]), (alias, name)
    shutil.rmtree(root)


def _backend_after_a_batch(backend: str) -> str:
    _extract_batch([], ("embedding",), backend)
    return embedding_backend()


def test_workers_extract_with_the_callers_embedding_backend(cluster_client):
    # Workers of a running cluster do not share the caller's environment: the task carries it.
    pytest.importorskip("torch", reason="ge2e runs on torch (the Python 3.13 venv has none)")
    for backend in ("campplus", "ge2e"):
        task = cluster_client.submit(_backend_after_a_batch, backend, pure=False)
        assert task.result() == backend


@pytest.fixture(scope="module")
def matrix_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A float32 .npy matrix with many exact ties (scores rounded to quarters) and its truth."""
    folder = tmp_path_factory.mktemp("matrix")
    S, m = _Rounded(SyntheticMatrix(T=420, N=90, seed=4, separation=1.0))(0, 420)
    np.save(folder / "S.npy", S.astype(np.float32))
    np.save(folder / "m.npy", m)
    return folder / "S.npy", folder / "m.npy"


def _score_json(*args: str) -> dict:
    result = runner.invoke(app, ["score", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_score_matrix_with_two_jobs_prints_the_single_process_report(matrix_files):
    # The LID calibration is fitted on the matrix itself (here), the rest read by 2 workers.
    S, m = (str(p) for p in matrix_files)
    local = _score_json("--matrix", S, "--truth", m)
    assert _score_json("--matrix", S, "--truth", m, "--jobs", "2") == local
    assert local["srd"]["N"] == 90 and local["lid"]["calibrated_on"] == "eval"


def test_the_lid_fit_on_the_matrix_itself_runs_on_the_workers_with_the_same_bits(
    cluster_client, tmp_path
):
    from monitor.calibration.lid_fit import fit_layout, fit_lid_calibration
    from monitor.scorefiles.npy_rows import NpyRows, fit_lid_on_workers

    T, N = 7000, 320  # more than one of the fit's row groups, and the warm start's sample
    S, m = SyntheticMatrix(T=T, N=N, seed=9, separation=1.2)(0, T)
    assert len(fit_layout(N).groups(T)) > 1
    np.save(tmp_path / "S.npy", S.astype(np.float32))
    here = fit_lid_calibration(np.load(tmp_path / "S.npy", mmap_mode="r"), m)
    there = fit_lid_on_workers(cluster_client, NpyRows(str(tmp_path / "S.npy")), m, (T, N))
    assert there == here  # weight, bias and prior, bit for bit


def test_score_matrix_on_workers_refuses_a_csv_or_a_nan_in_one_line(tmp_path, matrix_files):
    _, m = matrix_files
    csv_matrix = tmp_path / "S.csv"
    csv_matrix.write_text("1,2\n3,4\n")
    result = runner.invoke(
        app, ["score", "--matrix", str(csv_matrix), "--truth", str(m), "--jobs", "2"]
    )
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and ".npy" in result.output
    result = runner.invoke(app, ["score", "--scores", str(m), "--key", str(m), "--jobs", "2"])
    assert result.exit_code == 2 and "only a --matrix is scored on Dask workers" in result.output
    S = np.zeros((6, 3), dtype=np.float32)
    S[4, 1] = np.nan
    np.save(tmp_path / "nan.npy", S)
    np.save(tmp_path / "t.npy", np.arange(6) % 3)
    args = ["--matrix", str(tmp_path / "nan.npy"), "--truth", str(tmp_path / "t.npy")]
    result = runner.invoke(
        app, ["score", *args, "--lid-weight", "1", "--lid-bias", "0", "--jobs", "2"]
    )
    assert result.exit_code == 2, result.output
    assert result.output.strip().count("\n") == 0
    assert "nan.npy" in result.output and "scores[4, 1] = nan" in result.output


def test_score_without_jobs_does_not_import_dask(matrix_files):
    S, m = (str(p) for p in matrix_files)
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from monitor.cli import app\n"
        f"result = CliRunner().invoke(app, ['score', '--matrix', {S!r}, '--truth', {m!r}])\n"
        "assert result.exit_code == 0, result.output\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.slow
@pytest.mark.timeout(180)  # a lost worker must fail the test, not hang it
def test_score_matrix_on_dask_scheduler_and_worker_processes(matrix_files, dask_processes):
    S, m = (str(p) for p in matrix_files)
    given = ["--lid-weight", "2", "--lid-bias", "-4"]
    local = _score_json("--matrix", S, "--truth", m, *given)
    remote = _score_json("--matrix", S, "--truth", m, *given, "--scheduler", dask_processes)
    assert remote == local
