"""Peak memory of ``voxmeter features`` on long recordings (issue 11: a 2-hour WAV took 11.2 GB).

A long 16 kHz 16-bit WAV is written to a temporary folder by repeating the real corpus's
utterances back to back (never into the repository), then ``voxmeter features FILE --json``
runs in a child process; its peak resident memory (``ru_maxrss`` of the child) and CPU time are
recorded for a 10-minute and a 2-hour file. Files longer than ``BLOCK_SECONDS`` are streamed
read → VAD → features block by block, so the peak should not grow with the length.

Run: ``python -m bench long_file`` → bench/results/long_file.json. Target: peak RSS ≤ 1 GB.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from bench.common import CORPUS, RESULTS_DIR, write_results
from monitor.corpus import scan_corpus
from monitor.features.extract import BLOCK_SECONDS

RESULTS = RESULTS_DIR / "long_file.json"
LENGTHS_SECONDS = (600.0, 7200.0)
TARGET_PEAK_BYTES = 1e9
RATE = 16000


def write_long_wav(path: Path, seconds: float) -> None:
    """``seconds`` of corpus speech, utterance after utterance, written as it goes."""
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


def measure(path: Path, scratch: Path) -> dict[str, Any]:
    """Run the real CLI on ``path`` in a child; its own peak RSS (bytes, from ``wait4``), CPU
    and wall seconds."""
    started = time.perf_counter()
    with open(scratch / "out.json", "w+") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "monitor.cli", "features", str(path), "--json"],
            stdout=out,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        )
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            raise RuntimeError(f"voxmeter features failed with status {child.returncode}")
        out.seek(0)
        report = json.load(out)
    return {
        "duration_seconds": report["duration_seconds"],
        "speech_seconds": report["speech_seconds"],
        "peak_rss_bytes": usage.ru_maxrss * 1024,  # Linux reports KiB
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "wall_seconds": time.perf_counter() - started,
        "timing_seconds": report["timing_seconds"],
    }


def main() -> None:
    runs = []
    with tempfile.TemporaryDirectory(prefix="voxmeter-long-") as folder:
        for seconds in LENGTHS_SECONDS:
            path = Path(folder) / f"long-{int(seconds)}s.wav"
            write_long_wav(path, seconds)
            result = measure(path, Path(folder))
            path.unlink()
            runs.append(result)
            print(
                f"{seconds / 60:.0f} min: peak RSS {result['peak_rss_bytes'] / 1e6:.0f} MB, "
                f"{result['cpu_seconds']:.0f} CPU-s ({result['cpu_seconds'] / seconds:.3f} × real "
                f"time), speech {result['speech_seconds']:.0f} s",
                flush=True,
            )
    write_results(
        RESULTS,
        {
            "what": "voxmeter features FILE --json on long WAVs of back-to-back corpus speech",
            "block_seconds": BLOCK_SECONDS,
            "target_peak_rss_bytes": TARGET_PEAK_BYTES,
            "runs": runs,
            "peak_within_target": bool(
                np.all([r["peak_rss_bytes"] <= TARGET_PEAK_BYTES for r in runs])
            ),
            "machine": platform.platform(),
            "load_average": os.getloadavg(),
        },
    )


if __name__ == "__main__":
    main()
