"""Real-time factor of the audio front end on 60 s of real corpus speech, one thread.

The live target is F0 + VAD ≤ 0.01 × real time on these 2-core machines; this
benchmark reports the VAD share (the F0 share is bench_features'). Measured: WebRTC VAD (the
default) fed as the daemon feeds it (30 ms source frames), the Silero ONNX VAD, offline
``speech_only``, and the streaming file source (decode + resample).

Run: ``python -m bench audio`` → bench/results/audio.json and one line per detector.
"""

from __future__ import annotations

import asyncio
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.common import CORPUS, RESULTS_DIR, Run, best_of
from monitor.audio.file import FileSource, read_audio
from monitor.audio.frames import RATE_HZ, AudioFrame
from monitor.audio.vad import FrameVad, SileroVad, WebRtcVad, speech_only

RESULTS = RESULTS_DIR / "audio.json"
TARGET_SECONDS = 60.0
SOURCE_FRAME_MS = 30
REPEATS = 5
RTF_TARGET_F0_PLUS_VAD = 0.01


def corpus_speech(seconds: float = TARGET_SECONDS) -> tuple[np.ndarray, list[Path]]:
    """Concatenate corpus utterances (sorted, first speakers first) up to ``seconds``: int16."""
    files = sorted(CORPUS.glob("*/*.flac"))
    if not files:
        raise SystemExit(f"corpus not found at {CORPUS} (set VOXMETER_CORPUS)")
    pieces, used, total = [], [], 0
    for path in files:
        audio, _ = read_audio(path)
        pieces.append(audio)
        used.append(path)
        total += audio.shape[0]
        if total >= seconds * RATE_HZ:
            break
    joined = np.concatenate(pieces)[: round(seconds * RATE_HZ)]
    return np.clip(np.rint(joined * 32767), -32768, 32767).astype(np.int16), used


def best_cpu_seconds(run: Callable[[], object], repeats: int = REPEATS) -> float:
    """Fastest of ``repeats`` runs in CPU seconds of this thread (noise from neighbours drops)."""
    return best_of(run, repeats, cpu_clock=time.thread_time)["cpu_seconds"]


def stream_through(vad: FrameVad, pcm: np.ndarray) -> float:
    """Feed ``pcm`` as 30 ms source frames, as the daemon does; return the speech fraction."""
    step = RATE_HZ * SOURCE_FRAME_MS // 1000
    vad.reset()
    vad.frames_total = vad.frames_speech = 0
    for offset in range(0, pcm.shape[0], step):
        vad.process(AudioFrame(pcm[offset : offset + step], offset / RATE_HZ))
    vad.flush()
    return vad.frames_speech / max(vad.frames_total, 1)


async def _drain_all(files: list[Path]) -> int:
    total = 0
    for path in files:
        async for frame in FileSource(path, realtime=False).frames():
            total += frame.samples.shape[0]
    return total


def run() -> dict[str, object]:
    pcm, files = corpus_speech()
    seconds = pcm.shape[0] / RATE_HZ
    results: dict[str, object] = {
        "audio_seconds": seconds,
        "files": len(files),
        "threads": 1,
        "source_frame_ms": SOURCE_FRAME_MS,
        "repeats": REPEATS,
        "clock": "thread CPU time, best of repeats",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }
    detectors: dict[str, FrameVad] = {
        "webrtcvad": WebRtcVad(aggressiveness=2, frame_ms=30, hangover_ms=300),
        "webrtcvad_10ms": WebRtcVad(aggressiveness=2, frame_ms=10, hangover_ms=300),
        "silero": SileroVad(threshold=0.5, hangover_ms=300),
    }
    for name, vad in detectors.items():
        fraction = stream_through(vad, pcm)
        cpu = best_cpu_seconds(lambda vad=vad: stream_through(vad, pcm))
        results[name] = {
            "cpu_seconds": round(cpu, 5),
            "realtime_factor": round(cpu / seconds, 6),
            "speech_fraction": round(fraction, 3),
        }
    audio = pcm.astype(np.float32) / 32768
    cpu = best_cpu_seconds(lambda: speech_only(audio, RATE_HZ))
    results["speech_only"] = {
        "cpu_seconds": round(cpu, 5),
        "realtime_factor": round(cpu / seconds, 6),
    }
    # The streaming file source's own cost: decode FLAC and cut 30 ms frames (the corpus is
    # 16 kHz, so no resampling), all files in one event loop.
    start = time.perf_counter()
    source_samples = asyncio.run(_drain_all(files))
    wall = time.perf_counter() - start
    results["file_source"] = {
        "wall_seconds": round(wall, 4),
        "realtime_factor": round(wall / (source_samples / RATE_HZ), 6),
    }
    vad_rtf = results["webrtcvad"]["realtime_factor"]  # type: ignore[index]
    results["vad_budget_share"] = round(vad_rtf / RTF_TARGET_F0_PLUS_VAD, 4)
    return results


def main() -> None:
    record = Run("audio", command="python -m bench audio")
    results = run()
    record.figures.update(results)
    record.write(path=RESULTS)
    for name in ("webrtcvad", "webrtcvad_10ms", "silero", "speech_only", "file_source"):
        figures = results[name]
        print(f"{name:16s} real-time factor {figures['realtime_factor']:.5f}")  # type: ignore[index]
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
