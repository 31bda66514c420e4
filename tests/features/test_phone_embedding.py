"""The two model-backed extractors on edge cases and on real speech at other rates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soxr

from monitor.audio.file import read_audio
from monitor.features import phone
from monitor.features.embedding import GE2EEmbedding
from monitor.features.phone import CMU_PHONES, PhoneFeature


def test_cmu_phone_set_has_39_phones_and_no_fillers() -> None:
    assert len(CMU_PHONES) == len(set(CMU_PHONES)) == 39
    assert "SIL" not in CMU_PHONES and not any(p.startswith("+") for p in CMU_PHONES)


def test_no_audio_means_no_phones_and_no_embedding() -> None:
    silent = np.zeros(0, dtype=np.float32)
    assert PhoneFeature().observe(silent, 16000).values.sum() == 0
    short = GE2EEmbedding().observe(np.zeros(800, dtype=np.float32), 16000)  # 50 ms
    assert np.all(short.values == 0) and short.seconds == pytest.approx(0.05)


@pytest.mark.parametrize("samples", [1, 2, 100, 161])
def test_audio_shorter_than_a_decoder_frame_gives_no_phones(samples: int) -> None:
    # pocketsphinx has no hypothesis at all here (seg() is None); a one-sample file once
    # crashed `voxmeter features` with a TypeError.
    audio = np.random.default_rng(samples).normal(0.0, 0.1, samples).astype(np.float32)
    assert PhoneFeature().observe(audio, 16000).values.sum() == 0


@pytest.mark.corpus
def test_phones_decode_from_real_speech_at_any_rate(corpus_root: Path) -> None:
    audio, _ = read_audio(sorted((corpus_root / "0120").glob("*.flac"))[0])
    assert phone._decoder() is phone._decoder()  # one decoder per process
    sequence = phone.decode_phones(audio, 16000)
    assert len(sequence) >= 5 and set(sequence) <= set(CMU_PHONES)
    counts = PhoneFeature().observe(audio, 16000).values
    assert counts.sum() == len(sequence)
    at_8k = PhoneFeature().observe(soxr.resample(audio, 16000, 8000), 8000)
    assert at_8k.values.sum() > 0 and at_8k.seconds == pytest.approx(len(audio) / 16000, 1e-3)


@pytest.mark.corpus
def test_phones_of_a_file_do_not_depend_on_what_was_decoded_before(corpus_root: Path) -> None:
    # pocketsphinx's front end carried state across utterances: the same file decoded after
    # different files gave different phones, so calibration depended on extraction order.
    files = sorted(corpus_root.glob("00[0-2]*/*.flac"))[:12]
    audios = [read_audio(path)[0] for path in files]
    forward = [phone.phone_counts(a, 16000) for a in audios]
    backward = [phone.phone_counts(a, 16000) for a in reversed(audios)][::-1]
    assert all(np.array_equal(f, b) for f, b in zip(forward, backward, strict=True))


@pytest.mark.corpus
def test_embedding_is_a_unit_vector_and_robust_to_the_input_rate(corpus_root: Path) -> None:
    audio, _ = read_audio(sorted((corpus_root / "0120").glob("*.flac"))[1])
    feature = GE2EEmbedding()
    wide = feature.observe(audio, 16000)
    assert wide.values.shape == (256,)
    assert np.linalg.norm(wide.values) == pytest.approx(1.0)
    resampled = feature.observe(soxr.resample(audio, 16000, 22050), 22050)
    assert float(wide.values @ resampled.values) > 0.95
