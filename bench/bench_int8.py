"""The shipped static int8 networks against float32, the default chosen by measurement, and
ONNX Runtime's settings.

``python -m bench.bench_int8`` (also ``python -m bench.bench_edge int8``) →
bench/results/edge-int8-shipped.json (bench.common.Run): for ECAPA and CAM++, the float32 graph
and the int8 graph that ``make models`` built (``models/weights/*.int8.onnx``,
:mod:`monitor.features.embedding_int8`), each on one thread as the daemon runs it: CPU ms per
3 s window (process CPU, median of 5 blocks of 10 runs after warm-up), CPU per audio second
over the corpus, the EER (ROCCH) over all pairs of the 1,250 test-split utterances of
speechocean762 (125 speakers, whole utterances after the VAD), and the cosine of each int8
embedding to its float32 one; and the default embedding chosen by measurement
(:func:`choose_default`), with the shipped default's targets met or missed.

``python -m bench.bench_int8 settings`` → edge-ort-settings.json: the CPU ms per 3 s window of
each graph under each ONNX Runtime session setting that could matter (graph optimisation
level, denormals as zero, intra-op spinning, thread count), and torch for reference.

``VOXMETER_BENCH_INT8_BACKENDS=ecapa`` limits the backends. CPU time, not wall-clock: the 2
cores are shared; the load and the CPU model are recorded beside the figures.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import RESULTS_DIR, Run, machine, write_results

BACKENDS = os.environ.get("VOXMETER_BENCH_INT8_BACKENDS", "ecapa,campplus").split(",")


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


def int8_against_float32(unit: dict[str, np.ndarray], measured: dict[str, Any]) -> dict[str, Any]:
    """How far each int8 embedding is from its float32 one (cosine), and the EER's change."""
    cosine = np.sum(unit["float32"] * unit["int8"], axis=1)
    return {
        "cosine_int8_to_float32": {
            "min": round(float(cosine.min()), 5),
            "p1": round(float(np.percentile(cosine, 1)), 5),
            "mean": round(float(cosine.mean()), 5),
        },
        "eer_change_points": round(
            measured["int8"]["eer_rocch_percent"] - measured["float32"]["eer_rocch_percent"], 2
        ),
    }


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
    out.update(int8_against_float32(unit, out))
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


def choose_default(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The default embedding by measurement: the strongest attacker that fits. Among the
    graphs whose CPU per speech second (one 3 s window's network run, as the daemon makes it)
    fits the embedding's share of the edge budget (all of them if none does), those whose
    corpus EER is within :data:`EER_TOLERANCE` of the lowest are equally strong; the cheapest
    of them is the default.

    The share is a third of the 0.03 of a core per speech second the whole daemon may take
    (:data:`EMBEDDING_SHARE`): the phone decoder, the VAD and the loop take the rest.
    """
    rows = [
        {
            **row[label],
            "graph": name,
            "file": row[label]["graph"],
            "cpu_per_speech_second": round(row[label]["cpu_ms_per_3s_window"] / 3000, 4),
        }
        for row in results
        for label, name in (("float32", row["backend"]), ("int8", f"{row['backend']}-int8"))
    ]
    fits = [r for r in rows if r["cpu_per_speech_second"] <= EMBEDDING_SHARE] or rows
    lowest = min(r["eer_rocch_percent"] for r in fits)
    strong = [r for r in fits if r["eer_rocch_percent"] <= lowest + EER_TOLERANCE]
    best = min(strong, key=lambda r: (r["cpu_per_speech_second"], r["eer_rocch_percent"]))
    return {
        "graphs": rows,
        "share": EMBEDDING_SHARE,
        "eer_tolerance_points": EER_TOLERANCE,
        "default": best["graph"],
    }


EMBEDDING_SHARE = 0.01
"""CPU per audio second the embedding network may take: a third of the edge target."""
EER_TOLERANCE = 0.25
"""EER points within which two graphs are equally strong: the corpus's sampling error (about
80 misses among the 5,625 same-speaker pairs of the test split at 1.4 %: ±0.16 points, more
with speakers' pairs correlated)."""
PREVIOUS_DEFAULT = "ecapa-int8"
"""The default before this measurement: the new default's EER may be no worse than its."""


def main() -> None:
    """``settings``: ONNX Runtime's session settings; otherwise float32 against int8 for each
    backend and the default chosen by measurement (bench/results/edge-int8-shipped.json)."""
    if sys.argv[1:] == ["settings"]:
        write_results(
            RESULTS_DIR / "edge-ort-settings.json",
            {
                "benchmark": "ONNX Runtime session settings, CPU ms per 3 s window",
                "command": "python -m bench.bench_int8 settings",
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                **machine(),
                "results": bench_settings(),
                "load_average": [round(x, 2) for x in os.getloadavg()],
            },
        )
        return
    from monitor.features.base import DEFAULT_EMBEDDING

    run = Run("edge-int8-shipped", command="make models && python -m bench.bench_int8")
    if sys.argv[1:] == ["choose"]:  # the choice again from the figures already measured
        measured = json.loads((RESULTS_DIR / "edge-int8-shipped.json").read_text())
        run.date, run.load_start = measured["date"], measured["load_average"]["start"]
        results = measured["figures"]["backends"]
    else:
        results = [bench_backend(b) for b in BACKENDS]
    choice = choose_default(results)
    run.figures.update({"backends": results, "choice": choice})
    chosen = next(g for g in choice["graphs"] if g["graph"] == choice["default"])
    shipped = next((g for g in choice["graphs"] if g["graph"] == DEFAULT_EMBEDDING), None)
    run.target(
        "default_is_the_measured_choice",
        float(chosen["graph"] == DEFAULT_EMBEDDING),
        ">=",
        1.0,
        note=f"measured choice {chosen['graph']}, shipped {DEFAULT_EMBEDDING}",
    )
    run.target(
        "default_cpu_per_speech_second",
        chosen["cpu_per_speech_second"],
        "<=",
        EMBEDDING_SHARE,
        note=chosen["graph"],
    )
    previous = next((g for g in choice["graphs"] if g["graph"] == PREVIOUS_DEFAULT), None)
    if shipped is not None and previous is not None:
        run.target(
            "default_eer_percent",
            shipped["eer_rocch_percent"],
            "<=",
            previous["eer_rocch_percent"],
            note=f"{DEFAULT_EMBEDDING}'s corpus EER against {PREVIOUS_DEFAULT}'s",
        )
    path = run.write()
    if sys.argv[1:] == ["choose"]:  # the measurement's own commit and load, not today's
        document = json.loads(path.read_text())
        document.update(commit=measured["commit"], load_average=measured["load_average"])
        document["figures"]["chosen_by"] = "python -m bench.bench_int8 choose"
        write_results(path, document)
    print(f"int8 bench: wrote {path}", flush=True)


if __name__ == "__main__":
    main()
