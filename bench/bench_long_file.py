"""Peak memory of ``voxmeter features`` on long recordings (issue 11: a 2-hour WAV took 11.2 GB;
issue 23: a 2-hour FLAC peaked at 2.09 GB).

A long 16 kHz 16-bit file (FLAC and WAV) is written to a temporary folder by repeating the real
corpus's utterances back to back (never into the repository), then ``voxmeter features FILE
--json`` runs in a child process; its peak resident memory (``ru_maxrss`` of the child) and CPU
time are recorded for 10 minutes, 1 hour and 2 hours of each. Files longer than
``BLOCK_SECONDS`` are streamed read → VAD → features block by block, and the embedding sees at
most ``PIECE_SECONDS`` of speech at a time, so the peak should not grow with the length.

Run: ``python -m bench long_file`` → bench/results/long_file.json (about 0.2 × real time per
file: an hour of wall time on a quiet machine); ``VOXMETER_BENCH_LONG_SECONDS=60,600`` and
``VOXMETER_BENCH_LONG_FORMATS=flac`` choose fewer runs. Target: peak RSS ≤ 1 GB, flat in length.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from bench.common import CORPUS, RESULTS_DIR, Run
from monitor.corpus import scan_corpus
from monitor.features.extract import BLOCK_SECONDS, PIECE_SECONDS

LENGTHS_SECONDS = tuple(
    float(s) for s in os.environ.get("VOXMETER_BENCH_LONG_SECONDS", "600,3600,7200").split(",")
)
FORMATS = tuple(os.environ.get("VOXMETER_BENCH_LONG_FORMATS", "flac,wav").split(","))
RESULTS = RESULTS_DIR / (
    "long_file.json" if FORMATS == ("flac", "wav") else f"long_file-{'-'.join(FORMATS)}.json"
)
TARGET_PEAK_BYTES = 1e9
RATE = 16000


def write_long_audio(path: Path, seconds: float) -> None:
    """``seconds`` of corpus speech, utterance after utterance, written as it goes (16-bit PCM;
    FLAC or WAV by the suffix of ``path``)."""
    corpus = scan_corpus(CORPUS)
    target = int(seconds * RATE)
    written = 0
    with sf.SoundFile(path, "w", samplerate=RATE, channels=1, subtype="PCM_16") as out:
        while written < target:
            for utterance in corpus.paths:
                samples, rate = sf.read(utterance, dtype="int16")
                if rate != RATE:
                    continue
                samples = samples[: target - written]
                out.write(samples)
                written += samples.size
                if written >= target:
                    break


BUDGET_SECONDS = float(os.environ.get("VOXMETER_BENCH_LONG_BUDGET_SECONDS", "inf"))
"""Wall seconds a run may take; a run still going then is stopped and reported as partial
(its peak so far and its CPU seconds, against the ~0.125 CPU-s per audio second a whole run
takes), so a loaded machine still gives the peak over the part it processed."""
SAMPLE_SECONDS = 15.0


def _sample(pid: int) -> tuple[float, int]:
    """(CPU seconds, peak RSS bytes so far) of a running child, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    status = Path(f"/proc/{pid}/status").read_text()
    peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM"))
    return cpu, peak * 1024


def measure(path: Path, scratch: Path) -> dict[str, Any]:
    """Run the real CLI on ``path`` in a child; its own peak RSS (bytes, from ``wait4``), CPU
    and wall seconds, and its peak so far every SAMPLE_SECONDS (``trace``: wall, CPU, peak)."""
    started = time.perf_counter()
    trace: list[tuple[float, float, int]] = []
    with open(scratch / "out.json", "w+") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "monitor.cli", "features", str(path), "--json"],
            stdout=out,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        )
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            wall = time.perf_counter() - started
            if wall >= SAMPLE_SECONDS * len(trace):
                with contextlib.suppress(OSError, StopIteration):
                    trace.append((round(wall, 1), *_sample(child.pid)))
            if wall > BUDGET_SECONDS:
                child.kill()
            time.sleep(0.5)
        child.returncode = os.waitstatus_to_exitcode(status)
        result = {
            "peak_rss_bytes": usage.ru_maxrss * 1024,  # Linux reports KiB
            "cpu_seconds": usage.ru_utime + usage.ru_stime,
            "wall_seconds": time.perf_counter() - started,
            "trace_wall_cpu_peak": trace,
        }
        if child.returncode == -signal.SIGKILL and trace:
            return {**result, "completed": False}
        if child.returncode != 0:
            raise RuntimeError(f"voxmeter features failed with status {child.returncode}")
        out.seek(0)
        report = json.load(out)
    return {
        **result,
        "completed": True,
        "duration_seconds": report["duration_seconds"],
        "speech_seconds": report["speech_seconds"],
        "timing_seconds": report["timing_seconds"],
    }


def _print_run(audio_format: str, seconds: float, result: dict[str, Any]) -> None:
    done = "" if result["completed"] else " (stopped at the time budget: peak so far)"
    print(
        f"{audio_format} {seconds / 60:.0f} min{done}: peak RSS "
        f"{result['peak_rss_bytes'] / 1e6:.0f} MB, {result['cpu_seconds']:.0f} CPU-s "
        f"({result['cpu_seconds'] / seconds:.3f} × real time), "
        f"{result['wall_seconds']:.0f} s wall",
        flush=True,
    )


def main() -> None:
    """Each format at each length; the results file is rewritten after every run (a 2-hour run
    takes most of an hour on a loaded machine)."""
    runs: list[dict[str, Any]] = []
    record = Run(RESULTS.stem, command="python -m bench long_file")
    with tempfile.TemporaryDirectory(prefix="voxmeter-long-") as folder:
        for audio_format in FORMATS:
            for seconds in LENGTHS_SECONDS:
                path = Path(folder) / f"long-{int(seconds)}s.{audio_format}"
                write_long_audio(path, seconds)
                file_bytes = path.stat().st_size
                result = measure(path, Path(folder))
                path.unlink()
                runs.append(
                    {"format": audio_format, "file_bytes": file_bytes, **result}
                    | {"load_average_after": os.getloadavg()}
                )
                _print_run(audio_format, seconds, result)
                _write(runs, record)


def _write(runs: list[dict[str, Any]], record: Run) -> None:
    peaks = [r["peak_rss_bytes"] for r in runs]
    partial = [r for r in runs if not r["completed"]]
    record.targets.clear()
    record.target("peak RSS, bytes", max(peaks), "<=", TARGET_PEAK_BYTES)
    record.figures.update(
        {
            "what": "voxmeter features FILE --json on long FLAC/WAV files of back-to-back corpus "
            "speech",
            "block_seconds": BLOCK_SECONDS,
            "piece_seconds": PIECE_SECONDS,
            "target_peak_rss_bytes": TARGET_PEAK_BYTES,
            "runs": runs,
            "peak_within_target": bool(np.all(np.array(peaks) <= TARGET_PEAK_BYTES)),
            "largest_over_smallest_peak": max(peaks) / min(peaks),
            "partial_runs": len(partial),
            "budget_seconds": BUDGET_SECONDS,
        },
    )
    record.write(path=RESULTS)


if __name__ == "__main__":
    main()
