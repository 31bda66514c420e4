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
weights folder, so no corpus and no calibration data are needed on the user's machine. The
build is deterministic: the JSON records the sha256 of the graph it gave with the recorded
onnxruntime/onnx/torch versions, and a build with those versions must reproduce it.

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

from monitor.errors import ConfigError
from monitor.features.embedding_onnx import INT8_GRAPHS, graph_path

logger = logging.getLogger(__name__)

__all__ = ["INT8_GRAPHS", "build", "build_missing", "check_session", "fit_ranges"]

OP_TYPES = ["Conv"]
"""Only convolutions: they are nearly all the work, and quantising the pooling and the
normalisations as well lost accuracy for no speed (measured when the ranges were fitted)."""
REDUCE_RANGE = True
RANGES_KEY = "voxmeter_int8_ranges_sha256"
"""Metadata of a built graph: the sha256 of the ranges file it came from (stale -> rebuilt)."""


def ranges_text(backend: str) -> str:
    """The committed ranges file of an int8 backend (package data)."""
    return (resources.files("monitor.features") / "int8_ranges" / f"{backend}.json").read_text(
        encoding="utf-8"
    )


def ranges_digest(backend: str) -> str:
    return hashlib.sha256(ranges_text(backend).encode()).hexdigest()


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


def build(backend: str, folder: Path) -> Path:
    """Quantise ``backend``'s float graph in ``folder`` into its int8 graph there (atomically)
    from the committed ranges; refuses a build that differs from the recorded one under the
    recorded library versions."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import TensorsData, save_tensors_data

    float_backend, name = INT8_GRAPHS[backend]
    source = graph_path(float_backend, folder).resolve()
    document = json.loads(ranges_text(backend))
    ranges = TensorsData(
        CalibrationMethod.MinMax,
        {key: (np.float32(lo), np.float32(hi)) for key, (lo, hi) in document["tensors"].items()},
    )
    with (
        tempfile.TemporaryDirectory(prefix="voxmeter-int8-") as scratch_name,
        contextlib.chdir(scratch_name),
    ):
        scratch = Path(scratch_name)
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
        built = hashlib.sha256((scratch / "int8.onnx").read_bytes()).hexdigest()
        if built != document["graph_sha256"]:
            # Bytes differ across CPUs (constant folding); what the graph computes is checked
            # by the probe, not by its bytes.
            logger.info(
                "%s: int8 graph sha256 %s… differs from the recorded %s…",
                backend,
                built[:12],
                document["graph_sha256"][:12],
            )
        model = onnx.load(scratch / "int8.onnx")
        entry = model.metadata_props.add()
        entry.key, entry.value = RANGES_KEY, ranges_digest(backend)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
        os.close(handle)
        try:
            onnx.save(model, temporary)
            os.chmod(temporary, 0o644)
            os.replace(temporary, folder / name)
        finally:
            Path(temporary).unlink(missing_ok=True)
    return folder / name


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
