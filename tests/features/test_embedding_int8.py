"""The static int8 ECAPA and CAM++ (``ecapa-int8``, ``campplus-int8``): the committed ranges
hold no weights, the set-up build is deterministic, accepted by its probe embeddings whatever its
bytes and refused when it computes something else, stale graphs are refused, the backends have
versions of their own, and on corpus speech int8 stays within a stated cosine of float32."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.errors import ConfigError, InputError
from monitor.features.base import EMBEDDING_ENV, backend_of_version, embedding_class
from monitor.features.embedding import (
    CampplusEmbedding,
    CampplusInt8Embedding,
    EcapaEmbedding,
    EcapaInt8Embedding,
    UnitEmbedding,
)
from monitor.features.embedding_int8 import (
    INT8_GRAPHS,
    PROBE_F0_HZ,
    build,
    build_missing,
    check_build,
    load_ranges,
    ranges_text,
)
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


def _float_graph(backend: str, built: Path, folder: Path) -> None:
    float_name = GRAPHS[INT8_GRAPHS[backend][0]][1]
    (folder / float_name).symlink_to(built / float_name)


@pytest.fixture(scope="module")
def fresh(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where ``build_missing`` (what `make models` runs) built both int8 graphs
    from the float graphs and the committed ranges, each accepted by its probe."""
    folder = tmp_path_factory.mktemp("fresh")
    for backend in INT8_GRAPHS:
        _float_graph(backend, built, folder)
    assert sorted(build_missing(folder)) == sorted(name for _, name in INT8_GRAPHS.values())
    return folder


@pytest.mark.parametrize("backend", list(INT8_GRAPHS))
def test_the_build_is_deterministic_and_accepted_by_its_probe(
    backend: str, built: Path, fresh: Path, tmp_path: Path
) -> None:
    assert build_missing(fresh) == []  # current: not rebuilt
    _float_graph(backend, built, tmp_path)
    assert sha256(build(backend, tmp_path)) == sha256(graph_path(backend, fresh))
    names = [GRAPHS[INT8_GRAPHS[backend][0]][1], INT8_GRAPHS[backend][1]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)  # no scratch left


@pytest.fixture(scope="module")
def campplus_int8(fresh: Path) -> Path:
    """CAM++ int8 as `make models` builds it."""
    return graph_path("campplus-int8", fresh)


def _as_built(graph: Path) -> tuple[dict[str, Any], str]:
    """The committed CAM++ document recording ``graph``'s own sha256, and that sha256."""
    digest = sha256(graph)
    return {**load_ranges("campplus-int8"), "graph_sha256": digest}, digest


def test_identical_bytes_are_accepted_without_a_note(
    campplus_int8: Path, caplog: pytest.LogCaptureFixture
) -> None:
    document, digest = _as_built(campplus_int8)
    with caplog.at_level(logging.INFO, logger="monitor.features.embedding_int8"):
        check_build("campplus-int8", campplus_int8, document, digest)
    assert "differs" not in caplog.text


def test_other_bytes_computing_the_same_are_accepted_with_a_note(
    campplus_int8: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import onnx

    document, _ = _as_built(campplus_int8)
    model = onnx.load(campplus_int8)
    model.producer_name, model.doc_string = "re-saved", "other metadata, same network"
    initializers = list(model.graph.initializer)[::-1]  # another order of the same weights
    del model.graph.initializer[:]
    model.graph.initializer.extend(initializers)
    resaved = tmp_path / "resaved.onnx"
    onnx.save(model, resaved)
    assert sha256(resaved) != document["graph_sha256"]
    with caplog.at_level(logging.INFO, logger="monitor.features.embedding_int8"):
        check_build("campplus-int8", resaved, document, sha256(resaved))
    assert "differs from the recorded" in caplog.text


def test_a_graph_computing_something_else_is_refused_in_one_line(
    campplus_int8: Path, tmp_path: Path
) -> None:
    import onnx
    from onnx import numpy_helper

    document, _ = _as_built(campplus_int8)
    model = onnx.load(campplus_int8)
    weight = next(  # the first Conv's int8 weights
        i
        for i in model.graph.initializer
        if i.data_type == onnx.TensorProto.INT8 and len(i.dims) > 2
    )
    scaled = np.round(numpy_helper.to_array(weight) * 0.8).astype(np.int8)
    weight.CopyFrom(numpy_helper.from_array(scaled, weight.name))
    perturbed = tmp_path / "perturbed.onnx"
    onnx.save(model, perturbed)
    with pytest.raises(ConfigError) as refused:
        check_build("campplus-int8", perturbed, document, document["graph_sha256"])
    [line] = str(refused.value).splitlines()
    assert "cosine 0." in line and "relative L2 " in line and "make models" in line


def test_a_refused_build_leaves_nothing(built: Path, tmp_path: Path) -> None:
    document = json.loads(ranges_text("campplus-int8"))
    document["probe"]["embeddings"] = [row[::-1] for row in document["probe"]["embeddings"]]
    ranges = tmp_path / "ranges.json"
    ranges.write_text(json.dumps(document))
    folder = tmp_path / "weights"
    folder.mkdir()
    _float_graph("campplus-int8", built, folder)
    with pytest.raises(ConfigError, match="probe embeddings differ"):
        build("campplus-int8", folder, ranges)
    assert [p.name for p in folder.iterdir()] == [GRAPHS["campplus"][1]]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "not a readable JSON ranges file"),
        ('{"tensors": {"a": [0, 1]}}', "no 'probe' embeddings"),
        ('{"tensors": {"a": [0, 1]}, "probe": {"embeddings": [[1, 2]]}}', "got shape (1, 2)"),
        ('{"tensors": {"a": [0]}, "probe": {"embeddings": []}}', "[min, max]"),
    ],
)
def test_a_bad_ranges_file_is_one_line_naming_it_and_nothing_is_built(
    text: str, problem: str, tmp_path: Path
) -> None:
    ranges = tmp_path / "ranges.json"
    ranges.write_text(text)
    with pytest.raises(InputError) as refused:
        build("campplus-int8", tmp_path, ranges)
    [line] = str(refused.value).splitlines()
    assert str(ranges) in line and problem in line
    assert [p.name for p in tmp_path.iterdir()] == ["ranges.json"]


@pytest.mark.parametrize("backend", list(INT8_GRAPHS))
def test_the_committed_probe_is_one_embedding_per_window(backend: str) -> None:
    embeddings = load_ranges(backend)["probe"]["embeddings"]
    assert embeddings.shape == (len(PROBE_F0_HZ), 192)
    assert np.all(np.linalg.norm(embeddings, axis=1) > 1)  # the network's raw vectors


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
