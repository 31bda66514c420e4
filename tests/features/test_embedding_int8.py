"""The static int8 ECAPA and CAM++ (``ecapa-int8``, ``campplus-int8``): the committed ranges
hold no weights, the set-up build is deterministic and refuses stale graphs, the backends have
versions of their own, and on corpus speech int8 stays within a stated cosine of float32."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from monitor.errors import ConfigError
from monitor.features.base import EMBEDDING_ENV, backend_of_version, embedding_class
from monitor.features.embedding import (
    CampplusEmbedding,
    CampplusInt8Embedding,
    EcapaEmbedding,
    EcapaInt8Embedding,
    UnitEmbedding,
)
from monitor.features.embedding_int8 import INT8_GRAPHS, build, build_missing, ranges_text
from monitor.features.embedding_onnx import GRAPHS, graph_path
from monitor.features.weights import sha256, weights_dir

COSINE = {"ecapa-int8": (0.985, 0.96), "campplus-int8": (0.96, 0.90)}
"""(mean, min) cosine of int8 to the float32 torch reference that the corpus test must reach.
Measured on its 40 pieces (AMD EPYC, VNNI): ECAPA mean 0.992, min 0.983; CAM++ mean 0.977,
min 0.937 (a 1 s piece; whole utterances: 0.979 / 0.959). Over all 1,250 test-split utterances
(whole, against ONNX float32): ECAPA mean 0.994, min 0.969; CAM++ mean 0.981, min 0.907 —
``bench/results/edge-int8-shipped.json``. A graph quantised wrongly (a missing or stale range,
8-bit saturation) falls far below."""
FLOAT: dict[str, type[UnitEmbedding]] = {
    "ecapa-int8": EcapaEmbedding,
    "campplus-int8": CampplusEmbedding,
}
INT8: dict[str, type[UnitEmbedding]] = {
    "ecapa-int8": EcapaInt8Embedding,
    "campplus-int8": CampplusInt8Embedding,
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A weights folder holding the float and int8 graphs (after ``make models``), else skip."""
    folder = weights_dir()
    for backend in INT8_GRAPHS:
        if not graph_path(backend, folder).is_file():
            pytest.skip(f"{graph_path(backend, folder)} absent: run `make models`")
    yield folder


@pytest.fixture(autouse=True)
def restore_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EMBEDDING_ENV, raising=False)


@pytest.mark.parametrize("backend", list(INT8_GRAPHS))
def test_the_committed_ranges_are_a_few_kb_of_min_max_pairs(backend: str) -> None:
    text = ranges_text(backend)
    document = json.loads(text)
    assert len(text.encode()) < 48_000  # ECAPA ~7 KB, CAM++ ~35 KB (448 tensors): no weights
    pairs = np.array(list(document["tensors"].values()), dtype=np.float64)
    assert pairs.shape == (len(document["tensors"]), 2)
    assert np.all(pairs[:, 0] <= pairs[:, 1]) and np.all(np.isfinite(pairs))
    assert document["reduce_range"] is True and document["op_types"] == ["Conv"]


def test_int8_backends_have_versions_of_their_own() -> None:
    for backend, (float_backend, _) in INT8_GRAPHS.items():
        version = embedding_class(backend).version
        assert version != embedding_class(float_backend).version
        assert backend_of_version(version) == backend  # a database names the right backend


@pytest.mark.parametrize("backend", list(INT8_GRAPHS))
def test_the_build_is_deterministic_and_matches_make_models(
    backend: str, built: Path, tmp_path: Path
) -> None:
    float_name = GRAPHS[INT8_GRAPHS[backend][0]][1]
    (tmp_path / float_name).symlink_to(built / float_name)
    first = sha256(build(backend, tmp_path))
    assert build_missing(tmp_path) == []  # current: not rebuilt
    (tmp_path / INT8_GRAPHS[backend][1]).unlink()
    assert build_missing(tmp_path) == [INT8_GRAPHS[backend][1]]
    assert sha256(tmp_path / INT8_GRAPHS[backend][1]) == first
    assert sha256(graph_path(backend, built)) == first  # what `make models` built


def test_int8_needs_onnx_runtime_and_its_graph(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert EcapaInt8Embedding(runtime="auto").onnx  # no probe: int8 runs only on ONNX Runtime
    with pytest.raises(ConfigError, match=r'features\.embedding = "ecapa" for torch'):
        EcapaInt8Embedding(runtime="torch")
    monkeypatch.setenv("VOXMETER_MODELS", str(tmp_path))
    with pytest.raises(ConfigError, match=r"int8 graph missing; run `make models`"):
        EcapaInt8Embedding(runtime="auto")


def test_a_graph_built_from_other_ranges_is_refused(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnx

    model = onnx.load(graph_path("ecapa-int8", built))
    for prop in model.metadata_props:
        prop.value = "0" * 64  # as if built from an older ranges file
    (tmp_path / INT8_GRAPHS["ecapa-int8"][1]).write_bytes(model.SerializeToString())
    monkeypatch.setenv("VOXMETER_MODELS", str(tmp_path))
    feature = EcapaInt8Embedding(runtime="onnx")
    with pytest.raises(ConfigError, match="other activation ranges"):
        feature.warm_up()


@pytest.mark.corpus
@pytest.mark.parity
@pytest.mark.parametrize("backend", list(INT8_GRAPHS))
def test_int8_stays_within_its_cosine_of_float_on_corpus_speech(
    backend: str, built: Path, corpus_root: Path
) -> None:
    """20 test-split utterances (2 of each of 10 speakers), their speech (the VAD's, as the
    daemon embeds it) whole and its first second.

    The float32 reference is the torch port, whose kernels ``ATEN_CPU_CAPABILITY`` selects
    (`make test` reruns the parity tests under default and avx2): so this holds int8 against
    float computed by each of torch's kernel sets. ONNX Runtime does not read that variable —
    it picks its int8 kernels from the CPU itself (VNNI where present, else AVX2's
    ``vpmaddubsw``); the 7-bit weights of the shipped graphs are what keeps AVX2 from
    saturating, which a VNNI CPU cannot show."""
    from monitor.audio.file import read_audio
    from monitor.audio.vad import speech_only
    from monitor.corpus import scan_corpus

    test = scan_corpus(corpus_root, split="test")
    files = [u.path for s in list(test.speakers)[::12][:10] for u in test.utterances_of(s)[:2]]
    int8, reference = INT8[backend](runtime="onnx"), FLOAT[backend](runtime="torch")
    cosines = []
    for path in files:
        audio = speech_only(read_audio(path)[0], 16000)
        for piece in (audio, audio[:16000]):
            cosines.append(float(int8.embed(piece, 16000) @ reference.embed(piece, 16000)))
    mean, least = COSINE[backend]
    assert np.mean(cosines) >= mean and np.min(cosines) >= least, (
        f"{backend}: cosine to float32 mean {np.mean(cosines):.4f} min {np.min(cosines):.4f}"
    )
