"""The shipped phone model: it loads, its shapes, its output on a fixed input (against the torch
network it was trained as, and against values recorded when it was trained), the phone feature
through the Feature protocol, the CAM++ stream's filterbanks shared, and the training script end
to end on a tiny split."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from monitor.features.base import (
    DEFAULT_PHONE,
    Feature,
    TemplateBatch,
    get_feature,
    open_stream,
    set_phone_backend,
)
from monitor.features.fbank import KaldiFbankStream, kaldi_fbank
from monitor.features.phone_model import (
    N_CLASSES,
    PAD,
    SHIPPED,
    PhoneModel,
    PhoneNetworkFeature,
    PhoneNetworkStream,
    shipped_model,
)

ROOT = Path(__file__).resolve().parents[2]
RECORDED_SUM = 25.066169
"""The shipped model's expected phone count of :func:`_fixed_fbank` (recorded at training)."""
RECORDED_FIRST = [0.33206189, 0.51388181, 1.03855356, 0.44776758, 0.33212441]
"""Its first five counts (AA, AE, AH, AO, AW)."""


def _fixed_fbank(frames: int = 300) -> np.ndarray:
    """A seeded stand-in for 3 s of mean-removed filterbanks."""
    feats = np.random.default_rng(7).normal(0.0, 3.0, (frames, 80)).astype(np.float32)
    return feats - feats.mean(axis=0, keepdims=True)


def test_shipped_model_is_small_package_data_and_loads() -> None:
    assert SHIPPED.is_file() and SHIPPED.stat().st_size <= 1_000_000
    assert "features/shipped/*.npz" in (ROOT / "pyproject.toml").read_text()
    model = shipped_model()
    assert model is shipped_model()  # loaded once a process
    assert model.mean_frames.shape == (N_CLASSES,) and np.all(model.mean_frames >= 1.0)


@pytest.mark.parametrize("frames", [0, 1, 14, 15, 301])
def test_posteriors_have_one_row_per_frame_summing_to_one(frames: int) -> None:
    posteriors = shipped_model().posteriors(_fixed_fbank(frames) if frames else np.zeros((0, 80)))
    assert posteriors.shape == (frames, N_CLASSES) and posteriors.dtype == np.float32
    assert np.allclose(posteriors.sum(axis=1), 1.0, rtol=1e-5)
    counts = shipped_model().counts(_fixed_fbank(frames) if frames else np.zeros((0, 80)))
    assert counts.shape == (N_CLASSES - 1,) and np.all(counts >= 0)


def test_output_on_a_fixed_input_is_deterministic_and_as_recorded() -> None:
    fbank = _fixed_fbank()
    first = PhoneModel().counts(fbank)
    assert np.array_equal(first, PhoneModel().counts(fbank))  # a fresh load, the same result
    # recorded when the shipped weights were trained (float rounding differs across CPUs)
    assert first.sum() == pytest.approx(RECORDED_SUM, rel=1e-4)
    assert np.allclose(first[:5], RECORDED_FIRST, rtol=1e-3, atol=1e-4 * first.max())


def test_numpy_forward_is_the_torch_network_it_was_trained_as(monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import train_phone_model as training

    net, model = training.build_network(), shipped_model()
    convs = [m for m in net if isinstance(m, torch.nn.Conv1d)]
    with torch.no_grad():
        for conv, (w, b) in zip(convs, model.layers, strict=True):
            out, width, kernel = conv.weight.shape
            conv.weight.copy_(torch.from_numpy(w.reshape(kernel, width, out).transpose(2, 1, 0)))
            conv.bias.copy_(torch.from_numpy(b))
        fbank = _fixed_fbank(120)
        padded = np.pad(fbank * model.scale, ((PAD, PAD), (0, 0)))
        logits = net(torch.from_numpy(padded.T[None].astype(np.float32)))[0].T
        expected = torch.softmax(logits, dim=1).numpy()
    assert np.allclose(model.posteriors(fbank), expected, rtol=1e-4, atol=1e-6)


def test_network_is_the_default_phone_backend_and_a_feature() -> None:
    assert DEFAULT_PHONE == "network"
    feature = get_feature("phone")
    assert isinstance(feature, PhoneNetworkFeature) and isinstance(feature, Feature)
    set_phone_backend("pocketsphinx")
    assert get_feature("phone").version.startswith("ps")
    with pytest.raises(ValueError, match="unknown phone backend 'hmm'"):
        set_phone_backend("hmm")


def test_feature_protocol_observe_pool_score_and_stream() -> None:
    feature = PhoneNetworkFeature()
    rng = np.random.default_rng(3)
    a, b = (rng.normal(0, 0.1, 24000).astype(np.float32) for _ in range(2))
    oa, ob = feature.observe(a, 16000), feature.observe(b, 16000)
    assert oa.values.shape == (39,) and oa.seconds == 1.5 and oa.values.sum() > 0
    assert np.allclose(oa.values, feature.counts_of(kaldi_fbank(a)))
    pooled = feature.pool([oa, ob])
    assert np.allclose(pooled.values, oa.values + ob.values) and pooled.seconds == 3.0
    scores = feature.similarity(oa, TemplateBatch.from_observations([oa, ob]))
    assert scores[0] == pytest.approx(0.0, abs=1e-12) and scores[1] < 0
    stream = open_stream(feature, 16000)
    assert isinstance(stream, PhoneNetworkStream)
    for start in range(0, a.shape[0], 1601):
        stream.feed(a[start : start + 1601])
    assert np.array_equal(stream.finish().values, oa.values)
    assert set(feature.describe(oa)["counts"]) >= {"AA", "ZH"}


def test_a_shared_filterbank_stream_gives_the_same_counts() -> None:
    feature = PhoneNetworkFeature()
    audio = np.random.default_rng(4).normal(0, 0.1, 20000).astype(np.float32)
    stream, shared = PhoneNetworkStream(feature), KaldiFbankStream()
    stream.share(shared)
    for start in range(0, audio.shape[0], 4000):
        shared.feed(audio[start : start + 4000])  # its owner feeds it
        stream.feed(audio[start : start + 4000])
    assert np.array_equal(shared.finish(), shared.finish())  # computed once, kept
    assert np.array_equal(stream.finish().values, feature.observe(audio, 16000).values)
    with pytest.raises(RuntimeError, match="before it is fed"):
        stream.share(KaldiFbankStream())


@pytest.mark.corpus
def test_training_script_runs_end_to_end_on_a_tiny_split(corpus_root: Path, tmp_path) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import train_phone_model as training
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    out, figures = tmp_path / "model.npz", tmp_path / "figures.json"
    training.main(
        [
            str(corpus_root),
            "--limit",
            "20",
            "--epochs",
            "1",
            "--out",
            str(out),
            "--figures",
            str(figures),
        ]
    )
    model = PhoneModel(out)
    assert model.posteriors(_fixed_fbank(50)).shape == (50, N_CLASSES)
    record = __import__("json").loads(figures.read_text())["figures"]
    assert len(record["held_out_speakers"]) == 1 and len(record["training_speakers"]) == 1
    assert set(record["held_out_speakers"]).isdisjoint(record["training_speakers"])
    assert 0.0 < record["held_out_frame_accuracy"] <= 1.0
