"""The ONNX runtime of ECAPA and CAM++: parity with the torch port (the reference) on corpus
files, the dynamic frame axis, block-by-block extraction, and the runtime selection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from monitor.errors import ConfigError
from monitor.features.base import (
    RUNTIME_ENV,
    get_feature,
    open_stream,
    set_embedding_backend,
    set_embedding_runtime,
)
from monitor.features.embedding import CampplusEmbedding, EcapaEmbedding, UnitEmbedding
from monitor.features.embedding_int8 import probe_windows
from monitor.features.embedding_onnx import GRAPHS, OnnxNetwork, _torch_network, export, graph_path
from monitor.features.weights import sha256, weights_dir
from tests.numeric import FLOAT32_NETWORK_RTOL, assert_relatively_close

REFERENCE = json.loads((Path(__file__).parent / "data" / "embedding_reference.json").read_text())
CLASSES: dict[str, type[UnitEmbedding]] = {"ecapa": EcapaEmbedding, "campplus": CampplusEmbedding}


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A weights folder holding both ONNX graphs: the real one after `make models`, else a
    scratch folder where they are exported from the real checkpoints (as `make models` does)."""
    folder = weights_dir()
    if not all(graph_path(b, folder).is_file() for b in GRAPHS):
        scratch = tmp_path_factory.mktemp("onnx-weights")
        for checkpoint, _ in GRAPHS.values():
            (scratch / checkpoint).symlink_to(folder / checkpoint)
        for backend in GRAPHS:
            export(backend, scratch)
        folder = scratch
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VOXMETER_MODELS", str(folder))
        yield folder


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _speech(corpus_root: Path) -> list[np.ndarray]:
    return [sf.read(corpus_root / name, dtype="float32")[0] for name in REFERENCE["files"]]


@pytest.mark.corpus
@pytest.mark.parity
@pytest.mark.parametrize("backend", list(GRAPHS))
def test_onnx_embeddings_match_torch_on_corpus_files(
    backend: str, graphs: Path, corpus_root: Path
) -> None:
    onnx, reference = CLASSES[backend](runtime="onnx"), CLASSES[backend](runtime="torch")
    assert onnx.onnx and not reference.onnx
    for audio in _speech(corpus_root):
        # whole files, and a 1 s piece: the frame axis is dynamic
        for piece in (audio, audio[:16000]):
            ours, theirs = onnx.embed(piece, 16000), reference.embed(piece, 16000)
            assert np.linalg.norm(theirs) == pytest.approx(1.0)
            # measured ≤ 4.2e-6 under torch's native, avx2 and default kernels; ONNX Runtime
            # picks its own kernels per CPU: the tolerance of any float32 network on any x86
            assert _relative(ours, theirs) <= FLOAT32_NETWORK_RTOL, (backend, len(piece))


@pytest.mark.corpus
@pytest.mark.parametrize("backend", list(GRAPHS))
def test_block_by_block_embedding_equals_whole_window(
    backend: str, graphs: Path, corpus_root: Path
) -> None:
    feature = CLASSES[backend](runtime="onnx")
    audio = _speech(corpus_root)[0][: 3 * 16000]
    whole = feature.observe(audio, 16000)
    for block in (480, 1000, 16000):  # 30 ms frames, odd blocks, one block of 1 s
        stream = feature.stream(16000)
        assert stream is not None
        for start in range(0, len(audio), block):
            stream.feed(audio[start : start + block])
        streamed = stream.finish()
        assert streamed.seconds == whole.seconds
        assert _relative(streamed.values, whole.values) <= 1e-5
    short = feature.stream(16000)
    assert short is not None
    short.feed(audio[:800])  # under 0.1 s: nothing to embed, as observe says
    assert np.all(short.finish().values == 0.0)


def test_torch_runtime_buffers_and_other_rates_buffer() -> None:
    assert EcapaEmbedding(runtime="torch").stream(16000) is None  # torch's Fbank is whole-window
    assert CampplusEmbedding(runtime="torch").stream(8000) is None
    stream = open_stream(EcapaEmbedding(runtime="torch"), 16000)
    assert type(stream).__name__ == "BufferedStream"


def test_runtime_selection(graphs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RUNTIME_ENV, "auto")
    monkeypatch.setenv("VOXMETER_CACHE", str(tmp_path / "cache"))
    set_embedding_backend("ecapa")
    # auto: whichever runtime took less CPU for a 3 s window here, measured once and cached
    chosen = EcapaEmbedding(runtime="auto").onnx
    probe = json.loads((tmp_path / "cache" / "runtime-probe.json").read_text())
    (record,) = [v for k, v in probe.items() if " | ecapa | " in k]
    assert record["onnx_ms"] > 0 and record["torch_ms"] > 0
    assert chosen == (record["onnx_ms"] <= record["torch_ms"])
    assert record["runtime"] == ("onnx" if chosen else "torch")
    record["runtime"] = "torch" if chosen else "onnx"  # a cached choice is read, not re-measured
    (tmp_path / "cache" / "runtime-probe.json").write_text(json.dumps(probe))
    assert EcapaEmbedding(runtime="auto").onnx is not chosen
    set_embedding_runtime("torch")
    assert not get_feature("embedding").onnx  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown embedding runtime 'tvm'"):
        set_embedding_runtime("tvm")
    monkeypatch.setenv("VOXMETER_MODELS", str(tmp_path / "empty"))  # no graph there
    assert not EcapaEmbedding(runtime="auto").onnx  # auto falls back to the torch reference
    with pytest.raises(ConfigError, match=r"ecapa_embedding_model\.onnx: ONNX graph missing"):
        EcapaEmbedding(runtime="onnx")


@pytest.mark.slow
@pytest.mark.parity
def test_the_campplus_export_has_the_same_bytes_on_every_mkl_path_and_matches_torch(
    tmp_path: Path,
) -> None:
    """MKL picks its code path from the CPU; torch's own Conv-BatchNormalization folding went
    through it, so these two paths (as an AVX2 CPU and an old or non-Intel one would take them)
    gave different CAM++ graphs. Exported in numpy, the bytes are the same, and the folded graph
    computes what the torch network computes."""
    checkpoint, name = GRAPHS["campplus"]
    if not (weights_dir() / checkpoint).is_file():
        pytest.skip(f"{weights_dir() / checkpoint} absent: run `make models`")
    digests = set()
    for isa in ("AVX2", "SSE4_2"):
        (tmp_path / isa).mkdir()
        (tmp_path / isa / checkpoint).symlink_to(weights_dir() / checkpoint)
        code = "from pathlib import Path; from monitor.features.embedding_onnx import export; "
        code += f"export('campplus', Path({str(tmp_path / isa)!r}))"
        env = {**os.environ, "MKL_ENABLE_INSTRUCTIONS": isa}
        subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
        digests.add(sha256(tmp_path / isa / name))
    assert len(digests) == 1
    import torch

    network = _torch_network("campplus", weights_dir() / checkpoint)
    onnx = OnnxNetwork(tmp_path / "AVX2" / name)
    windows = probe_windows("campplus-int8")  # (frames, 80) Kaldi filterbanks
    with torch.inference_mode():
        theirs = [network(torch.from_numpy(w)[None]).numpy()[0] for w in windows]
    assert_relatively_close([onnx(w) for w in windows], theirs, FLOAT32_NETWORK_RTOL)
