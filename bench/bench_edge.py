"""The edge budget (issues 20, 27): this release against the previous one, side by side in one run.

1. ``side``: paced corpus replay through the whole daemon (``bench_daemon``'s replay: VAD, f0,
   phone and the embedding, tracking, scoring against N = 10³ templates, ledger, Prometheus),
   for the previous release (a ``git worktree`` of ``VOXMETER_BENCH_OLD``, default ``4a3c7ff``,
   run with ``PYTHONPATH`` pointing there and the same ``models/weights``) and for this
   checkout, interleaved: ECAPA and CAM++ with every feature, ECAPA with the phone feature
   off. This release runs with ``NEW_FULL`` (no shedding, normal priority: every feature
   measured, as the old one). End of window → metric p50/p95, process CPU per audio second
   (after warm-up) and the ratio new/old; the child's Prometheus endpoint is scraped every
   ``SCRAPE_EVERY`` s (scrape p50/p99).
2. ``quota``: both releases at the same time, each in a cgroup of its own given and limited to
   25 % of one core (v1 ``cpu.cfs_quota_us`` + the largest ``cpu.shares``, or v2 ``cpu.max`` +
   ``cpu.weight``), over ``VOXMETER_BENCH_QUOTA_SECONDS`` (600) of paced speech with their
   default settings (this release: idle priority, shedding): audio dropped, latency over the
   first and the last minute (lag growth), CPU per audio second, seconds shed, scraped every
   15 s as Prometheus does.
3. ``assistant``: a real speech-to-text service (pocketsphinx over Wyoming,
   tests/realparts/wyoming_upstreams.py) and the daemon (default settings) pinned to one core
   (``taskset -c VOXMETER_BENCH_ASSISTANT_CORE``): requests of 3 s streamed in real time, the
   latency from ``audio-stop`` to ``transcript`` without the daemon, beside it, and without
   it again.

Each measurement is its own child process (``python -c`` with the tree's own ``bench_daemon``),
so the two releases never share a process. Run: ``python -m bench.bench_edge`` (all three) or
``python -m bench.bench_edge side|quota|assistant`` → bench/results/edge.json,
edge-quota.json, edge-assistant.json; ``features``, ``profile``, ``int8``, ``phone`` are the
issue-20 measurements. ``VOXMETER_BENCH_EDGE_QUICK=1`` for a short development run. The
machine's cores are shared: load and the CPU model are recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from bench.common import Run

REPO = Path(__file__).resolve().parent.parent
OLD = os.environ.get("VOXMETER_BENCH_OLD", "4a3c7ff")
QUICK = os.environ.get("VOXMETER_BENCH_EDGE_QUICK") == "1"
BACKENDS = ("ecapa",) if QUICK else ("ecapa", "campplus")
SIZES = (1_000,) if QUICK else (1_000, 100_000)
QUOTA_SECONDS = float(os.environ.get("VOXMETER_BENCH_QUOTA_SECONDS", 60 if QUICK else 600))
QUOTA_SHARE = 0.25
SCRAPE_EVERY = float(os.environ.get("VOXMETER_BENCH_SCRAPE_EVERY", 1.0))
QUOTA_SCRAPE_EVERY = 15.0  # Prometheus's default scrape_interval
CGROUP_NAME = f"voxmeter-bench-{os.getpid()}"

# Runs in the tree under test (its own bench_daemon): one paced replay, one JSON line out.
CHILD = r"""
import json, sys, time
from pathlib import Path
import numpy as np
import bench.bench_daemon as bd
from monitor.exporters.prometheus import PrometheusExporter
from monitor.features.base import set_embedding_backend

backend, n, folder, stream = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
extra = json.loads(sys.argv[5]) if len(sys.argv) > 5 else []
start_server = PrometheusExporter.start_server
exporters = []
def announce(self):
    server = start_server(self)
    exporters.append(self)
    print("PORT", server.server_port, flush=True)
    return server
