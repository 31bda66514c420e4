"""Embedding backends side by side: speed on one thread, and how well each separates speakers.

Speed: 60 s of adult corpus speech (``read_audio``, VAD-trimmed as in extraction) cut into 3 s
windows, as the daemon embeds them; every backend on one torch thread after a warm-up, best of
three runs in CPU seconds (the two cores are shared). Real-time factor = CPU seconds / speech
seconds.

Separation: the 125 ``original_split = test`` speakers of speechocean762, one embedding per
utterance (10 each, VAD-trimmed, ~3 s of speech), every pair of utterances a trial (same
speaker: target; different: non-target), cosine scores. Reported: EER (ROC convex hull and
sweep), d' = (μ_t − μ_n)/√((σ_t² + σ_n²)/2), and nearest-neighbour identification (the most
similar other utterance is the same speaker's). Extraction goes through the feature cache
(``$VOXMETER_CACHE``), so after ``voxmeter evaluate`` with each backend it is cheap.

Run: ``python -m bench embedding`` → bench/results/embedding.json.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from bench.bench_features import _adults, _speech_of
from bench.common import CORPUS, RESULTS_DIR, Run, best_of
from monitor.audio.vad import speech_only
from monitor.corpus import scan_corpus
from monitor.disclosure.baselines import eer_rocch, eer_sweep
from monitor.features.base import EMBEDDING_BACKENDS, get_feature, set_embedding_backend
from monitor.features.extract import FeatureCache, default_cache_dir, extract_many

RESULTS = RESULTS_DIR / "embedding.json"
RATE = 16000
WINDOW_SECONDS = 3.0


def speed(speech: np.ndarray) -> dict[str, Any]:
    """CPU seconds per speech second of one backend over 3 s windows of ``speech``."""
    feature = get_feature("embedding")
    step = int(WINDOW_SECONDS * RATE)
    windows = [speech[i : i + step] for i in range(0, len(speech) - step + 1, step)]
    feature.observe(windows[0], RATE)  # warm-up: model load

    def run() -> None:
        for window in windows:
            feature.observe(window, RATE)

    timing = best_of(run, 3)
    seconds = len(windows) * WINDOW_SECONDS
    return {
        "windows": len(windows),
        "speech_seconds": seconds,
        "rtf_cpu": round(timing["cpu_seconds"] / seconds, 4),
        "rtf_wall": round(timing["wall_seconds"] / seconds, 4),
    }


def separation(jobs: int) -> dict[str, Any]:
    """EER, d' and nearest-neighbour identification of utterance pairs of the test speakers."""
    corpus = scan_corpus(CORPUS, split="test")
    speakers = list(corpus.speakers)
    paths = [str(u.path) for s in speakers for u in corpus.utterances_of(s)]
    labels = np.array([i for i, s in enumerate(speakers) for _ in corpus.utterances_of(s)])
    extraction = extract_many(
        paths, FeatureCache(default_cache_dir()), features=("embedding",), jobs=jobs
    )
    kept = [i for i, p in enumerate(paths) if p in extraction.files]
    vectors = np.stack([extraction.files[paths[i]].observations["embedding"].values for i in kept])
    labels = labels[kept]
    usable = np.linalg.norm(vectors, axis=1) > 0
    vectors, labels = vectors[usable], labels[usable]
    scores = vectors @ vectors.T
    upper = np.triu_indices(len(labels), 1)
    same = np.equal.outer(labels, labels)
    tar, non = scores[upper][same[upper]], scores[upper][~same[upper]]
    d_prime = (tar.mean() - non.mean()) / np.sqrt((tar.var() + non.var()) / 2)
    np.fill_diagonal(scores, -np.inf)
    nearest = labels[np.argmax(scores, axis=1)] == labels
    return {
        "speakers": len(speakers),
        "utterances": len(labels),
        "target_trials": len(tar),
        "nontarget_trials": len(non),
        "eer_rocch_percent": round(100 * eer_rocch(tar, non), 2),
        "eer_sweep_percent": round(100 * eer_sweep(tar, non), 2),
        "d_prime": round(float(d_prime), 3),
        "nearest_neighbour_id_percent": round(100 * float(nearest.mean()), 1),
        "target_mean": round(float(tar.mean()), 3),
        "nontarget_mean": round(float(non.mean()), 3),
    }


def main() -> None:
    import torch

    torch.set_num_threads(1)
    record = Run("embedding", command="python -m bench embedding")
    jobs = int(os.environ.get("VOXMETER_BENCH_JOBS", "1"))
    speech = speech_only(_speech_of(_adults(2), 60.0)[0], RATE)
    backends: dict[str, Any] = {}
    for backend in EMBEDDING_BACKENDS:
        set_embedding_backend(backend)
        feature = get_feature("embedding")
        backends[backend] = {
            "version": feature.version,
            "dimension": feature.dimension,
            "speed_one_thread": speed(speech),
            "separation_test_speakers": separation(jobs),
        }
        print(backend, backends[backend], flush=True)
    record.figures["backends"] = backends
    record.write(path=RESULTS)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
