"""ECAPA-TDNN and CAM++ as ONNX graphs, run by ONNX Runtime (the default embedding runtime).

``make models`` (``scripts/fetch_models.py``, ``voxmeter models fetch``) exports each network
from the torch port and its checkpoint with torch's TorchScript-based exporter (``dynamo=False``:
the dynamo exporter needs ``onnxscript``, which is not installed), input ``feats`` (1, frames, 80)
with a dynamic frame axis, output (1, 192). The graphs sit beside the weights (git-ignored,
never committed); a missing graph falls back to torch (``runtime = "auto"``) or is a one-line
error (``runtime = "onnx"``). The filterbanks come from :mod:`monitor.features.fbank`, so the
ONNX path does not import torch at all. ONNX Runtime runs the same float32 arithmetic with
fused kernels: ~30 % less CPU for ECAPA, ~45 % for CAM++ on a 3 s window, embeddings within
2e-6 relative of torch (``tests/features/test_embedding_onnx`` holds them to 1e-5).

The same bytes on every CPU: the exporter's eval mode folds each BatchNormalization into the
Conv before it (``_jit_pass_onnx_eval_peephole``) with ATen kernels that call MKL, and MKL picks
its code path from the CPU (and its vendor): on one Intel Xeon, ``MKL_ENABLE_INSTRUCTIONS`` =
AVX512, AVX2 and SSE4_2 gave three different CAM++ graphs, 66 folded Conv weights differing in
their last bits, which the int8 quantiser can turn into whole steps (``ATEN_CPU_CAPABILITY``
changed nothing; ECAPA has no Conv followed by a BatchNormalization, so its graph never
varied). So the network is exported as it is (``TrainingMode.PRESERVE``: the BatchNormalization
nodes stay) and :func:`fold_batch_norms` folds them in numpy float32, whose multiply, divide and
square root are IEEE-exact on every CPU; the Conv outputs keep the exporter's names, which the
int8 ranges are keyed on.

Dynamic int8 quantisation (``onnxruntime.quantization.quantize_dynamic``) was measured and
rejected: ``ConvInteger`` kernels made ECAPA 2.4x and CAM++ 3.4x *slower* here (README); the
static int8 graphs are :mod:`monitor.features.embedding_int8`.

Session settings, measured (ECAPA on ONNX Runtime took more CPU than torch on an Intel
AVX-512 Xeon; ``python -m bench.bench_int8 settings`` on an AMD EPYC, CPU ms per 3 s window):
``ORT_ENABLE_ALL`` and ``ORT_ENABLE_EXTENDED`` are equal (float 84 ms, int8 42-43);
``ORT_ENABLE_BASIC`` costs the int8 graph 2.5x (103 ms: its QDQ pairs are not fused into
integer kernels), so ALL stays. Denormals: none — 0 of the 37.5 M intermediate float32 values
of ECAPA on 3 s of corpus speech (0 of 32 M for CAM++) and no denormal weight, so
``session.set_denormal_as_zero`` (measured within noise: 83 against 84 ms) is not set: it would
also switch flush-to-zero on for the whole creating thread. Spinning: with one intra-op thread
there is no pool and it changes nothing; with two, spinning cost 128 against 88 ms (int8 76
against 43), so it is off. Two threads never took less CPU than one. What remains of the Intel
gap cannot be seen on this AMD CPU, so ``runtime = "auto"`` measures instead of guessing
(:mod:`monitor.features.runtime_probe`).
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from monitor.errors import ConfigError

GRAPHS: dict[str, tuple[str, str]] = {
    "ecapa": ("ecapa_embedding_model.ckpt", "ecapa_embedding_model.onnx"),
    "campplus": ("campplus_cn_en_common.pt", "campplus_cn_en_common.onnx"),
}
"""backend -> (checkpoint it is exported from, ONNX file) in the weights folder."""
INT8_GRAPHS: dict[str, tuple[str, str]] = {
    "ecapa-int8": ("ecapa", "ecapa_embedding_model.int8.onnx"),
    "campplus-int8": ("campplus", "campplus_cn_en_common.int8.onnx"),
}
"""int8 backend -> (float backend whose graph it quantises, int8 ONNX file beside the weights);
built by :mod:`monitor.features.embedding_int8`."""
OPSET = 17
RUNTIMES = ("auto", "onnx", "torch")
"""``auto``: where the graph is present, whichever of ONNX Runtime and torch took less CPU for a
3 s window on this CPU model (:mod:`monitor.features.runtime_probe`), else torch; ``onnx``
requires the graph."""


def graph_path(backend: str, folder: Path | None = None) -> Path:
    """Where ``backend``'s ONNX graph lives (the weights folder unless ``folder``); an int8
    backend's is its quantised graph (:mod:`monitor.features.embedding_int8`)."""
    from monitor.features.weights import weights_dir

    name = INT8_GRAPHS[backend][1] if backend in INT8_GRAPHS else GRAPHS[backend][1]
    return (folder or weights_dir()) / name