PrometheusExporter.start_server = announce
set_embedding_backend(backend)
bd._dims()
bd.PACED_TEMPLATES = n
folder.mkdir(parents=True)
db = bd._database(folder, bd._calibration()[0])
wall = time.monotonic()
probe, summary, cpu = bd._run(db, stream, fast=False, extra=extra)
latency = np.array(probe.latencies) * 1e3
minute = max(1, int(round(len(latency) * 60 / max(summary.audio_seconds, 1))))
print("RESULT " + json.dumps({
    "audio_seconds": round(summary.audio_seconds, 1),
    "windows": summary.windows,
    "latency_p50_ms": round(float(np.percentile(latency, 50)), 1),
    "latency_p95_ms": round(float(np.percentile(latency, 95)), 1),
    "latency_max_ms": round(float(latency.max()), 1),
    "latency_first_minute_p95_ms": round(float(np.percentile(latency[:minute], 95)), 1),
    "latency_last_minute_p95_ms": round(float(np.percentile(latency[-minute:], 95)), 1),
    "cpu_share_per_audio_second": round(cpu / summary.audio_seconds, 4),
    # releases before the audio-loss accounting counted frames, later ones seconds
    "frames_dropped": getattr(summary, "frames_dropped", None),
    "dropped_seconds": getattr(summary, "dropped_seconds", None),
    "wall_seconds": round(time.monotonic() - wall, 1),
    "overrides": extra,
    # releases before issue 27 do not shed (None)
    "shed_seconds": {
        f: exporters[0].registry.get_sample_value("voxmeter_shed_seconds_total", {"feature": f})
        for f in ("phone", "turns")
    } if exporters else None,
}), flush=True)
"""


class Scraper:
    """GET /metrics every ``every`` s from this (otherwise idle) process; latencies in ms."""

    def __init__(self, port: int, every: float = SCRAPE_EVERY) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.every = every
        self.latencies: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scraper", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    response.read()
            except OSError:
                self.errors += 1
                continue
            self.latencies.append(1e3 * (time.perf_counter() - started))

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        values = np.array(self.latencies or [np.nan])
        return {
            "scrapes": len(self.latencies),
            "scrape_p50_ms": round(float(np.percentile(values, 50)), 2),
            "scrape_p99_ms": round(float(np.percentile(values, 99)), 2),
            "scrape_max_ms": round(float(values.max()), 2),
            "scrape_errors": self.errors,
        }


def _cgroup(share: float, *, suffix: str = "") -> Path:
    """A CPU cgroup limited to ``share`` of one core (v2 cpu.max, else v1 CFS quota) and given
    it: the largest weight, so that other jobs on a shared machine do not take it (a device
    whose assistant leaves the monitor a quarter of a core)."""
    v2, v1 = Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/cpu")
    period = 100_000
    if (v2 / "cgroup.controllers").is_file() and "cpu" in (v2 / "cgroup.controllers").read_text():
        group = v2 / f"{CGROUP_NAME}{suffix}"
        group.mkdir()
        (group / "cpu.max").write_text(f"{int(share * period)} {period}")
        (group / "cpu.weight").write_text("10000")
    else:
        group = v1 / f"{CGROUP_NAME}{suffix}"
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text(str(period))
        (group / "cpu.cfs_quota_us").write_text(str(int(share * period)))
        (group / "cpu.shares").write_text("262144")
    return group


def run_child(
    tree: Path,
    backend: str,
    n: int,
    folder: Path,
    stream: Path,
    *,
    cgroup: Path | None = None,
    scrape_every: float = SCRAPE_EVERY,
    extra: list[str] | None = None,
    prefix: list[str] | None = None,
    started: threading.Event | None = None,
) -> dict[str, Any]:
    """One paced replay in a child process running ``tree``'s code, scraped meanwhile
    (``extra``: config overrides; ``prefix``: e.g. taskset; ``started`` is set once the
    daemon measures)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}

    def join_cgroup() -> None:
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    command = [sys.executable, "-c", CHILD, backend, str(n), str(folder), str(stream)]
    command = [*(prefix or []), *command, json.dumps(extra or [])]
    child = subprocess.Popen(
        command, cwd=tree, env=env, stdout=subprocess.PIPE, text=True, preexec_fn=join_cgroup
    )
    scraper, result = None, None
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith("PORT ") and scraper is None:
            scraper = Scraper(int(line.split()[1]), scrape_every)
            if started is not None:
                started.set()
        elif line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
    if started is not None:
        started.set()  # also when it failed: nobody waits for ever
    if child.wait() != 0 or result is None:
        raise RuntimeError(f"{tree}: paced replay failed (exit {child.returncode})")
    if scraper is not None:
        result.update(scraper.stop())
    return result


def _long_stream(stream: Path, seconds: float, folder: Path, *, name: str = "long.wav") -> Path:
    """``seconds`` of ``stream`` (looped as needed)."""
    audio, rate = sf.read(stream, dtype="int16")
    loops = int(np.ceil(seconds * rate / len(audio)))
    target = folder / name
    sf.write(target, np.tile(audio, loops)[: int(seconds * rate)], rate, subtype="PCM_16")
    return target


def _old_tree(folder: Path) -> Path:
    tree = folder / "old"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(tree), OLD],
        check=True,
    )
    # the same ONNX graphs and checkpoints (not in git): else ``auto`` would fall back to torch
    (tree / "models" / "weights").symlink_to((REPO / "models" / "weights").resolve())
    return tree


