"""The shipped static int8 networks against float32 (issue 27 item 1), and ONNX Runtime's settings.

``python -m bench.bench_int8`` (also ``python -m bench.bench_edge int8``) →
bench/results/edge-int8-shipped.json: for ECAPA and CAM++, the float32 graph and the int8 graph
that ``make models`` built (``models/weights/*.int8.onnx``,
:mod:`monitor.features.embedding_int8`), each on one thread as the daemon runs it: CPU ms per
3 s window (process CPU, median of 5 blocks of 10 runs after warm-up), CPU per audio second
over the corpus, the EER (ROCCH) over all pairs of the 1,250 test-split utterances of
speechocean762 (125 speakers, whole utterances after the VAD), and the cosine of each int8
embedding to its float32 one.

``python -m bench.bench_int8 settings`` → edge-ort-settings.json: the CPU ms per 3 s window of
each graph under each ONNX Runtime session setting the issue asks about (graph optimisation
level, denormals as zero, intra-op spinning, thread count), and torch for reference.

``VOXMETER_BENCH_INT8_BACKENDS=ecapa`` limits the backends. CPU time, not wall-clock: the 2
cores are shared; the load and the CPU model are recorded beside the figures.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import Run

BACKENDS = os.environ.get("VOXMETER_BENCH_INT8_BACKENDS", "ecapa,campplus").split(",")


def cpu_model() -> str:
    """The CPU's model name and whether it has VNNI (what ONNX Runtime's int8 kernels use)."""
    text = Path("/proc/cpuinfo").read_text()
    name = next(
        (
            line.split(":", 1)[1].strip()
            for line in text.splitlines()
            if line.startswith("model name")
        ),
        "unknown",
    )
    flags = set(
        next(
            (
                line.split(":", 1)[1].split()
                for line in text.splitlines()
                if line.startswith("flags")
            ),
            [],
        )
    )
    vnni = sorted(flags & {"avx512_vnni", "avx_vnni", "avx512f", "avx2"})
    return f"{name} ({', '.join(vnni)})"


def ms_per_window(run: Any, window: np.ndarray) -> float:
    """Median CPU ms of one call over 5 blocks of 10 calls, after 3 warm calls."""
    for _ in range(3):
        run(window)
    blocks = []
    for _ in range(5):
        started = time.process_time()
        for _ in range(10):
            run(window)
        blocks.append((time.process_time() - started) / 10)
    return round(1e3 * statistics.median(blocks), 1)


def test_utterances(backend: str) -> tuple[list[np.ndarray], list[int]]:
    """Filterbanks of every test-split utterance (speech only) and its speaker index."""
    from bench.common import CORPUS
    from monitor.audio.file import read_audio
    from monitor.audio.vad import speech_only
    from monitor.corpus import scan_corpus
    from monitor.features.fbank import ecapa_fbank, kaldi_fbank

    fbank = ecapa_fbank if backend == "ecapa" else kaldi_fbank
    test = scan_corpus(CORPUS, split="test")
    feats, labels = [], []
    for index, speaker in enumerate(test.speakers):
        for utterance in test.utterances_of(speaker):
            speech = speech_only(read_audio(utterance.path)[0], 16000)
            if len(speech) >= 1600:
                feats.append(fbank(speech))
                labels.append(index)
    return feats, labels


def bench_backend(backend: str) -> dict[str, Any]:
    """float32 against the shipped int8 graph of ``backend`` (see the module docstring)."""
    from monitor.disclosure.baselines import eer_rocch
    from monitor.features.embedding_int8 import ranges_digest
    from monitor.features.embedding_onnx import OnnxNetwork, graph_path
    from monitor.features.weights import sha256

    feats, labels = test_utterances(backend)
    window = next(f[:300] for f in feats if f.shape[0] >= 300)  # one 3 s window
    seconds = sum(f.shape[0] for f in feats) / 100
    upper = np.triu_indices(len(labels), 1)
    same = np.equal.outer(labels, labels)[upper]
    out: dict[str, Any] = {
        "backend": backend,
        "utterances": len(feats),
        "audio_seconds": round(seconds, 1),
    }
    unit = {}
    for label, name in (("float32", backend), ("int8", f"{backend}-int8")):
        network = OnnxNetwork(graph_path(name))
        per_window = ms_per_window(network, window)
        started = time.process_time()
        vectors = np.stack([network(f) for f in feats]).astype(np.float64)
        spent = time.process_time() - started
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        unit[label] = vectors
        scores = vectors @ vectors.T
        out[label] = {
            "graph": graph_path(name).name,
            "cpu_ms_per_3s_window": per_window,
            "cpu_per_audio_second": round(spent / seconds, 4),
            "eer_rocch_percent": round(
                100 * eer_rocch(scores[upper][same], scores[upper][~same]), 2
            ),
        }
        print(f"int8 bench {backend} {label}: {out[label]}", flush=True)
    out["int8"]["sha256"] = sha256(graph_path(f"{backend}-int8"))
    out["int8"]["ranges_sha256"] = ranges_digest(f"{backend}-int8")
    cosine = np.sum(unit["float32"] * unit["int8"], axis=1)
    out["cosine_int8_to_float32"] = {
        "min": round(float(cosine.min()), 5),
        "p1": round(float(np.percentile(cosine, 1)), 5),
        "mean": round(float(cosine.mean()), 5),
    }
    out["eer_change_points"] = round(
        out["int8"]["eer_rocch_percent"] - out["float32"]["eer_rocch_percent"], 2
    )
    out["speedup"] = round(
        out["float32"]["cpu_ms_per_3s_window"] / out["int8"]["cpu_ms_per_3s_window"], 2
    )
    out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    print(f"int8 bench {backend}: {out}", flush=True)
    return out


SETTINGS: dict[str, dict[str, Any]] = {
    "daemon (ORT_ENABLE_ALL, 1 thread, no arena)": {},
    "ORT_ENABLE_EXTENDED": {"level": "ORT_ENABLE_EXTENDED"},
    "ORT_ENABLE_BASIC": {"level": "ORT_ENABLE_BASIC"},
    "denormals as zero": {"config": {"session.set_denormal_as_zero": "1"}},
    "no intra-op spinning": {"config": {"session.intra_op.allow_spinning": "0"}},
    "2 threads": {"threads": 2},
    "2 threads, no spinning": {"threads": 2, "config": {"session.intra_op.allow_spinning": "0"}},
}
"""Each setting against the daemon's session (:class:`OnnxNetwork`): one change at a time."""

