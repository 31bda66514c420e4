"""Speed of the front end per stage on 60 s of corpus speech, and our YIN against two peers.

Audio: utterances of adult speakers of the real corpus, each read with ``read_audio`` and
concatenated until 60 s (VAD then trims the pauses, as in extraction). Every stage runs on one
thread (torch.set_num_threads(1), the embedding's default) after a warm-up call, three times;
the figure kept is the fastest run, in CPU seconds of this process (the machine's two cores are
shared, so wall time is reported too but not judged). Real-time factor = seconds / 60.

Peers for F0 on the same speech: ``librosa.pyin`` and ``librosa.yin`` (8 kHz, 65-450 Hz,
10 ms hop, frame 2·123 samples for yin, 512 for pyin) and Praat via ``parselmouth``
(``Sound.to_pitch(time_step=0.01, pitch_floor=65, pitch_ceiling=450)``). Agreement: median F0
of each of 8 adult speakers (4 women, 4 men; 30 s of speech each) by every method.

Run: ``python -m bench features`` → bench/results/features.json and a summary on stdout.
Targets: whole front end ≤ 0.12 × real time, F0 + VAD ≤ 0.01.
"""

from __future__ import annotations

import csv
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.common import CORPUS, RESULTS_DIR, Run, best_of
from monitor.audio.file import read_audio
from monitor.audio.vad import speech_only
from monitor.corpus import scan_corpus
from monitor.features.base import get_feature
from monitor.features.f0 import LAG_MAX, median_hz, to_8k

RESULTS = RESULTS_DIR / "features.json"
RATE = 16000
SECONDS = 60.0
REPEATS = 3
TARGET_FRONT_END_RTF = 0.12
TARGET_F0_VAD_RTF = 0.01