def bench_features() -> dict[str, Any]:
    """CPU ms per 3 s corpus window, in this process: whole-window ``observe`` against a stream
    fed 30 ms blocks (work while the window fills / left at its end), per extractor and runtime;
    and ONNX Runtime's dynamic int8 quantisation of each network."""
    from bench.common import CORPUS
    from monitor.audio.file import read_audio
    from monitor.features.base import open_stream
    from monitor.features.embedding import CampplusEmbedding, EcapaEmbedding
    from monitor.features.f0 import F0Feature
    from monitor.features.phone import PhoneFeature

    paths = sorted(CORPUS.glob("00*/*.flac"))[:16]
    windows = [a for a in (read_audio(p)[0][:48000] for p in paths) if len(a) == 48000][:8]
    extractors: dict[str, Any] = {
        "f0": F0Feature(),
        "phone": PhoneFeature(),
        "ecapa torch": EcapaEmbedding(runtime="torch"),
        "ecapa onnx": EcapaEmbedding(runtime="onnx"),
        "campplus torch": CampplusEmbedding(runtime="torch"),
        "campplus onnx": CampplusEmbedding(runtime="onnx"),
    }
    out: dict[str, Any] = {}
    for name, feature in extractors.items():
        feature.observe(windows[0], 16000)  # load
        started = time.process_time()
        for window in windows:
            feature.observe(window, 16000)
        whole = (time.process_time() - started) / len(windows)
        fed = finished = 0.0
        for window in windows:
            stream = open_stream(feature, 16000)
            started = time.process_time()
            for i in range(0, len(window), 480):
                stream.feed(window[i : i + 480])
            middle = time.process_time()
            stream.finish()
            fed, finished = fed + middle - started, finished + time.process_time() - middle
        out[name] = {
            "whole_ms": round(1e3 * whole, 1),
            "fed_while_filling_ms": round(1e3 * fed / len(windows), 1),
            "left_at_window_end_ms": round(1e3 * finished / len(windows), 1),
        }
        print(f"{name}: {out[name]}", flush=True)
    out["int8"] = _int8_timing()
    return out


def _int8_timing() -> dict[str, Any]:
    """CPU ms of one 3 s window (300 frames) through each graph, float32 and dynamic int8."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from monitor.features.embedding_onnx import GRAPHS, OnnxNetwork, graph_path

    feats = np.random.default_rng(0).normal(size=(300, 80)).astype(np.float32)
    out = {}
    graphs = {backend: graph_path(backend).resolve() for backend in GRAPHS}
    # ONNX Runtime's quantisers leave shape-inference files in the working directory
    with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):
        for backend in GRAPHS:
            int8 = Path(scratch) / f"{backend}.int8.onnx"
            quantize_dynamic(graphs[backend], int8, weight_type=QuantType.QInt8)
            for label, path in (("float32", graphs[backend]), ("int8", int8)):
                network = OnnxNetwork(path)
                network(feats)
                started = time.process_time()
                for _ in range(5):
                    network(feats)
                out[f"{backend} {label} ms"] = round(1e3 * (time.process_time() - started) / 5, 1)
    print(f"int8: {out}", flush=True)
    return out


INT8_VARIANT = os.environ.get("VOXMETER_BENCH_INT8", "u8s8")
"""u8s8 (uint8 activations, int8 weights: fastest with VNNI), u8s8-reduce-range (7-bit
weights: no saturation in the AVX2 kernels without VNNI) or s8s8 (int8 activations)."""
INT8_BACKENDS = os.environ.get("VOXMETER_BENCH_INT8_BACKENDS", "ecapa,campplus").split(",")


def bench_int8(backend: str = "ecapa") -> dict[str, Any]:
    """Static int8 (QDQ, Conv layers only, per-channel weights, calibrated on 32 train-split
    windows; ``INT8_VARIANT``) against the float32 graph: CPU per 3 s window, cosine to float32
    and the corpus EER of test-split utterance pairs (as ``bench_embedding``: 125 speakers,
    whole utterances after the VAD)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from bench.common import CORPUS
    from monitor.audio.file import read_audio
    from monitor.audio.vad import speech_only
    from monitor.corpus import scan_corpus
    from monitor.disclosure.baselines import eer_rocch
    from monitor.features.embedding_onnx import OnnxNetwork, graph_path
    from monitor.features.fbank import ecapa_fbank, kaldi_fbank

    fbank = ecapa_fbank if backend == "ecapa" else kaldi_fbank
    train = scan_corpus(CORPUS, split="train")
    calibration = [
        {"feats": fbank(read_audio(u.path)[0][:48000])[None]}
        for s in list(train.speakers)[::8][:32]
        for u in train.utterances_of(s)[:1]
    ]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(calibration)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.items, None)

    test = scan_corpus(CORPUS, split="test")
    feats, labels = [], []
    for index, speaker in enumerate(test.speakers):
        for utterance in test.utterances_of(speaker):
            speech = speech_only(read_audio(utterance.path)[0], 16000)
            if len(speech) >= 1600:
                feats.append(fbank(speech))
                labels.append(index)
    out: dict[str, Any] = {"backend": backend, "variant": INT8_VARIANT, "utterances": len(feats)}
    source = graph_path(backend).resolve()
    with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):
        prepared, int8 = Path(scratch) / "pre.onnx", Path(scratch) / "int8.onnx"
        quant_pre_process(source, prepared, skip_symbolic_shape=True)
        quantize_static(
            prepared, int8, Reader(), quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QInt8 if INT8_VARIANT == "s8s8" else QuantType.QUInt8,
            weight_type=QuantType.QInt8, per_channel=True,
            reduce_range=INT8_VARIANT == "u8s8-reduce-range", op_types_to_quantize=["Conv"],
        )  # fmt: skip
        unit = {}
        window = calibration[0]["feats"][0]  # one 3 s train window (300 frames)
        for label, path in (("float32", source), ("int8", int8)):
            network = OnnxNetwork(path)
            network(window)
            started = time.process_time()
            for _ in range(10):
                network(window)
            per_window = (time.process_time() - started) / 10
            started = time.process_time()
            vectors = np.stack([network(f) for f in feats])
            seconds = sum(f.shape[0] for f in feats) / 100
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            unit[label] = vectors
            scores = vectors @ vectors.T
            upper = np.triu_indices(len(labels), 1)
            same = np.equal.outer(labels, labels)[upper]
            out[label] = {
                "cpu_ms_per_3s_window": round(1e3 * per_window, 1),
                "cpu_per_audio_second": round((time.process_time() - started) / seconds, 4),
                "eer_rocch_percent": round(
                    100 * eer_rocch(scores[upper][same], scores[upper][~same]), 2
                ),
            }
            print(f"int8 bench {backend} {label}: {out[label]}", flush=True)
    cosine = np.sum(unit["float32"] * unit["int8"], axis=1)
    out["cosine_int8_to_float32"] = {
        "min": round(float(cosine.min()), 5),
        "p1": round(float(np.percentile(cosine, 1)), 5),
        "mean": round(float(cosine.mean()), 5),
    }
    out["eer_change_points"] = round(
        out["int8"]["eer_rocch_percent"] - out["float32"]["eer_rocch_percent"], 2
    )
    out["audio_seconds"] = round(seconds, 1)
    print(f"int8 bench {backend}: {out}", flush=True)
    return out


