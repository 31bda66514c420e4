"""Static int8 ECAPA and CAM++: QDQ graphs built at set-up from committed activation ranges.

Why static int8: on a 3 s window it takes ECAPA from ~130 to ~40 ms of CPU and CAM++ from ~42
to ~25 ms (README "int8 networks"), with the corpus EER within 0.2 points of float32. Dynamic
quantisation was slower than float (``ConvInteger``), so the graph is static QDQ: the Conv
layers' weights int8 per output channel, their activations uint8 with fixed ranges.

What is committed: only the ranges, ``int8_ranges/<backend>.json`` (tensor name -> [min, max]
of each Conv input and output over 3 s windows of the corpus's *train* speakers, a few KB,
:func:`fit_ranges`; ``scripts/fit_int8_ranges.py`` made them). What is built: ``make models``
(``scripts/fetch_models.py``) runs :func:`build_missing`, which pre-processes the exported float
graph and quantises it with ONNX Runtime's QDQ quantiser from those ranges into the git-ignored
weights folder, so no corpus and no calibration data are needed on the user's machine.

A build is accepted by what it computes, not by its bytes. The JSON records, beside the sha256
of the graph it gave with the recorded onnxruntime/onnx/torch versions, the graph's embeddings
of a fixed probe (:func:`probe_windows`: three synthesised harmonic signals through the
network's own filterbank; no one's voice). A build whose probe embeddings are within
:data:`PROBE_COSINE` and :data:`PROBE_RELATIVE_L2` of the recorded ones is written; a differing
sha256 alone is a note in the log. Why the bytes differed: the CAM++ float graph's exporter
folded its BatchNormalizations into the Convs with MKL, whose code path depends on the CPU (see
:mod:`monitor.features.embedding_onnx`, which now folds them in numpy); ONNX Runtime's
pre-processing only folds integer shape arithmetic and turns Constant nodes into initializers,
and the quantiser's float32 arithmetic is elementwise and exact, so neither varied. A float
graph exported before that change still builds an accepted int8 graph.

7-bit weights everywhere (``reduce_range``): ONNX Runtime's uint8 x int8 kernels on AVX2
without VNNI add pairs of products in int16 (``vpmaddubsw``), which saturates with 8-bit weights
and silently changes results on such CPUs; with 7-bit weights no pair can saturate, so every x86
CPU computes the same integers. It cost nothing measurable here (ECAPA EER 5.01 -> 4.93 %, CPU
41 -> 38 ms), so there is one graph, hence one embedding version, for every CPU.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from monitor.errors import ConfigError, InputError
from monitor.features.embedding_onnx import INT8_GRAPHS, OnnxNetwork, graph_path

logger = logging.getLogger(__name__)

__all__ = [
    "INT8_GRAPHS",
    "build",
    "build_missing",
    "check_session",
    "fit_ranges",
    "load_ranges",
    "probe_embeddings",
    "record_probe",
]

OP_TYPES = ["Conv"]
"""Only convolutions: they are nearly all the work, and quantising the pooling and the
normalisations as well lost accuracy for no speed (measured when the ranges were fitted)."""
REDUCE_RANGE = True
RANGES_KEY = "voxmeter_int8_ranges_sha256"
"""Metadata of a built graph: the sha256 of the ranges it came from (stale -> rebuilt)."""


PROBE_F0_HZ = (98.0, 150.0, 230.0)
"""One probe window per fundamental (a low, a middle and a high voice)."""
PROBE_SECONDS = 3
PROBE_COSINE = 0.998
PROBE_RELATIVE_L2 = 0.07
"""A built graph's probe embeddings must each have at least this cosine to, and at most this
``|built - recorded| / |recorded|`` from, the recorded ones. Measured on CAM++ (192 floats per
window, norms 9-10): the int8 graphs built from the float graphs that MKL's AVX-512, AVX2 and
SSE4.2 code paths gave (four different sha256, the spread between CPUs before the export was
made CPU-independent) agree to within 1e-6; the same graph run through ONNX Runtime's other
kernels (QDQ computed in float instead of the fused integer kernels) agrees to cosine 0.99910,
relative L2 0.043 — a ceiling for what kernels of other CPUs can change, since with 7-bit
weights their integers are the same. The thresholds leave twice that in 1 - cosine and 1.6 times
in L2. One Conv's int8 weights scaled by 1.05 (the first) or 0.9 (the tenth) falls to cosine
0.987 / 0.995, relative L2 0.16 / 0.10: refused. ECAPA (norms ~430): the other kernels 0.99949 /
0.032; the first Conv's weights scaled by 1.05: 0.996 / 0.091, refused (its tenth's by 0.9,
0.998 / 0.064, is within what kernels change, and passes)."""


def ranges_path(backend: str) -> Path:
    """The committed ranges file of an int8 backend (package data)."""
    return Path(str(resources.files("monitor.features") / "int8_ranges" / f"{backend}.json"))


def ranges_text(backend: str) -> str:
    return ranges_path(backend).read_text(encoding="utf-8")


def _ranges_digest(document: dict[str, Any]) -> str:
    """sha256 of what a graph is built from (the quantised op types, the weights' range and
    the activation ranges), not of the whole file: re-recording the probe rebuilds nothing."""
    built_from = {k: document.get(k) for k in ("op_types", "reduce_range", "tensors")}
    return hashlib.sha256(json.dumps(built_from, sort_keys=True).encode()).hexdigest()


def ranges_digest(backend: str) -> str:
    return _ranges_digest(json.loads(ranges_text(backend)))


def load_ranges(backend: str, path: Path | None = None, *, probe: bool = True) -> dict[str, Any]:
    """The ranges document at ``path`` (the committed one by default), checked: JSON with a
    ``tensors`` map of [min, max] pairs and (when ``probe``) a probe of one embedding per
    probe window. A bad file is an :class:`InputError` naming it."""
    path = path or ranges_path(backend)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise InputError(str(path), f"not a readable JSON ranges file ({error})") from None
    if not isinstance(document, dict) or not isinstance(document.get("tensors"), dict):
        raise InputError(str(path), "no 'tensors' map of activation ranges")
    if not all(
        isinstance(v, list) and len(v) == 2 and all(isinstance(x, int | float) for x in v)
        for v in document["tensors"].values()
    ):
        raise InputError(str(path), "'tensors' must map each name to [min, max]")
    if probe:
        recorded = document.get("probe", {})
        embeddings = recorded.get("embeddings") if isinstance(recorded, dict) else None
        if embeddings is None:
            raise InputError(
                str(path),
                "no 'probe' embeddings; regenerate it with "
                "`python scripts/fit_int8_ranges.py --probe-only`",
            )
        try:
            array = np.asarray(embeddings, dtype=np.float64)
        except (TypeError, ValueError):
            array = np.zeros(0)
        if array.ndim != 2 or array.shape[0] != len(PROBE_F0_HZ) or not np.isfinite(array).all():
            raise InputError(
                str(path),
                f"'probe' embeddings must be {len(PROBE_F0_HZ)} rows of finite floats, "
                f"got shape {array.shape}",
            )
        document["probe"]["embeddings"] = array
    return document


def probe_windows(backend: str) -> list[np.ndarray]:
    """The probe's network inputs: per fundamental in :data:`PROBE_F0_HZ`, 3 s of a harmonic
    signal (a slow 8 % pitch glide, three formant-like peaks, 4 Hz syllable-like bursts), rounded
    to 16-bit samples as audio is, through ``backend``'s own filterbank. Synthesised and seeded
    by nothing: the same inputs on every machine (the 16-bit rounding absorbs the last-bit
    differences of ``sin`` between CPUs)."""
    from monitor.features.fbank import RATE_HZ, ecapa_fbank, kaldi_fbank

    fbank = ecapa_fbank if INT8_GRAPHS[backend][0] == "ecapa" else kaldi_fbank
    t = np.arange(PROBE_SECONDS * RATE_HZ) / RATE_HZ
    formants = np.array([[500.0], [1500.0], [2500.0]])
    windows = []
    for f0 in PROBE_F0_HZ:
        phase = 2 * np.pi * np.cumsum(f0 * (1 + 0.08 * np.sin(2 * np.pi * 0.7 * t))) / RATE_HZ
        harmonics = np.arange(1, int(4000 // f0) + 1)
        gain = np.exp(-(((harmonics * f0 - formants) / 200.0) ** 2)).sum(axis=0) + 0.05
        voiced = gain @ np.sin(harmonics[:, None] * phase[None, :])
        signal = voiced * (0.55 - 0.45 * np.cos(2 * np.pi * 4 * t))
        samples = np.round(signal / np.abs(signal).max() * 0.3 * 32767) / 32768
        windows.append(fbank(samples.astype(np.float32)))
    return windows


def probe_embeddings(backend: str, graph: Path) -> np.ndarray:
    """(windows, dim) raw embeddings of the probe by the ONNX graph at ``graph``, run as the
    daemon runs it (:class:`OnnxNetwork`, one thread)."""
    network = OnnxNetwork(graph, threads=1)
    return np.stack([network(window) for window in probe_windows(backend)])


def _probe_agreement(built: np.ndarray, recorded: np.ndarray) -> tuple[float, float]:
    """(least cosine, largest relative L2) over the probe windows."""
    dot = np.einsum("ij,ij->i", built, recorded)
    norms = np.linalg.norm(built, axis=1) * np.linalg.norm(recorded, axis=1)
    relative = np.linalg.norm(built - recorded, axis=1) / np.linalg.norm(recorded, axis=1)
    return float(np.min(dot / norms)), float(np.max(relative))


def check_build(backend: str, graph: Path, document: dict[str, Any], digest: str) -> None:
    """Accept the int8 graph at ``graph`` (sha256 ``digest`` of its bytes) when its probe
    embeddings agree with the document's; a differing sha256 alone is only logged."""
    if digest != document.get("graph_sha256"):
        logger.info(
            "%s: int8 graph sha256 %s… differs from the recorded %s…; checking its outputs",
            backend,
            digest[:12],
            str(document.get("graph_sha256"))[:12],
        )
    recorded = document["probe"]["embeddings"]
    built = probe_embeddings(backend, graph)
    if built.shape != recorded.shape:
        raise ConfigError(
            "int8 ranges",
            f"{backend}: the probe gave embeddings of shape {built.shape}, the ranges file "
            f"records {recorded.shape}: the float graph is not this network; delete it and run "
            "`make models` (or `voxmeter models fetch`) again",
        )
    cosine, relative = _probe_agreement(built, recorded)
    if cosine < PROBE_COSINE or relative > PROBE_RELATIVE_L2:
        versions = ", ".join(f"{k} {v}" for k, v in document.get("built_with", {}).items())
        raise ConfigError(
            "int8 ranges",
            f"{backend}: the built int8 graph's probe embeddings differ from the recorded ones "
            f"(cosine {cosine:.4f}, needs >= {PROBE_COSINE}; relative L2 {relative:.3f}, needs "
            f"<= {PROBE_RELATIVE_L2}); refused: install the recorded versions ({versions}), "
            "delete the float graph and run `make models` (or `voxmeter models fetch`) again",
        )


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime
    import torch

    return {
        "onnxruntime": onnxruntime.__version__,
        "onnx": onnx.__version__,
        "torch": torch.__version__,
    }