def _adults(by_gender: int) -> list[str]:
    """The first ``by_gender`` women and men aged 18 or more, by speaker id."""
    with open(CORPUS / "speakers.tsv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle, delimiter="\t") if int(r["age"]) >= 18]
    return [
        s for g in ("f", "m") for s in [r["speaker"] for r in rows if r["gender"] == g][:by_gender]
    ]


def _speech_of(speakers: list[str], seconds: float) -> tuple[np.ndarray, list[str]]:
    """Concatenated utterances (read_audio, 16 kHz) of ``speakers``, round robin, cut to length."""
    corpus = scan_corpus(CORPUS)
    queues = [list(corpus.utterances_of(s)) for s in speakers]
    pieces: list[np.ndarray] = []
    used: list[str] = []
    total = 0
    while total < seconds * RATE and any(queues):
        for queue in queues:
            if queue and total < seconds * RATE:
                utterance = queue.pop(0)
                audio, _ = read_audio(utterance.path)
                pieces.append(audio)
                used.append(str(utterance.path))
                total += audio.shape[0]
    return np.concatenate(pieces)[: int(seconds * RATE)], used


def _best_of(function: Callable[[], Any], repeats: int = REPEATS) -> dict[str, float]:
    """Fastest of ``repeats`` runs: CPU seconds of this process and wall seconds."""
    return best_of(function, repeats)


def _front_end(audio: np.ndarray, paths: list[str]) -> dict[str, Any]:
    """Per-stage timing on ``audio`` (60 s), with loading and warm-up timed apart."""
    import torch

    torch.set_num_threads(1)
    features = {name: get_feature(name) for name in ("f0", "phone", "embedding")}
    load = time.perf_counter()
    for feature in features.values():  # loads models, JIT-compiles librosa's kernels
        feature.observe(audio[: 3 * RATE], RATE)
    load_seconds = time.perf_counter() - load

    stages: dict[str, dict[str, float]] = {}
    stages["read"] = _best_of(lambda: [read_audio(p) for p in paths])
    stages["vad"] = _best_of(lambda: speech_only(audio, RATE))
    speech = speech_only(audio, RATE)
    for name, feature in features.items():
        stages[name] = _best_of(lambda f=feature: f.observe(speech, RATE))
    for figures in stages.values():
        figures["rtf"] = figures["cpu_seconds"] / SECONDS
    front_end = sum(s["rtf"] for s in stages.values())
    f0_vad = stages["vad"]["rtf"] + stages["f0"]["rtf"]
    return {
        "audio_seconds": SECONDS,
        "speech_seconds": speech.shape[0] / RATE,
        "files": len(paths),
        "warm_up_seconds": load_seconds,
        "stages": stages,
        "front_end_rtf": front_end,
        "f0_plus_vad_rtf": f0_vad,
        "targets": {
            "front_end_rtf": TARGET_FRONT_END_RTF,
            "f0_plus_vad_rtf": TARGET_F0_VAD_RTF,
            "front_end_met": front_end <= TARGET_FRONT_END_RTF,
            "f0_plus_vad_met": f0_vad <= TARGET_F0_VAD_RTF,
        },
    }


def _ours(speech: np.ndarray) -> float:
    return median_hz(get_feature("f0").observe(speech, RATE).values)


def _pyin(speech: np.ndarray) -> float:
    import librosa

    f0, voiced, _ = librosa.pyin(
        to_8k(speech, RATE), fmin=65, fmax=450, sr=8000, frame_length=512, hop_length=80
    )
    return float(np.median(f0[voiced])) if voiced.any() else float("nan")


def _librosa_yin(speech: np.ndarray) -> float:
    import librosa

    f0 = librosa.yin(
        to_8k(speech, RATE), fmin=65, fmax=450, sr=8000, frame_length=2 * LAG_MAX, hop_length=80
    )
    return float(np.median(f0))  # librosa.yin has no voicing decision: every frame counts


def _praat(speech: np.ndarray) -> float:
    import parselmouth

    pitch = parselmouth.Sound(speech.astype(np.float64), sampling_frequency=RATE).to_pitch(
        time_step=0.01, pitch_floor=65.0, pitch_ceiling=450.0
    )
    values = pitch.selected_array["frequency"]
    voiced = values[values > 0]
    return float(np.median(voiced)) if voiced.size else float("nan")


PEERS: dict[str, Callable[[np.ndarray], float]] = {
    "ours": _ours,
    "librosa_pyin": _pyin,
    "librosa_yin": _librosa_yin,
    "praat": _praat,
}


def _f0_peers(speech: np.ndarray, speakers: list[str]) -> dict[str, Any]:
    """Speed of each F0 method on the 60 s of speech, and per-speaker median agreement."""
    speed: dict[str, dict[str, float]] = {}
    for name, method in PEERS.items():
        method(speech[:RATE])  # warm-up (librosa's numba kernels)
        speed[name] = _best_of(lambda m=method: m(speech), 1 if name == "librosa_pyin" else 3)
        speed[name]["rtf"] = speed[name]["cpu_seconds"] / (speech.shape[0] / RATE)
    for name in PEERS:
        speed[name]["times_slower_than_ours"] = (
            speed[name]["cpu_seconds"] / speed["ours"]["cpu_seconds"]
        )

    medians: dict[str, dict[str, float]] = {}
    for speaker in speakers:
        audio, _ = _speech_of([speaker], 30.0)
        voiced = speech_only(audio, RATE)
        medians[speaker] = {name: method(voiced) for name, method in PEERS.items()}
    agreement = {}
    for name in PEERS:
        if name == "ours":
            continue
        ratio = np.array([m["ours"] / m[name] for m in medians.values()])
        agreement[name] = {
            "median_abs_percent_difference": float(np.median(np.abs(ratio - 1)) * 100),
            "max_abs_percent_difference": float(np.max(np.abs(ratio - 1)) * 100),
        }
    return {"speed_on_speech": speed, "speaker_median_hz": medians, "agreement": agreement}


def run() -> dict[str, Any]:
    speakers = _adults(4)
    audio, paths = _speech_of(speakers, SECONDS)
    front_end = _front_end(audio, paths)
    peers = _f0_peers(speech_only(audio, RATE), speakers)
    return {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "threads": 1},
        "speakers": speakers,
        "front_end": front_end,
        "f0_peers": peers,
    }


def main() -> None:
    if not (CORPUS / "speakers.tsv").is_file():
        print(f"skipped: corpus not found at {CORPUS}")
        return
    record = Run("features", command="python -m bench features")
    results = run()
    record.figures.update(results)
    front = results["front_end"]
    record.target("front end, × real time", round(front["front_end_rtf"], 4), "<=", 0.12)
    record.target("F0 + VAD, × real time", round(front["f0_plus_vad_rtf"], 4), "<=", 0.01)
    record.write(path=RESULTS)
    fe = results["front_end"]
    print(f"front end on {fe['audio_seconds']:.0f} s ({fe['speech_seconds']:.1f} s speech), CPU s:")
    for stage, figures in fe["stages"].items():
        print(f"  {stage:<10} {figures['cpu_seconds']:7.3f} s  rtf {figures['rtf']:.4f}")
    print(
        f"  whole front end rtf {fe['front_end_rtf']:.4f} (target {TARGET_FRONT_END_RTF}), "
        f"f0+vad rtf {fe['f0_plus_vad_rtf']:.4f} (target {TARGET_F0_VAD_RTF})"
    )
    for name, figures in results["f0_peers"]["speed_on_speech"].items():
        print(
            f"  f0 {name:<13} rtf {figures['rtf']:.4f}  "
            f"x{figures['times_slower_than_ours']:.1f} our time"
        )
    for name, figures in results["f0_peers"]["agreement"].items():
        print(
            f"  median F0 vs {name:<13} median |diff| "
            f"{figures['median_abs_percent_difference']:.1f} %, "
            f"max {figures['max_abs_percent_difference']:.1f} %"
        )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