_SETTING_CHILD = r"""
import json, sys, time, resource
import numpy as np, onnxruntime as ort
from bench.bench_int8 import ms_per_window
path, change = sys.argv[1], json.loads(sys.argv[2])
window = np.load(sys.argv[3])
options = ort.SessionOptions()
options.intra_op_num_threads = change.get("threads", 1)
options.inter_op_num_threads = 1
options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
options.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                           change.get("level", "ORT_ENABLE_ALL"))
options.enable_cpu_mem_arena = False
options.log_severity_level = 3
for key, value in change.get("config", {}).items():
    options.add_session_config_entry(key, value)
session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
run = lambda w: session.run(None, {"feats": w[None]})
print(json.dumps({"cpu_ms": ms_per_window(run, window)}))
"""


_TORCH_CHILD = r"""
import json, sys
import numpy as np, torch
from bench.bench_int8 import ms_per_window
from monitor.features.embedding_onnx import GRAPHS, _torch_network
from monitor.features.weights import weights_path
torch.set_num_threads(1)
backend, window = sys.argv[1], torch.from_numpy(np.load(sys.argv[2]))[None]
network = _torch_network(backend, weights_path(GRAPHS[backend][0]))
def run(w):
    with torch.inference_mode():
        return network(w)
print(json.dumps({"cpu_ms": ms_per_window(run, window)}))
"""


def bench_settings() -> list[dict[str, Any]]:
    """CPU ms per 3 s window of each graph under each setting, each in a fresh process (so a
    thread pool or denormal mode never carries over); torch's float32 port for reference."""
    import json
    import tempfile

    from bench.common import CORPUS
    from monitor.audio.file import read_audio
    from monitor.audio.vad import speech_only
    from monitor.corpus import scan_corpus
    from monitor.features.embedding_onnx import graph_path
    from monitor.features.fbank import ecapa_fbank, kaldi_fbank

    test = scan_corpus(CORPUS, split="test")
    speech = np.concatenate(
        [speech_only(read_audio(u.path)[0], 16000) for u in test.utterances_of(test.speakers[0])]
    )[:48000]  # 3 s of one test speaker's speech
    rows = []
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    with tempfile.TemporaryDirectory() as scratch:
        for backend in BACKENDS:
            fbank = ecapa_fbank if backend == "ecapa" else kaldi_fbank
            window_file = Path(scratch) / f"{backend}.npy"
            np.save(window_file, fbank(speech).astype(np.float32))
            for graph in (backend, f"{backend}-int8"):
                for label, change in SETTINGS.items():
                    done = subprocess.run(
                        [
                            sys.executable,
                            "-c",
                            _SETTING_CHILD,
                            str(graph_path(graph)),
                            json.dumps(change),
                            str(window_file),
                        ],
                        capture_output=True,
                        text=True,
                        env=env,
                        check=True,
                    )
                    row = {
                        "graph": graph,
                        "setting": label,
                        **json.loads(done.stdout.strip().splitlines()[-1]),
                        "load": round(os.getloadavg()[0], 2),
                    }
                    print(f"settings: {row}", flush=True)
                    rows.append(row)
            done = subprocess.run(
                [sys.executable, "-c", _TORCH_CHILD, backend, str(window_file)],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            row = {
                "graph": f"{backend} (torch port, float32)",
                "setting": "torch, 1 thread",
                **json.loads(done.stdout.strip().splitlines()[-1]),
                "load": round(os.getloadavg()[0], 2),
            }
            print(f"settings: {row}", flush=True)
            rows.append(row)
    return rows


def main() -> None:
    if sys.argv[1:] == ["settings"]:
        record = Run("edge-ort-settings", command="python -m bench.bench_int8 settings")
        record.figures["results"] = bench_settings()
        record.write()
        return
    record = Run("edge-int8-shipped", command="make models && python -m bench.bench_int8")
    record.figures["results"] = [bench_backend(b) for b in BACKENDS]
    record.write()


if __name__ == "__main__":
    main()