def _torch_network(backend: str, checkpoint: Path) -> Any:
    """The torch module whose forward is (1, frames, 80) feats -> (1, 192) embedding."""
    import torch

    if backend == "ecapa":
        from monitor.features.embedding_ecapa import load_encoder

        model = load_encoder(str(checkpoint)).embedding_model

        class _Flat(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, feats: torch.Tensor) -> torch.Tensor:
                return self.model(feats)[:, 0, :]

        return _Flat().eval()
    from monitor.features.embedding_campplus import load_model

    return load_model(str(checkpoint))


def export(backend: str, folder: Path) -> Path:
    """Export ``backend``'s network from its checkpoint in ``folder`` to ONNX (atomically)."""
    import onnx
    import torch

    checkpoint, name = GRAPHS[backend]
    network = _torch_network(backend, folder / checkpoint)
    example = torch.zeros(1, 300, 80)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    os.close(handle)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on shapes and python branches
            torch.onnx.export(
                network,
                (example,),
                temporary,
                input_names=["feats"],
                output_names=["embedding"],
                dynamic_axes={"feats": {1: "frames"}},
                opset_version=OPSET,
                dynamo=False,
                training=torch.onnx.TrainingMode.PRESERVE,  # the network is in eval mode
            )
        model = onnx.load(temporary)
        fold_batch_norms(model)
        onnx.save(model, temporary)
        os.chmod(temporary, 0o644)
        os.replace(temporary, folder / name)
    finally:
        Path(temporary).unlink(missing_ok=True)
    return folder / name