PHONE_DECODERS: dict[str, dict[str, Any]] = {
    "today (beams 1e-20)": {},
    "ds=2": {"ds": 2},
    "beams 1e-10": {"beam": 1e-10, "pbeam": 1e-10},
    "ds=2 + beams 1e-10": {"ds": 2, "beam": 1e-10, "pbeam": 1e-10},
    "beams 1e-15": {"beam": 1e-15, "pbeam": 1e-15},
    "topn 2": {"topn": 2},
    "topn 3": {"topn": 3},
}
"""Candidate all-phone decoders: pocketsphinx options over today's (``phone._new_decoder``)."""


def bench_phone(split: str = "test") -> list[dict[str, Any]]:
    """Phone disclosure (the audit's measured MeanD at 3 s test, 12 s templates, as
    ``voxmeter evaluate --features phone --test-seconds 3``, no feature cache) and decoding CPU
    per audio second over the whole ``split``, for today's decoder and each cheaper candidate."""
    import monitor.features.phone as phone
    from bench.common import CORPUS
    from monitor.evaluate import evaluate_corpus

    today = phone._new_decoder
    decode = phone.decode_phones
    rows = []
    wanted = os.environ.get("VOXMETER_BENCH_PHONE_DECODERS")
    for label, options in PHONE_DECODERS.items():
        if wanted and label not in wanted.split(";"):
            continue
        spent = {"cpu": 0.0, "seconds": 0.0}

        def timed(audio: np.ndarray, rate: int, spent: dict[str, float] = spent) -> list[str]:
            started = time.thread_time()
            phones = decode(audio, rate)
            spent["cpu"] += time.thread_time() - started
            spent["seconds"] += len(audio) / rate
            return phones

        def candidate(options: dict[str, Any] = options) -> Any:
            from pocketsphinx import Decoder, get_model_path

            settings = {"lw": 2.0, "beam": 1e-20, "pbeam": 1e-20, **options}
            return Decoder(
                allphone=get_model_path("en-us/en-us-phone.lm.bin"),
                loglevel="FATAL",
                logfn=os.devnull,
                **settings,
            )

        phone._new_decoder, phone._DECODER, phone.decode_phones = candidate, None, timed
        phone._IDLE.clear()
        try:
            with tempfile.TemporaryDirectory() as out:
                audit, _ = evaluate_corpus(
                    CORPUS, out, split=split, test_seconds=(3.0,), features=("phone",)
                )
        finally:
            phone._new_decoder, phone._DECODER, phone.decode_phones = today, None, decode
            phone._IDLE.clear()
        audited = audit.main.features["phone"]
        row = {
            "decoder": label,
            "options": options,
            "MeanD_bits": round(audited.histogram_stats.MeanD, 4),
            "MeanD_model_bits": round(audited.model.stats.MeanD, 4),
            "IdR_percent": round(100 * audited.histogram_stats.IdR, 2),
            "EER_percent": round(100 * audited.EER, 2),
            "speakers": audit.main.N,
            "decoded_seconds": round(spent["seconds"], 1),
            "cpu_per_audio_second": round(spent["cpu"] / max(spent["seconds"], 1e-9), 4),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        }
        rows.append(row)
        print(f"phone decoder {row}", flush=True)
    return rows


