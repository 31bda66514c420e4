"""What the received view costs (issue 30 item 2): process CPU seconds per protected audio second.

On 40 corpus files as protected utterances (α = 0.7), each part the daemon adds for a protected
window, timed alone in this process (``time.process_time``): the reproduction of the received
audio (McAdams over the 30 ms frames, chunk counterparts, :class:`ReceivedAudio`), the speaker
embedding of each received window (the configured backend, ecapa-int8 by default), and the
received scoring (ignorant and lazy attackers: two more scorings of the pooled evidence and
the window) beside the original scoring of the same windows. The templates are the 40 files'
own observations (N = 40; scoring grows with N as the original scoring does). Writes
bench/results/received.json.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from bench.common import CORPUS, RESULTS_DIR, Run
from monitor.audio.file import read_audio
from monitor.audio.frames import AudioFrame
from monitor.audio.vad import WebRtcVad
from monitor.audio.windows import SpeechWindow, Windower
from monitor.calibration.buckets import load_default
from monitor.events.messages import FeatureWindow, TrackedWindow
from monitor.features.base import FEATURE_NAMES, TemplateBatch, get_feature
from monitor.features.extract import FeatureCache, default_cache_dir, extract_many
from monitor.protect.received_audio import ReceivedAudio
from monitor.scoring.evidence import TrackScorer
from monitor.scoring.received import ReceivedTrackScorer, received_embedding
from monitor.scoring.scorer import Scorer
from monitor.vocabulary import FigureKey

RESULTS = RESULTS_DIR / "received.json"
ALPHA = 0.7
FRAME = 480  # 30 ms


def protected_windows(paths: list[Any]) -> tuple[list[SpeechWindow], float, float]:
    """Every window of the files as protected utterances; the audio seconds and the CPU
    seconds of the reproduction alone."""
    windows: list[SpeechWindow] = []
    seconds = cpu = 0.0
    for path in paths:
        audio, _ = read_audio(path)
        pcm = (audio * 32767).astype(np.int16)
        seconds += pcm.size / 16000
        vad, received = WebRtcVad(2, 30, 100), ReceivedAudio()
        windower = Windower(3.0, turn_pause_seconds=0.15, min_window_seconds=1.0, tail_seconds=1.0)
        for i in range(0, pcm.size, FRAME):
            last = i + FRAME >= pcm.size
            frame = AudioFrame(
                pcm[i : i + FRAME], i / 16000, utterance_end=last, protect_alpha=ALPHA
            )
            chunks = vad.process(frame) + (vad.flush() if last else [])
            started = time.process_time()
            chunks = received.attach(frame, chunks, last)
            cpu += time.process_time() - started
            for chunk in chunks:
                windows += windower.process(chunk)
            if last:
                windows += windower.close_turn(1.0)
    return windows, seconds, cpu


def main(args: list[str] | None = None) -> None:
    record = Run("received", command="python -m bench received")
    paths = sorted(CORPUS.glob("*/*.flac"))[:40]
    windows, audio_seconds, reproduce_cpu = protected_windows(paths)
    features = {name: get_feature(name) for name in FEATURE_NAMES}
    extraction = extract_many(paths, FeatureCache(default_cache_dir()))
    files = [
        extraction.files[str(p.absolute())] for p in paths if str(p.absolute()) in extraction.files
    ]
    aliases = [f"s{i:02d}" for i in range(len(files))]
    batches = {
        name: TemplateBatch.from_observations([f.observations[name] for f in files])
        for name in FEATURE_NAMES
    }
    scorer = Scorer(aliases, batches, load_default("ecapa-int8"), features)
    speech = sum(w.speech_seconds for w in windows)

    started = time.process_time()
    observed = [{n: f.observe(w.samples, 16000) for n, f in features.items()} for w in windows]
    original_features_cpu = time.process_time() - started
    started = time.process_time()
    embedded = [received_embedding(features, w.received) for w in windows]
    embedding_cpu = time.process_time() - started

    def tracked(k: int, window: SpeechWindow, received: bool) -> TrackedWindow:
        feature_window = FeatureWindow(
            k, window.start_seconds, window.end_seconds, window.speech_seconds, observed[k],
            0.0, 0.0, 0.0, received_embedding=embedded[k] if received else None,
        )  # fmt: skip
        return TrackedWindow(feature_window, "home-1", "local", aliases[0], 1.0, False)

    measure = FigureKey.parse("combined.lid")
    timings = {}
    for name, track_scorer in (
        ("original", TrackScorer(scorer, features, measure)),
        ("received", ReceivedTrackScorer(scorer, features, measure, lazy=scorer)),
    ):
        started = time.process_time()
        for k, window in enumerate(windows):
            track_scorer.process(tracked(k, window, name == "received"), 0.0)
        timings[name] = time.process_time() - started
    scoring_cpu = timings["received"] - timings["original"]
    per = {
        "reproduce": reproduce_cpu / audio_seconds,
        "embedding": embedding_cpu / audio_seconds,
        "scoring": scoring_cpu / audio_seconds,
    }
    results = {
        "files": len(paths),
        "audio_seconds": audio_seconds,
        "speech_seconds_in_windows": speech,
        "windows": len(windows),
        "templates": len(aliases),
        "alpha": ALPHA,
        "cpu_seconds": {
            "reproduce": reproduce_cpu,
            "received_embedding": embedding_cpu,
            "original_features_whole_windows": original_features_cpu,
            "original_scoring": timings["original"],
            "original_plus_received_scoring": timings["received"],
        },
        "cpu_per_protected_audio_second": {**per, "total": math.fsum(per.values())},
    }
    record.figures.update(results)
    record.write(path=RESULTS)
    print(results)


if __name__ == "__main__":
    main()
