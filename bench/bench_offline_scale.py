"""Offline scale: score files of 10⁶ and 10⁷ lines, a 10⁴ × 10⁴ float32 matrix, and a synthetic
10⁵ × 10⁵ matrix audited in row blocks on a 2-worker Dask LocalCluster.

Each ``voxmeter score`` runs as its own process through the real entry point; its wall time and
peak RSS come from ``wait4``. The scaling run generates the matrix's rows on the workers (never
whole anywhere) and reports each worker's peak RSS. Results: bench/results/offline_scale.json.

    python -m bench offline_scale            # everything (about half an hour on 2 cores)
    python -m bench offline_scale quick      # 10⁶ lines, 10⁴ × 10⁴, and a 10⁴ × 10⁵ scaling run
"""

from __future__ import annotations

import json
import logging
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import RESULTS_DIR, Run

ENROLL_IDS = 1000


def write_score_files(folder: Path, lines: int, *, seed: int = 0) -> tuple[Path, Path]:
    """A Kaldi score file and its key (each block of lines shuffled), 10 % targets."""
    rng = np.random.default_rng(seed)
    scores, key = folder / f"scores_{lines}.txt", folder / f"key_{lines}.txt"
    with open(scores, "w") as s_out, open(key, "w") as k_out:
        for start in range(0, lines, 500_000):
            n = min(500_000, lines - start)
            enroll = rng.integers(0, ENROLL_IDS, n)
            target = rng.random(n) < 0.1
            value = np.where(target, rng.normal(2, 1, n), rng.normal(-1, 1, n))
            trial = np.arange(start, start + n)
            s_out.writelines(
                f"spk{e:05d} utt{t:09d} {v:.6f}\n"
                for e, t, v in zip(enroll, trial, value, strict=True)
            )
            shuffled = rng.permutation(n)
            k_out.writelines(
                f"spk{e:05d} utt{t:09d} {'target' if g else 'nontarget'}\n"
                for e, t, g in zip(enroll[shuffled], trial[shuffled], target[shuffled], strict=True)
            )
    return scores, key


def run_cli(*args: str) -> dict[str, float]:
    """Wall and CPU seconds and peak RSS (MB) of one ``voxmeter`` process."""
    command = [sys.executable, "-m", "monitor.cli", *args]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    stderr = process.stderr.read().decode() if process.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {stderr}")
    return {
        "wall_seconds": round(wall, 2),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),  # less disturbed by load
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
    }


def bench_score_files(folder: Path, sizes: list[int]) -> dict[str, Any]:
    results = {}
    for lines in sizes:
        scores, key = write_score_files(folder, lines)
        os.sync()  # the files just written are flushed first, not while the runs read them
        args = ("score", "--scores", str(scores), "--key", str(key), "--json")
        results[f"lines_{lines}"] = median_of_runs(args, repeats=3)
        print(f"score file {lines} lines: {results[f'lines_{lines}']}", flush=True)
        scores.unlink()
        key.unlink()
    return results


def bench_matrix(folder: Path, n: int, *, repeats: int = 3) -> dict[str, Any]:
    from monitor.blocks.synthetic import SyntheticMatrix

    S, m = SyntheticMatrix(T=n, N=n, seed=1)(0, n)
    matrix, truth = folder / "M.npy", folder / "T.npy"
    np.save(matrix, S)
    np.save(truth, m)
    del S
    base = ("score", "--matrix", str(matrix), "--truth", str(truth), "--json")
    modes = {"fit_on_eval": base, "given_weight": (*base, "--lid-weight", "3", "--lid-bias", "-12")}
    results = {name: median_of_runs(args, repeats) for name, args in modes.items()}
    print(f"matrix {n} x {n}: {results}", flush=True)
    matrix.unlink()
    return results


def median_of_runs(args: tuple[str, ...], repeats: int) -> dict[str, Any]:
    """Median wall and CPU seconds and the largest peak RSS of ``repeats`` runs (the machine is
    shared: CPU time is the steadier figure), with each run and the load it met."""
    runs = []
    for _ in range(repeats):
        runs.append({**run_cli(*args), "load_average": round(os.getloadavg()[0], 1)})
    return {
        "wall_seconds": float(np.median([r["wall_seconds"] for r in runs])),
        "cpu_seconds": float(np.median([r["cpu_seconds"] for r in runs])),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "runs": runs,
    }


_SAMPLED = {"peak": 0}


def _start_rss_sampler() -> None:
    """On a worker: sample this process's RSS every 50 ms (ru_maxrss would include the peak
    of the process that started it: Linux keeps it across exec)."""
    import threading

    import psutil

    process = psutil.Process()

    def sample() -> None:
        while True:
            _SAMPLED["peak"] = max(_SAMPLED["peak"], process.memory_info().rss)
            time.sleep(0.05)

    threading.Thread(target=sample, daemon=True).start()


def _sampled_peak_mb() -> float:
    return _SAMPLED["peak"] / 2**20


def bench_scaling(T: int, N: int, *, workers: int = 2, rows_per_task: int = 500) -> dict[str, Any]:
    """Audit a synthetic T × N matrix generated in row blocks by the workers of a LocalCluster."""
    from distributed import Client, LocalCluster

    from monitor.blocks.synthetic import SyntheticMatrix
    from monitor.blocks.workers import DaskRows
    from monitor.scorefiles.matrix import rows_report
    from monitor.scorefiles.report import report_json

    with (
        LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
            memory_limit=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        client.run(_start_rss_sampler)
        rows = DaskRows(
            client, SyntheticMatrix(T=T, N=N, seed=2), (T, N), rows_per_task=rows_per_task
        )
        started = time.perf_counter()
        report = report_json(rows_report(rows, lid_weight=3.0, lid_bias=-12.0))
        wall = time.perf_counter() - started
        peaks = client.run(_sampled_peak_mb)
    result = {
        "T": T,
        "N": N,
        "workers": workers,
        "rows_per_task": rows_per_task,
        "wall_seconds": round(wall, 1),
        "peak_rss_mb_per_worker": sorted(round(v, 1) for v in peaks.values()),
        "client_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "EER": report["EER"],
        "D_ECE": report["zebra"]["D_ECE"],
        "MeanD": report["srd"]["MeanD"],
    }
    print(f"scaling {T} x {N}: {result}", flush=True)
    return result


def main(quick: bool = False) -> None:
    """All parts, or those named on the command line (files, matrix, scaling; ``quick`` for
    smaller sizes); results merge into bench/results/offline_scale.json."""
    words = sys.argv[1:]
    quick = quick or "quick" in words
    parts = [p for p in ("files", "matrix", "scaling") if p in words] or [
        "files",
        "matrix",
        "scaling",
    ]
    path = RESULTS_DIR / "offline_scale.json"
    record = Run("offline_scale", command="python -m bench offline_scale " + " ".join(words))
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="voxmeter-bench-") as scratch:
        folder = Path(scratch)
        if "files" in parts:
            results["score_file"] = bench_score_files(folder, [10**6] if quick else [10**6, 10**7])
        if "matrix" in parts:
            results["matrix_1e4"] = bench_matrix(folder, 10**4)
        if "scaling" in parts:
            results["scaling"] = bench_scaling(10**4 if quick else 10**5, 10**5)
    earlier = json.loads(path.read_text()) if path.is_file() else {}  # parts may run apart
    record.figures.update({**earlier.get("figures", {}), **results})
    print(f"wrote {record.write(path=path)}")


if __name__ == "__main__":
    main()