class ThreadCpu:
    """CPU seconds of every thread of this process (``/proc/self/task``), sampled each second
    while a replay runs (threads that end keep their last sample), named by Python's threads
    where one runs there (ONNX Runtime's and other native threads show as ``native``)."""

    def __init__(self) -> None:
        self.seconds: dict[int, float] = {}
        self.names: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="thread-cpu", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        self.names.update({t.native_id: t.name for t in threading.enumerate() if t.native_id})
        for task in Path("/proc/self/task").iterdir():
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            self.seconds[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self._sample()

    def stop(self) -> dict[str, float]:
        """CPU seconds per thread name (threads of one pool summed; prefixes kept)."""
        self._stop.set()
        self._thread.join()
        self._sample()
        out: dict[str, float] = {}
        for tid, seconds in self.seconds.items():
            name = self.names.get(tid, "native")
            name = name.rstrip("_0123456789") or name
            out[name] = out.get(name, 0.0) + seconds
        return out


def bench_profile(backend: str = "ecapa", n: int = 1_000) -> dict[str, Any]:
    """Where the daemon's CPU goes: one paced replay (``bench_daemon``'s, N templates) in this
    process with each stage's work wrapped in a per-thread CPU clock (inclusive seconds per
    audio second; a wrapped call inside another is counted in both)."""
    import bench.bench_daemon as bd
    from monitor.audio.vad import FrameVad
    from monitor.features.base import BufferedStream, set_embedding_backend
    from monitor.features.embedding import EmbeddingStream
    from monitor.features.f0 import F0Stream
    from monitor.features.phone import PhoneStream
    from monitor.scoring.evidence import TrackScorer
    from monitor.tracking.turns import TurnSplitter

    spent: dict[str, float] = {}
    wrapped = {
        "vad (silero)": [(FrameVad, "process")],
        "phone: fed while the window fills": [(PhoneStream, "feed")],
        "phone: at the window's end": [(PhoneStream, "finish")],
        "f0": [(F0Stream, "feed"), (F0Stream, "finish")],
        "embedding: filterbanks fed": [(EmbeddingStream, "feed")],
        "embedding: network at the window's end": [(EmbeddingStream, "finish")],
        "turn changes: score and uncertain parts embedded": [(TurnSplitter, "split")],
        "whole-window fallbacks": [(BufferedStream, "finish")],
        "scoring": [(TrackScorer, "process")],
    }
    originals = []
    for label, targets in wrapped.items():
        spent[label] = 0.0
        for cls, name in targets:
            original = getattr(cls, name)
            originals.append((cls, name, original))

            def timed(*args: Any, _f: Any = original, _label: str = label, **kw: Any) -> Any:
                started = time.thread_time()
                try:
                    return _f(*args, **kw)
                finally:
                    spent[_label] += time.thread_time() - started

            setattr(cls, name, timed)
    set_embedding_backend(backend)
    bd._dims()
    bd.PACED_TEMPLATES = n
    folder = Path(tempfile.mkdtemp(prefix="voxmeter-bench-profile-"))
    try:
        stream, kind = bd._speech(folder)
        (folder / "db").mkdir()
        db = bd._database(folder / "db", bd._calibration()[0])
        threads = ThreadCpu()
        _, summary, cpu = bd._run(db, stream, fast=False, extra=[])
        per_thread = threads.stop()
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)
        shutil.rmtree(folder, ignore_errors=True)
    audio = summary.audio_seconds
    out = {
        "backend": backend,
        "templates": n,
        "speech_source": kind,
        "audio_seconds": round(audio, 1),
        "windows": summary.windows,
        "process_cpu_per_audio_second": round(cpu / audio, 4),
        "cpu_per_audio_second": {k: round(v / audio, 4) for k, v in spent.items()},
        # from the process start (imports, model loading) to the end of the replay
        "thread_cpu_per_audio_second": {
            k: round(v / audio, 4) for k, v in sorted(per_thread.items(), key=lambda kv: -kv[1])
        },
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    print(f"profile: {out}", flush=True)
    return out


def _side_targets(record: Run, rows: list[dict[str, Any]]) -> None:
    """The side-by-side run's targets: CPU per audio second, the ratio to the previous
    release in the same run, latency and scrape time."""
    by_row = {r["row"]: r for r in rows}
    cpu = {k: r["new"]["cpu_share_per_audio_second"] for k, r in by_row.items()}
    record.target("CPU per audio second, every feature, ECAPA", cpu["ecapa, all features"],
                  "<=", TARGETS["cpu_share_per_audio_second_all_features"])  # fmt: skip
    record.target("CPU per audio second, every feature, CAM++", cpu["campplus, all features"],
                  "<=", TARGETS["cpu_share_per_audio_second_all_features"])  # fmt: skip
    record.target("CPU per audio second, phone feature off, ECAPA", cpu["ecapa, phone off"],
                  "<=", TARGETS["cpu_share_per_audio_second_phone_off"])  # fmt: skip
    old = by_row["ecapa, all features"]["old"]["cpu_share_per_audio_second"]
    record.target("CPU of this release over the previous one's, same run (ECAPA)",
                  round(cpu["ecapa, all features"] / old, 2), "<=",
                  TARGETS["cpu_ratio_new_to_old"])  # fmt: skip
    for key, label in (("ecapa, all features", "ECAPA"), ("campplus, all features", "CAM++")):
        record.target(f"end of window to metric p95, ms, {label}",
                      by_row[key]["new"]["latency_p95_ms"], "<=",
                      TARGETS["latency_p95_ms_n1000"])  # fmt: skip
    worst = max(r["new"]["scrape_p99_ms"] for r in rows)
    record.target("scrape p99, ms (worst row)", worst, "<=", TARGETS["scrape_p99_ms"])


def main() -> None:
    if sys.argv[1:] == ["int8"] and "VOXMETER_BENCH_INT8" not in os.environ:
        from bench.bench_int8 import main as int8_main  # the shipped int8 graphs (issue 27)

        int8_main()
        return
    if sys.argv[1:] == ["int8"]:  # quantiser variants, quantised here (issue 20's exploration)
        suffix = "" if INT8_VARIANT == "u8s8" else f"-{INT8_VARIANT}"
        record = Run(
            f"edge-int8{suffix}",
            command=f"VOXMETER_BENCH_INT8={INT8_VARIANT} python -m bench.bench_edge int8",
        )
        record.figures["results"] = [bench_int8(b) for b in INT8_BACKENDS]
        record.write()
        return
    if sys.argv[1:] == ["phone"]:
        name = (
            "edge-phone.json"
            if not os.environ.get("VOXMETER_BENCH_PHONE_DECODERS")
            else ("edge-phone-more.json")
        )
        record = Run(name.removesuffix(".json"), command="python -m bench.bench_edge phone")
        record.figures.update({"split": "test", "results": bench_phone()})
        record.write()
        return
    if sys.argv[1:] == ["profile"]:
        record = Run("edge-profile", command="python -m bench.bench_edge profile")
        record.figures["profile"] = bench_profile()
        record.write()
        return
    if sys.argv[1:] == ["features"]:
        record = Run("edge-features", command="python -m bench.bench_edge features")
        record.figures["features"] = bench_features()
        record.write()
        return
    from bench.bench_daemon import _speech

    if sys.argv[1:] not in ([], ["side"], ["quota"], ["assistant"]):
        raise SystemExit(f"unknown part {' '.join(sys.argv[1:])!r}")
    parts = sys.argv[1:] or ["side", "quota", "assistant"]
    folder = Path(tempfile.mkdtemp(prefix="voxmeter-bench-edge-"))
    try:
        stream, kind = _speech(folder)
        common = {"speech_source": kind}
        if "side" in parts:
            record = Run("edge-quick" if QUICK else "edge",
                         command="python -m bench.bench_edge side")  # fmt: skip
            rows = _side_by_side(stream, folder)
            record.figures.update({**common, "new_overrides": NEW_FULL, "side_by_side": rows,
                                   "target_bounds": TARGETS})  # fmt: skip
            _side_targets(record, rows)
            record.write()
        if "quota" in parts:
            record = Run("edge-quota", command="python -m bench.bench_edge quota")
            quota = _quota_run(stream, folder)
            record.figures.update({**common, "quota_run": quota})
            lag = quota["new"]["latency_p95_ms"] / 1000
            record.target("embedding lag p95 at 25 % of a core, s", lag, "<=", 2.0)
            record.target("audio dropped, s", quota["new"]["dropped_seconds"], "<=", 0)
            record.write()
        if "assistant" in parts:
            record = Run("edge-assistant", command="python -m bench.bench_edge assistant")
            record.figures.update({**common, "assistant_beside": bench_assistant(stream, folder)})
            record.write()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


NEW_FULL = ['load.measuring_priority="normal"', "load.shed_lag_seconds=0"]
"""This release in the side-by-side run: every feature measured (no shedding) at the priority
the previous release ran at, so the CPU and latency figures compare like with like."""
PHONE_OFF = ['features.enabled=["f0", "embedding"]']
SIDE_ROWS: list[tuple[str, str, list[str]]] = [
    ("ecapa, all features", "ecapa", []),
    ("campplus, all features", "campplus", []),
    ("ecapa, phone off", "ecapa", PHONE_OFF),
]
TARGETS = {
    "cpu_share_per_audio_second_all_features": 0.03,
    "cpu_share_per_audio_second_phone_off": 0.02,
    "cpu_ratio_new_to_old": 0.5,
    "latency_p95_ms_n1000": 100,
    "scrape_p99_ms": 20,
    "quota_latency_p95_s": 2.0,
    "quota_dropped_seconds": 0,
    "assistant_latency_p95_rise": 0.10,
}


def _side_by_side(stream: Path, folder: Path) -> list[dict[str, Any]]:
    """Each row: the previous release and this one, interleaved, N = 10³ (one child each)."""
    if QUICK:
        stream = _long_stream(stream, 30.0, folder, name="quick.wav")
    old = _old_tree(folder)
    rows = []
    try:
        for label, backend, extra in SIDE_ROWS[:1] if QUICK else SIDE_ROWS:
            row: dict[str, Any] = {"row": label, "backend": backend, "templates": 1_000}
            for release, tree, overrides in (
                ("old", old, extra),
                ("new", REPO, [*extra, *NEW_FULL]),
            ):
                out = folder / f"{release}-{label.replace(' ', '').replace(',', '-')}"
                load = round(os.getloadavg()[0], 2)
                row[release] = {
                    "load_average": load,
                    **run_child(tree, backend, 1_000, out, stream, extra=overrides),
                }
                print(f"{label} {release}: {row[release]}", flush=True)
            for key in ("latency_p50_ms", "latency_p95_ms", "cpu_share_per_audio_second"):
                row[f"ratio_{key}"] = round(row["new"][key] / row["old"][key], 3)
            rows.append(row)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)])
    return rows


