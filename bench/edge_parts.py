"""The edge benchmark's measurements of single parts: each extractor per 3 s window
(``features``), the int8 quantiser variants (``int8``), the all-phone decoder candidates
(``phone``: MeanD at 3 s and CPU) and where a paced replay's CPU goes (``profile``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np


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

    from bench.bench_int8 import int8_against_float32, test_utterances
    from bench.common import CORPUS
    from monitor.audio.file import read_audio
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

    feats, labels = test_utterances(backend)
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
    out.update(int8_against_float32(unit, out))
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
    "ds=2 + topn 2": {"ds": 2, "topn": 2},
    "ds=3 + topn 2": {"ds": 3, "topn": 2},
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
    from monitor.features.phone_model import PhoneNetworkStream
    from monitor.scoring.evidence import TrackScorer
    from monitor.tracking.turns import TurnSplitter

    spent: dict[str, float] = {}
    wrapped = {
        "vad (silero)": [(FrameVad, "process")],
        "phone: fed while the window fills": [(PhoneStream, "feed")],
        "phone: at the window's end": [(PhoneStream, "finish")],
        "phone network (filterbanks shared)": [
            (PhoneNetworkStream, "feed"),
            (PhoneNetworkStream, "finish"),
        ],
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
