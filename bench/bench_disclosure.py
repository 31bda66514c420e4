"""Speed and memory of the disclosure core on a 10⁴ × 10⁴ score matrix (10⁸ float64, 800 MB).

Steps: ranks + fractional histogram, SRD statistics and beta-binomial fits (CLL, LL), the LID
calibration fitted on a 10³ × 10³ dev matrix, per-trial LID with that weight, and the full (T, N)
log-posterior matrix. Peak memory is measured twice: tracemalloc (bytes numpy allocated during the
run, including the matrix) and the process's peak resident set size.

Run: ``python -m bench disclosure`` → bench/results/disclosure.json and a markdown table row.
"""

from __future__ import annotations

import os
import platform
import resource
import time
import tracemalloc
from pathlib import Path

import numpy as np

from bench.common import Run
from monitor.calibration.lid_fit import fit_lid_calibration
from monitor.disclosure.lid import lid_log_posteriors, lid_per_trial, lid_summary
from monitor.disclosure.ranks import chunk_rows, rank_histogram
from monitor.disclosure.srd import fit_rank_model, srd_stats

RESULTS = Path(__file__).parent / "results" / "disclosure.json"
SEED = 20261122
TRIALS = IDENTITIES = 10_000
DEV = 1_000
# Mated scores sit 4 non-mated standard deviations above the mean: with 10⁴ competitors about
# half the trials rank first, like a good speaker embedding on a large database.
MATED_SHIFT = 4.0
MEMORY_LIMIT_BYTES = 4 * 1024**3


def score_matrix(
    rng: np.random.Generator, T: int, N: int, shift: float
) -> tuple[np.ndarray, np.ndarray]:
    """(T, N) Gaussian scores filled block by block (no temporaries), mated entry shifted."""
    S = np.empty((T, N), dtype=np.float64)
    step = chunk_rows(N)
    for r0 in range(0, T, step):
        rng.standard_normal(out=S[r0 : r0 + step])
    truth = rng.integers(0, N, size=T)
    S[np.arange(T), truth] += shift
    return S, truth


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def run() -> dict[str, object]:
    """Time each step on the big matrix; return the figures as a flat dict."""
    rng = np.random.default_rng(SEED)
    seconds: dict[str, float] = {}
    cpu_seconds: dict[str, float] = {}
    load_before = os.getloadavg()[0]
    tracemalloc.start()

    def timed(name: str, fn, *args, **kwargs):
        start, cpu_start = time.perf_counter(), time.process_time()
        result = fn(*args, **kwargs)
        seconds[name] = time.perf_counter() - start
        cpu_seconds[name] = time.process_time() - cpu_start
        return result

    S, truth = timed("generate", score_matrix, rng, TRIALS, IDENTITIES, MATED_SHIFT)
    hist = timed("rank_histogram", rank_histogram, S, truth)
    stats = timed("srd_stats", srd_stats, hist)
    fit_cll = timed("fit_cll", fit_rank_model, hist, loss="cll")
    fit_ll = timed("fit_ll", fit_rank_model, hist, loss="ll")
    S_dev, m_dev = score_matrix(rng, DEV, DEV, MATED_SHIFT)
    cal = timed("lid_calibration_dev_1e3", fit_lid_calibration, S_dev, m_dev)
    del S_dev, m_dev
    lid = timed("lid_per_trial", lid_per_trial, S, truth, cal.weight)
    summary = lid_summary(lid, cal)
    log_post = timed("lid_log_posteriors_full", lid_log_posteriors, S, cal.weight)
    del log_post
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    core = ("rank_histogram", "srd_stats", "fit_cll", "lid_calibration_dev_1e3", "lid_per_trial")
    peak_rss = _peak_rss_bytes()
    return {
        "T": TRIALS,
        "N": IDENTITIES,
        "mated_shift": MATED_SHIFT,
        "seed": SEED,
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "cpu_seconds": {k: round(v, 3) for k, v in cpu_seconds.items()},
        # The machine is shared: wall times stretch with the load; CPU seconds much less so.
        "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "core_seconds": round(sum(seconds[k] for k in core), 3),
        "traced_peak_mb": round(traced_peak / 2**20, 1),
        "peak_rss_mb": round(peak_rss / 2**20, 1),
        "within_4gb": bool(peak_rss < MEMORY_LIMIT_BYTES),
        "srd": {
            "MeanD": stats.MeanD,
            "IdR": stats.IdR,
            "MaxD": stats.MaxD,
            "StDD": stats.StDD,
            "Spread": stats.Spread,
        },
        "fit_cll": {"alpha": fit_cll.alpha, "beta": fit_cll.beta, "KL_bits": fit_cll.KL_bits},
        "fit_ll": {"alpha": fit_ll.alpha, "beta": fit_ll.beta, "KL_bits": fit_ll.KL_bits},
        "lid": {
            "weight": cal.weight,
            "ALID": summary.ALID,
            "PDR": summary.PDR,
            "LID_max": summary.LID_max,
        },
        "machine": f"{platform.machine()} {platform.python_implementation()} "
        f"{platform.python_version()}, numpy {np.__version__}",
    }


def main() -> None:
    record = Run("disclosure", command="python -m bench disclosure")
    figures = run()
    record.figures.update(figures)
    record.target("peak RSS, MB", figures["peak_rss_mb"], "<=", 4096)  # type: ignore[arg-type]
    record.write(path=RESULTS)
    s = figures["seconds"]
    assert isinstance(s, dict)
    print("| T × N | ranks+hist s | fit CLL s | LID cal (10³²) s | LID/trial s | log-post (T,N) s "
          "| core s | traced peak MB | peak RSS MB |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {figures['T']}×{figures['N']} | {s['rank_histogram']:.2f} | {s['fit_cll']:.2f} "
        f"| {s['lid_calibration_dev_1e3']:.2f} | {s['lid_per_trial']:.2f} "
        f"| {s['lid_log_posteriors_full']:.2f} | {figures['core_seconds']:.2f} "
        f"| {figures['traced_peak_mb']:.0f} | {figures['peak_rss_mb']:.0f} |"
    )
    cpu = figures["cpu_seconds"]
    assert isinstance(cpu, dict)
    core_cpu = sum(cpu[k] for k in ("rank_histogram", "fit_cll", "lid_calibration_dev_1e3",
                                    "lid_per_trial"))  # fmt: skip
    print(
        f"(core CPU {core_cpu:.2f} s; generation {s['generate']:.2f} s; "
        f"load average {figures['load_average_1min']}; results in {RESULTS})"
    )


if __name__ == "__main__":
    main()