ASSISTANT_CORE = os.environ.get("VOXMETER_BENCH_ASSISTANT_CORE", "0")
ASSISTANT_UTTERANCES = int(
    os.environ.get("VOXMETER_BENCH_ASSISTANT_UTTERANCES", 8 if QUICK else 30)
)
ASSISTANT_SECONDS = 3.0  # a spoken request's length
CHUNK_SAMPLES = 1024  # 64 ms, Home Assistant's and wyoming-satellite's chunk


async def _transcribe_paced(client: Any, pcm: bytes) -> tuple[float, str]:
    """One request streamed in real time (64 ms chunks) as a satellite does; seconds from the
    ``audio-stop`` to the ``transcript`` (what the user waits for)."""
    from wyoming.asr import Transcribe
    from wyoming.audio import AudioChunk, AudioStart, AudioStop

    fmt = {"rate": 16000, "width": 2, "channels": 1}
    await client.write_event(Transcribe(language="en").event())
    await client.write_event(AudioStart(**fmt).event())
    step = CHUNK_SAMPLES * 2
    began = time.perf_counter()
    for i in range(0, len(pcm), step):
        await client.write_event(AudioChunk(audio=pcm[i : i + step], **fmt).event())
        ahead = began + (i + step) / 2 / 16000 - time.perf_counter()
        if ahead > 0:
            await asyncio.sleep(ahead)
    started = time.perf_counter()
    await client.write_event(AudioStop().event())
    while (event := await client.read_event()) is not None:
        if event.type == "transcript":
            return time.perf_counter() - started, str(event.data.get("text", ""))
    raise RuntimeError("the speech-to-text service closed the connection without a transcript")