def _folded(bn: Any, conv: Any, values: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The Conv's weight and bias with the BatchNormalization after it folded in, in float32
    (the exporter's own order: scale = gamma / sqrt(var + eps))."""
    eps = np.float32(next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5))
    gamma, beta, mean, var = (values[t] for t in bn.input[1:5])
    weight = values[conv.input[1]]
    bias = values[conv.input[2]] if len(conv.input) > 2 else np.zeros_like(mean)
    scale = gamma / np.sqrt(var + eps)
    folded = weight * scale.reshape(-1, *[1] * (weight.ndim - 1))
    return folded.astype(np.float32), (beta + (bias - mean) * scale).astype(np.float32)


def fold_batch_norms(model: Any) -> int:
    """Fold every inference BatchNormalization that alone reads a Conv's output into that Conv
    (in place; CPU-independent arithmetic, see the module docstring); the number folded."""
    from onnx import numpy_helper

    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    constants = {i.name: i for i in graph.initializer}
    for node in graph.node:  # the exporter aliases equal tensors through Identity nodes
        if node.op_type == "Identity" and node.input[0] in constants:
            constants[node.output[0]] = constants[node.input[0]]
    readers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    folded = []
    for bn in (n for n in graph.node if n.op_type == "BatchNormalization"):
        conv = producer.get(bn.input[0])
        if conv is None or conv.op_type != "Conv" or len(readers[conv.output[0]]) != 1:
            continue
        if conv.output[0] in outputs or len(bn.output) != 1:
            continue
        params = [*bn.input[1:5], *conv.input[1:]]
        if not all(name in constants for name in params):
            continue
        values = {name: numpy_helper.to_array(constants[name]) for name in params}
        weight, bias = _folded(bn, conv, values)
        names = [f"{conv.output[0]}.weight", f"{conv.output[0]}.bias"]
        graph.initializer.extend(
            numpy_helper.from_array(a, n) for a, n in zip((weight, bias), names, strict=True)
        )
        del conv.input[1:]
        conv.input.extend(names)
        for reader in readers.get(bn.output[0], []):
            reader.input[:] = [conv.output[0] if t == bn.output[0] else t for t in reader.input]
        folded.append(bn)
    for bn in folded:
        graph.node.remove(bn)
    _drop_unused(graph)
    return len(folded)


def _drop_unused(graph: Any) -> None:
    """Remove the Identity nodes and initializers nothing reads any more."""
    read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    for node in [n for n in graph.node if n.op_type == "Identity" and n.output[0] not in read]:
        graph.node.remove(node)
    read = {name for node in graph.node for name in node.input}
    kept = [i for i in graph.initializer if i.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)


def export_missing(folder: Path) -> list[str]:
    """Export every graph that is absent or older than its checkpoint; the names written."""
    written = []
    for backend, (checkpoint, name) in GRAPHS.items():
        source, target = folder / checkpoint, folder / name
        if not source.is_file():
            continue
        if target.is_file() and target.stat().st_mtime >= source.stat().st_mtime:
            continue
        export(backend, folder)
        written.append(name)
    return written


def use_onnx(backend: str, runtime: str) -> bool | None:
    """Whether ``backend`` runs on ONNX Runtime under ``runtime`` (checked); None: ``auto`` with
    the graph present, to be decided by :func:`monitor.features.runtime_probe.choose` when the
    network is first needed. An int8 backend runs only there, whatever the runtime: its graph
    is its model."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown embedding runtime {runtime!r}; known: {', '.join(RUNTIMES)}")
    if backend in INT8_GRAPHS:
        if runtime == "torch":
            raise ConfigError(
                "features.runtime",
                f'the {backend} network runs only on ONNX Runtime: set features.runtime = "auto" '
                f'or "onnx", or features.embedding = "{INT8_GRAPHS[backend][0]}" for torch',
            )
        if not graph_path(backend).is_file():
            raise ConfigError(
                "features.embedding",
                f"{graph_path(backend)}: int8 graph missing; run `make models` (or `voxmeter "
                "models fetch`) to build it, or set features.embedding = "
                f'"{INT8_GRAPHS[backend][0]}"',
            )
        return True
    if runtime == "torch" or backend not in GRAPHS:
        return False
    present = graph_path(backend).is_file()
    if runtime == "onnx" and not present:
        raise ConfigError(
            "features.runtime",
            f"{graph_path(backend)}: ONNX graph missing; run `make models` "
            '(or `voxmeter models fetch`) to export it, or set features.runtime = "torch"',
        )
    return None if runtime == "auto" and present else present


class OnnxNetwork:
    """One ONNX Runtime session on one thread: (frames, 80) float32 feats -> (192,) float32."""

    def __init__(self, path: Path, *, threads: int | None = 1) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # shape-inference warnings of the exported graph
        # No CPU arena: ORT's arena keeps what the longest input needed and fragments over inputs
        # of varied lengths (RSS 311 -> 541 MB over 20 calls of 5-15 s; 1.06 -> 1.76 GB for
        # two 60 s calls); without it RSS stays flat, at the same CPU time.
        options.enable_cpu_mem_arena = False
        # Idle pool threads must not spin: with 2 intra-op threads spinning cost ECAPA 128 ms
        # of CPU per 3 s window against 88 without (int8: 76 against 43; AMD EPYC,
        # edge-ort-settings.json). With one thread there is no pool, so it changes nothing here.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def __call__(self, feats: np.ndarray) -> np.ndarray:
        batch = np.ascontiguousarray(feats, dtype=np.float32)[None]
        return np.asarray(self.session.run(None, {"feats": batch})[0][0])