def _prepare(source: Path, target: Path) -> None:
    """ONNX Runtime's pre-processing (shape inference, basic fusions) of the float graph.

    Run inside a scratch working directory: the pre-processor leaves temporary files there."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    quant_pre_process(source, target, skip_symbolic_shape=True)


def _quantise(prepared: Path, target: Path, cache: Path, reader: Any = None) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    quantize_static(
        prepared,
        target,
        reader,
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        per_channel=True,
        reduce_range=REDUCE_RANGE,
        op_types_to_quantize=OP_TYPES,
        calibration_cache_path=cache,
    )


def fit_ranges(backend: str, source: Path, windows: Iterable[np.ndarray]) -> dict[str, Any]:
    """The ranges document of ``backend`` (an int8 backend) from ``windows`` of (frames, 80)
    float32 filterbanks through the float graph at ``source``: min/max of every tensor the
    Conv layers read or write (ONNX Runtime's MinMax calibrator), rounded to float32."""
    from onnxruntime.quantization import CalibrationDataReader
    from onnxruntime.quantization.calibrate import load_tensors_data

    feeds = iter([{"feats": np.asarray(w, dtype=np.float32)[None]} for w in windows])

    class _Reader(CalibrationDataReader):  # type: ignore[misc]
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(feeds, None)

    source = source.resolve()
    with tempfile.TemporaryDirectory(prefix="voxmeter-int8-") as name, contextlib.chdir(name):
        scratch = Path(name)
        _prepare(source, scratch / "prepared.onnx")
        _quantise(
            scratch / "prepared.onnx", scratch / "int8.onnx", scratch / "cache.json", _Reader()
        )
        data = load_tensors_data(scratch / "cache.json")
        tensors = {
            # the shortest decimal that reads back as the same float32 (compact, exact)
            key: [float(str(np.float32(np.asarray(v).item()))) for v in data[key].range_value]
            for key in sorted(data.keys())
        }
        built = hashlib.sha256((scratch / "int8.onnx").read_bytes()).hexdigest()
    return {
        "backend": backend,
        "note": "activation ranges (min, max) of the Conv layers' inputs and outputs; no weights",
        "op_types": OP_TYPES,
        "reduce_range": REDUCE_RANGE,
        "built_with": _versions(),
        "graph_sha256": built,
        "tensors": tensors,
    }


def _quantised(backend: str, source: Path, document: dict[str, Any], scratch: Path) -> Path:
    """Quantise the float graph at ``source`` from the document's ranges into ``scratch``
    (the working directory: the pre-processor leaves temporary files there)."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import TensorsData, save_tensors_data

    ranges = TensorsData(
        CalibrationMethod.MinMax,
        {key: (np.float32(lo), np.float32(hi)) for key, (lo, hi) in document["tensors"].items()},
    )
    save_tensors_data(ranges, scratch / "cache.json")
    _prepare(source, scratch / "prepared.onnx")
    names = {t for n in onnx.load(scratch / "prepared.onnx").graph.node for t in n.input}
    absent = sorted(set(document["tensors"]) - names - {"embedding"})
    if absent:
        raise ConfigError(
            "int8 ranges",
            f"{backend}: {len(absent)} tensors of the ranges file (e.g. {absent[0]}) are not "
            f"in {source.name}: the float graph was exported differently; re-export it",
        )
    _quantise(scratch / "prepared.onnx", scratch / "int8.onnx", scratch / "cache.json")
    return scratch / "int8.onnx"


def build(backend: str, folder: Path, ranges: Path | None = None) -> Path:
    """Quantise ``backend``'s float graph in ``folder`` into its int8 graph there (atomically)
    from the committed ranges (or the file ``ranges``); refuses a graph whose probe embeddings
    differ from the recorded ones (:func:`check_build`), leaving nothing behind."""
    import onnx

    document = load_ranges(backend, ranges)
    digest = _ranges_digest(document)
    name = INT8_GRAPHS[backend][1]
    source = graph_path(INT8_GRAPHS[backend][0], folder).resolve()
    with (
        tempfile.TemporaryDirectory(prefix="voxmeter-int8-") as scratch_name,
        contextlib.chdir(scratch_name),
    ):
        built = _quantised(backend, source, document, Path(scratch_name))
        check_build(backend, built, document, hashlib.sha256(built.read_bytes()).hexdigest())
        model = onnx.load(built)
        entry = model.metadata_props.add()
        entry.key, entry.value = RANGES_KEY, digest
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
        os.close(handle)
        try:
            onnx.save(model, temporary)
            os.chmod(temporary, 0o644)
            os.replace(temporary, folder / name)
        finally:
            Path(temporary).unlink(missing_ok=True)
    return folder / name


def record_probe(backend: str, folder: Path) -> dict[str, Any]:
    """The committed ranges document of ``backend`` with the sha256 and the probe embeddings of
    the int8 graph it builds here from the float graph in ``folder`` (its ranges unchanged)."""
    document = load_ranges(backend, probe=False)
    source = graph_path(INT8_GRAPHS[backend][0], folder).resolve()
    with (
        tempfile.TemporaryDirectory(prefix="voxmeter-int8-") as scratch_name,
        contextlib.chdir(scratch_name),
    ):
        built = _quantised(backend, source, document, Path(scratch_name))
        document["graph_sha256"] = hashlib.sha256(built.read_bytes()).hexdigest()
        embeddings = probe_embeddings(backend, built)
    document["built_with"] = _versions()
    document["probe"] = {
        "windows": f"{len(PROBE_F0_HZ)} synthesised harmonic {PROBE_SECONDS} s signals, f0 "
        + ", ".join(f"{f:g}" for f in PROBE_F0_HZ)
        + " Hz, through the network's filterbank (monitor.features.embedding_int8.probe_windows)",
        # 5 significant digits: 1e-5 relative, far below the tolerance
        "embeddings": [[float(f"{v:.5g}") for v in row] for row in embeddings],
    }
    return document


def dump_ranges(document: dict[str, Any]) -> str:
    """The ranges document as committed: one line per tensor and per probe window."""
    head = {k: v for k, v in document.items() if k not in ("tensors", "probe")}
    text = json.dumps(head, indent=1)[:-2]
    if "probe" in document:
        rows = document["probe"]["embeddings"]
        text += ',\n "probe": {\n  "windows": ' + json.dumps(document["probe"]["windows"])
        text += ',\n  "embeddings": [\n' + ",\n".join(f"   {json.dumps(r)}" for r in rows)
        text += "\n  ]\n }"
    text += ',\n "tensors": {\n'
    text += ",\n".join(
        f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in document["tensors"].items()
    )
    return text + "\n }\n}\n"


def is_current(backend: str, path: Path) -> bool:
    """Whether the int8 graph at ``path`` was built from the committed ranges and its float
    graph."""
    source = graph_path(INT8_GRAPHS[backend][0], path.parent)
    if not path.is_file() or path.stat().st_mtime < source.stat().st_mtime:
        return False
    import onnx

    meta = {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}
    return meta.get(RANGES_KEY) == ranges_digest(backend)


def check_session(backend: str, session: Any, path: Path) -> None:
    """Refuse an int8 graph built from other ranges than the committed ones (cheap: the ONNX
    session's metadata): its embeddings would not be this version's."""
    built_from = session.get_modelmeta().custom_metadata_map.get(RANGES_KEY)
    if built_from != ranges_digest(backend):
        raise ConfigError(
            "features.embedding",
            f"{path}: int8 graph built from other activation ranges than this voxmeter's; "
            "run `make models` (or `voxmeter models fetch`) to rebuild it",
        )


def build_missing(folder: Path) -> list[str]:
    """Build every int8 graph whose float graph is present and that is absent or stale."""
    written = []
    for backend, (float_backend, name) in INT8_GRAPHS.items():
        if graph_path(float_backend, folder).is_file() and not is_current(backend, folder / name):
            build(backend, folder)
            written.append(name)
    return written