def _assistant_phase(port: int, requests: list[bytes]) -> dict[str, Any]:
    """Every request on one connection (its decoder loaded by a first, uncounted request)."""
    from wyoming.client import AsyncTcpClient

    async def phase() -> tuple[list[float], list[str]]:
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await _transcribe_paced(client, requests[0])
            out = [await _transcribe_paced(client, pcm) for pcm in requests]
        return [latency for latency, _ in out], [text for _, text in out]

    cpu = _children_cpu()
    latencies, texts = asyncio.run(phase())
    ms = np.array(latencies) * 1e3
    return {
        "requests": len(ms),
        "latency_p50_ms": round(float(np.percentile(ms, 50)), 1),
        "latency_p95_ms": round(float(np.percentile(ms, 95)), 1),
        "latency_max_ms": round(float(ms.max()), 1),
        "texts": texts,
        "load_average": round(os.getloadavg()[0], 2),
        "cpu_seconds_of_finished_children": round(_children_cpu() - cpu, 1),
    }


def _children_cpu() -> float:
    usage = os.times()
    return usage.children_user + usage.children_system


def bench_assistant(stream: Path, folder: Path) -> dict[str, Any]:
    """A real speech-to-text service (pocketsphinx over Wyoming, tests/realparts) and the
    daemon (paced corpus replay, ECAPA, N = 10³, its default priorities and shedding) pinned
    to one shared core with ``taskset``: request latency without the daemon, with it, and
    without it again (the load of the machine drifts; both 'without' phases are pooled)."""
    from bench.common import CORPUS
    from monitor.audio.file import read_audio

    files = sorted(CORPUS.glob("*/*.flac"))
    requests = []
    for path in files[:: max(1, len(files) // ASSISTANT_UTTERANCES)][:ASSISTANT_UTTERANCES]:
        audio = read_audio(path)[0][: int(ASSISTANT_SECONDS * 16000)]
        requests.append((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    pin = ["taskset", "-c", ASSISTANT_CORE]
    command = [*pin, sys.executable, "-m", "tests.realparts.wyoming_upstreams", "asr"]
    service = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert service.stdout is not None
    try:
        port = int(service.stdout.readline().split()[1])
        before = _assistant_phase(port, requests)
        print(f"assistant alone: {before}", flush=True)
        phase_seconds = len(requests) * (ASSISTANT_SECONDS + 0.5) + 60
        daemon_stream = _long_stream(stream, phase_seconds, folder, name="beside.wav")
        started = threading.Event()
        daemon: dict[str, Any] = {}

        def run_daemon() -> None:
            daemon.update(
                run_child(
                    REPO, "ecapa", 1_000, folder / "beside", daemon_stream,
                    scrape_every=QUOTA_SCRAPE_EVERY, prefix=pin, started=started,
                )
            )  # fmt: skip

        thread = threading.Thread(target=run_daemon, name="daemon-beside")
        thread.start()
        started.wait()
        beside = _assistant_phase(port, requests)
        print(f"assistant beside the daemon: {beside}", flush=True)
        thread.join()
        print(f"daemon beside the assistant: {daemon}", flush=True)
        after = _assistant_phase(port, requests)
        print(f"assistant alone again: {after}", flush=True)
    finally:
        service.terminate()
        service.wait()
    alone = np.array([before["latency_p95_ms"], after["latency_p95_ms"]])
    return {
        "core": ASSISTANT_CORE,
        "request_seconds": ASSISTANT_SECONDS,
        "alone_before": before,
        "beside_daemon": beside,
        "alone_after": after,
        "daemon": daemon,
        "p95_rise_vs_mean_alone": round(beside["latency_p95_ms"] / float(alone.mean()) - 1, 3),
        "same_transcripts": before["texts"] == beside["texts"] == after["texts"],
    }


def _quota_run(stream: Path, folder: Path) -> dict[str, Any]:
    """This release and the previous one (ECAPA, N = 10³, default settings) at the same time,
    each in a cgroup of its own with QUOTA_SHARE of one core, over QUOTA_SECONDS of paced
    speech."""
    long_stream = _long_stream(stream, QUOTA_SECONDS, folder)
    load = round(os.getloadavg()[0], 2)
    old = _old_tree(folder)
    out: dict[str, Any] = {}
    groups: list[Path] = []

    def one(label: str, tree: Path) -> None:
        group = _cgroup(QUOTA_SHARE, suffix=label)
        groups.append(group)
        out[label] = run_child(
            tree, "ecapa", 1_000, folder / f"quota-{label}", long_stream,
            cgroup=group, scrape_every=QUOTA_SCRAPE_EVERY,
        )  # fmt: skip
        print(f"quota {QUOTA_SHARE} {label}: {out[label]}", flush=True)

    try:
        threads = [
            threading.Thread(target=one, args=(label, tree), name=f"quota-{label}")
            for label, tree in (("old", old), ("new", REPO))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)])
        for group in groups:
            group.rmdir()
    return {
        **out,
        "cpu_quota_of_one_core": QUOTA_SHARE,
        "scrape_every_seconds": QUOTA_SCRAPE_EVERY,
        "load_average_at_start": load,
    }


if __name__ == "__main__":
    main()
