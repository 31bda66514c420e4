"""CPU per audio second of each stream, with 1, 2 and 4 satellites streaming at once through one
wake-word proxy of one daemon (issue 28: constant from 1 to 4 streams within 10 %).

A real openWakeWord service (tests/realparts/wyoming_upstreams.py) runs in its own process, so
its CPU is not ours. The daemon (the whole pipeline: relay, per-stream VAD, windows, features,
tracker, scorer, ledger, Prometheus) runs in this process with 1,000 templates; N satellites
each stream a different corpus speaker's speech (``SECONDS`` each) in real time, at once, in
64 ms chunks. The figure is this process's CPU seconds (every thread) from the first chunk until
every window is in the ledger, divided by the audio seconds of all streams; dropped and refused
seconds must be 0 (else a stream was not fully measured). CPU time, not wall time: the machine
is shared. Run: ``python -m bench streams`` → bench/results/streams.json.
"""

from __future__ import annotations

import asyncio
import csv
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from wyoming.wake import Detect

from bench.bench_daemon import _calibration, _database, _dims
from bench.common import CORPUS, RESULTS_DIR, Run
from monitor.audio.file import read_audio
from monitor.daemon.build import build_pipeline
from monitor.features.base import get_feature
from monitor.settings.config import load_config
from monitor.store.database import open_store
from tests.daemon.household_daemon import Recorder, paced_talk
from tests.wyoming.wyoming_peers import conversation

RESULTS = RESULTS_DIR / "streams.json"
SECONDS = float(os.environ.get("VOXMETER_BENCH_STREAM_SECONDS", "40"))
COUNTS = (1, 2, 4)
CHUNK_SECONDS = 1024 / 16000
ROOT = Path(__file__).resolve().parents[1]


def satellites(count: int) -> list[np.ndarray]:
    """``count`` adults' speech, ``SECONDS`` each (their utterances with 0.5 s pauses), int16."""
    with open(CORPUS / "speakers.tsv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle, delimiter="\t") if int(r["age"]) >= 18]
    streams = []
    for row in rows[:count]:
        pieces: list[np.ndarray] = []
        for path in sorted((CORPUS / row["speaker"]).glob("*.flac")):
            pieces += [read_audio(path)[0], np.zeros(8000, np.float32)]
            if sum(p.shape[0] for p in pieces) >= SECONDS * 16000:
                break
        audio = np.concatenate(pieces)[: round(SECONDS * 16000)]
        streams.append((np.clip(audio, -1, 1) * 32767).astype(np.int16))
    return streams


async def one_run(db: Path, port: int, streams: list[np.ndarray]) -> dict[str, Any]:
    config = load_config(
        None,
        [
            f"daemon.source=kitchen=wyoming-proxy://127.0.0.1:0?upstream=tcp://127.0.0.1:{port}",
            f"daemon.db={db}",
            "prometheus.port=0",
            "wyoming.zeroconf=false",
            'logging.level="warning"',
            f'features.embedding="{get_feature("embedding").backend}"',  # type: ignore[attr-defined]
        ],
    )
    with open_store(db) as store:
        recorder = Recorder()
        pipeline = build_pipeline(config, store=store, exporters=[recorder])
        proxy: Any = pipeline.source
        running = asyncio.get_running_loop().create_task(pipeline.run())
        while not proxy.port:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # warmed up (models loaded before the proxy serves)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        talks = [conversation(s, Detect().event()) for s in streams]
        await asyncio.gather(
            *(paced_talk(proxy.port, t, chunk_pause_seconds=CHUNK_SECONDS) for t in talks)
        )
        while pipeline.streams.live or any(q.qsize() for q in pipeline.queues.values()):
            await asyncio.sleep(0.1)
        await asyncio.sleep(2.0)  # the last windows' features and scores
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        stats = pipeline.stats()
        pipeline.stop("bench over")
        summary = await running
    audio = sum(s.shape[0] for s in streams) / 16000
    counts = stats.sources["kitchen"]
    return {
        "streams": len(streams),
        "audio_seconds": round(audio, 2),
        "speech_seconds": round(counts.speech_seconds, 2),
        "windows": summary.windows,
        "cpu_seconds": round(cpu, 2),
        "wall_seconds": round(wall, 2),
        "cpu_per_audio_second": round(cpu / audio, 4),
        "dropped_seconds": round(counts.dropped_seconds, 3),
        "refused_seconds": round(counts.refused_seconds, 3),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }


async def run(folder: Path) -> dict[str, Any]:
    _dims()
    calibration, _ = _calibration()
    service = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.realparts.wyoming_upstreams", "wake",
        stdout=asyncio.subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    assert service.stdout is not None
    audio = satellites(max(COUNTS))
    runs = []
    try:
        port = int((await service.stdout.readline()).split()[1])
        for count in COUNTS:
            (folder / f"{count}").mkdir()  # a fresh database each: no track resumed
            db = _database(folder / f"{count}", calibration)
            runs.append(await one_run(db, port, audio[:count]))
            print(runs[-1], flush=True)
    finally:
        service.terminate()
        await service.wait()
    base = runs[0]["cpu_per_audio_second"]
    cpu_model = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in cpu_model.splitlines()
                  if ln.startswith("Model name")), "")  # fmt: skip
    return {
        "seconds_per_stream": SECONDS,
        "runs": runs,
        "ratio_to_one_stream": {
            r["streams"]: round(r["cpu_per_audio_second"] / base, 3) for r in runs
        },
        "target": "per-stream CPU per audio second constant from 1 to 4 streams within 10 %",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "cpu": model},
    }


def main() -> None:
    record = Run("streams", command="python -m bench streams")
    with tempfile.TemporaryDirectory() as folder:
        results = asyncio.run(run(Path(folder)))
    record.figures.update(results)
    worst = max(abs(v - 1) for v in results["ratio_to_one_stream"].values())
    record.target("per-stream CPU per audio second, largest change from 1 to 4 streams",
                  round(worst, 3), "<=", 0.10)  # fmt: skip
    record.write(path=RESULTS)
    print(results["ratio_to_one_stream"])


if __name__ == "__main__":
    main()
