"""The turn splitter cuts a window where its filterbank frames change voice, and embeds parts
only where that score is uncertain (synthetic voices: harmonic tones an octave apart, with a
real spectral embedding; the real corpus in the tests marked ``corpus``)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from monitor.audio.file import read_audio
from monitor.audio.frames import RATE_HZ
from monitor.audio.vad import speech_only
from monitor.audio.windows import SpeechWindow
from monitor.features.change import cepstra, mean_shift_scores
from monitor.features.fbank import ecapa_db
from monitor.tracking.turns import (
    ChangeModel,
    TurnSplitter,
    WindowFrames,
    frames_of,
    load_change_models,
)


def voice(f0: float, seconds: float, rng: np.random.Generator) -> np.ndarray:
    """A harmonic tone with a little noise: a stand-in for one voice."""
    t = np.arange(round(seconds * RATE_HZ)) / RATE_HZ
    tone = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 6))
    return (0.2 * tone + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


class Spectrum:
    """Log power in 64 bands up to 4 kHz, mean-removed (close for the same tone); counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, samples: np.ndarray) -> np.ndarray:
        self.calls += 1
        power = np.abs(np.fft.rfft(samples, n=RATE_HZ)) ** 2
        bands = np.log(power[:4096].reshape(64, -1).sum(axis=1) + 1e-9)
        return bands - bands.mean()


def window(samples: np.ndarray, start: float = 10.0) -> SpeechWindow:
    seconds = samples.shape[0] / RATE_HZ
    return SpeechWindow(samples, start, start + seconds, seconds)


def model(low: float, high: float) -> dict[str, ChangeModel]:
    """Cepstra as they are (no discriminant): a tone's change moves them by tens of dB."""
    return {"ecapa": ChangeModel(cepstra=20, projection=np.eye(20), low=low, high=high)}


SURE = model(1e3, 1e3)  # every score decided without embedding (one tone: ~10², two: ~10⁵)
UNSURE = model(0.0, 1e9)  # every score sent to the embeddings


def test_one_voice_stays_whole_without_embedding(rng: np.random.Generator) -> None:
    embed = Spectrum()
    splitter = TurnSplitter(embed, change_cosine=0.5, models=SURE)
    w = window(voice(150.0, 3.0, rng))
    assert splitter.split(w) == [w]
    assert splitter.changes == 0 and embed.calls == 0 and splitter.scored == 1


@pytest.mark.parametrize("at", [1.0, 1.37, 2.2])
def test_a_change_is_cut_where_it_happens(rng: np.random.Generator, at: float) -> None:
    """Not only on a 1 s boundary: the score places the change to a frame or two."""
    embed = Spectrum()
    splitter = TurnSplitter(embed, change_cosine=0.5, models=SURE)
    w = window(np.concatenate([voice(150.0, at, rng), voice(310.0, 3.0 - at, rng)]))
    first, second = splitter.split(w)
    assert first.speech_seconds == pytest.approx(at, abs=0.03)
    assert (first.start_seconds, second.end_seconds) == (10.0, pytest.approx(13.0))
    assert first.end_seconds == pytest.approx(second.start_seconds)
    assert not first.mixed and not second.mixed and splitter.changes == 1
    assert np.array_equal(np.concatenate([first.samples, second.samples]), w.samples)
    assert embed.calls == 0


def test_an_uncertain_score_asks_the_parts_either_side(rng: np.random.Generator) -> None:
    embed = Spectrum()
    splitter = TurnSplitter(embed, change_cosine=0.5, models=UNSURE)
    w = window(np.concatenate([voice(150.0, 1.6, rng), voice(310.0, 1.4, rng)]))
    first, _ = splitter.split(w)
    assert first.speech_seconds == pytest.approx(1.6, abs=0.03)
    assert embed.calls == 2 and splitter.embedded == 2  # 1 s on each side of the change
    # the same window with a threshold no cosine falls below: the parts say one voice
    same = TurnSplitter(embed, change_cosine=-0.99, models=UNSURE)
    assert same.split(w) == [w] and same.embedded == 2


def test_a_piece_between_two_changes_is_marked_mixed(rng: np.random.Generator) -> None:
    splitter = TurnSplitter(Spectrum(), change_cosine=0.5, models=SURE)
    samples = np.concatenate(
        [voice(150.0, 1.5, rng), voice(310.0, 1.5, rng), voice(150.0, 1.5, rng)]
    )
    pieces = splitter.split(window(samples))
    assert [p.mixed for p in pieces] == [False, True, False]
    assert [p.speech_seconds for p in pieces] == pytest.approx([1.5, 1.5, 1.5], abs=0.03)


def test_frames_handed_over_are_the_ones_scored(rng: np.random.Generator) -> None:
    """The embedding stream's frames (ECAPA's dB before its floor and mean) give the cuts of
    frames computed from the samples; an unknown front end is an error, not a guess."""
    splitter = TurnSplitter(Spectrum(), change_cosine=0.5, models=SURE)
    samples = np.concatenate([voice(150.0, 1.4, rng), voice(310.0, 1.6, rng)])
    given = splitter.split(window(samples), WindowFrames(ecapa_db(samples), "ecapa"))
    assert [p.samples.shape for p in given] == [
        p.samples.shape for p in splitter.split(window(samples))
    ]
    np.testing.assert_array_equal(frames_of(samples).fbank, ecapa_db(samples))
    with pytest.raises(ValueError, match="no change model"):
        splitter.split(window(samples), WindowFrames(ecapa_db(samples), "mfcc"))


def test_too_short_to_score_and_bad_settings() -> None:
    embed = Spectrum()
    splitter = TurnSplitter(embed, change_cosine=0.5)
    short = window(np.zeros(2 * RATE_HZ - 1, dtype=np.float32))
    assert splitter.split(short) == [short] and splitter.scored == 0
    assert TurnSplitter(embed, change_cosine=-1.0).active is False
    with pytest.raises(ValueError, match="change_cosine"):
        TurnSplitter(embed, change_cosine=1.5)
    with pytest.raises(ValueError, match="band"):
        ChangeModel(cepstra=20, projection=np.eye(20), low=2.0, high=1.0)
    with pytest.raises(ValueError, match="projection"):
        ChangeModel(cepstra=30, projection=np.eye(20), low=1.0, high=2.0)
    shipped = load_change_models()
    assert set(shipped) == {"ecapa"}
    assert all(m.low < m.high and m.projection.shape == (m.cepstra, 12) for m in shipped.values())


# the real corpus: test-split speakers (the change models were fitted on the train split),
# ECAPA, the shipped change models and the shipped calibration's change cosine


@pytest.fixture(scope="module")
def utterances(corpus_root: Path, corpus_speakers: list[dict[str, str]]) -> list[list[np.ndarray]]:
    """Eight test-split speakers' VAD speech, utterance by utterance (longest first)."""
    speakers = [r["speaker"] for r in corpus_speakers if r["original_split"] == "test"][:8]
    out = []
    for speaker in speakers:
        paths = sorted((corpus_root / speaker).glob("*.flac"))[:6]
        speech = [speech_only(read_audio(p)[0], RATE_HZ).astype(np.float32) for p in paths]
        out.append(sorted(speech, key=len, reverse=True))
    return out


@pytest.fixture(scope="module")
def splitter() -> Iterator[TurnSplitter]:
    """ECAPA's splitter. The backend is chosen here, before the per-test fixture that restores
    the choice records it, so it is restored here: a session fixture enrolled later (the
    daemon corpus) would otherwise take ECAPA instead of the default backend."""
    from monitor.calibration.buckets import load_default
    from monitor.features.base import EMBEDDING_ENV, get_feature, set_embedding_backend
    from monitor.settings.config import load_config
    from monitor.tracking.thresholds import tracker_thresholds_for

    before = os.environ.get(EMBEDDING_ENV)
    set_embedding_backend("ecapa")
    thresholds = tracker_thresholds_for(load_config(None, []), load_default("ecapa"))
    assert thresholds is not None
    embedding = get_feature("embedding")
    yield TurnSplitter(
        lambda s: embedding.observe(s, RATE_HZ).values, change_cosine=thresholds.change
    )
    if before is None:
        os.environ.pop(EMBEDDING_ENV, None)
    else:
        os.environ[EMBEDDING_ENV] = before


@pytest.mark.corpus
def test_real_speech_two_speakers_cut_near_the_change_one_speaker_not(
    utterances: list[list[np.ndarray]], splitter: TurnSplitter
) -> None:
    """Two speakers joined without a pause (1.5 s each, from the middle of their longest
    utterances; seven children of 6–7 and a woman of 25, the second speaker): the best point
    of the score is the change (± 0.3 s) and where the voices differ enough the window is cut
    there; one speaker's own speech, utterances joined (as a turn is), in 3 s windows: left
    whole. (Two 6-year-olds' 1 s parts are often closer than the calibrated change cosine, so
    neither the score nor the parts' embeddings can tell them apart: not every pair is cut.)"""
    half = round(1.5 * RATE_HZ)
    model = splitter.models["ecapa"]
    placed, cut_pairs = 0, []
    for a, b in itertools.pairwise([*range(len(utterances)), 0]):
        first, second = utterances[a][0], utterances[b][0]
        middle_a, middle_b = first.shape[0] // 2, second.shape[0] // 2
        samples = np.concatenate([first[middle_a - half : middle_a],
                                  second[middle_b : middle_b + half]])  # fmt: skip
        projected = cepstra(frames_of(samples).fbank, model.cepstra) @ model.projection
        placed += abs(mean_shift_scores(projected).best()[0] * 160 - half) <= 0.3 * RATE_HZ
        pieces = splitter.split(window(samples))
        cuts = itertools.accumulate(p.samples.shape[0] for p in pieces[:-1])
        if any(abs(c - half) <= 0.3 * RATE_HZ for c in cuts):
            cut_pairs.append((a, b))
    assert placed >= len(utterances) - 1
    assert {(0, 1), (1, 2)} <= set(cut_pairs)  # the woman's voice against a boy's, both ways
    assert len(cut_pairs) >= 3
    cut = 0
    windows = 0
    for speech in utterances:
        joined = np.concatenate(speech)
        for start in range(0, joined.shape[0] - 3 * RATE_HZ + 1, 3 * RATE_HZ):
            windows += 1
            cut += len(splitter.split(window(joined[start : start + 3 * RATE_HZ]))) > 1
    assert windows >= 40 and cut <= 3  # of 46 (the splitter that embedded every part: 2)


@pytest.mark.corpus
def test_a_clean_one_speaker_window_costs_no_part_embedding(
    utterances: list[list[np.ndarray]],
) -> None:
    """3 s from inside one utterance (no join, no second voice): scored, nothing embedded."""
    embed = Spectrum()
    splitter = TurnSplitter(embed, change_cosine=0.5)
    clean = [u[0] for u in utterances if u[0].shape[0] >= 3 * RATE_HZ]
    assert len(clean) >= 5
    whole = 0
    for speech in clean:
        middle = speech.shape[0] // 2
        w = window(speech[middle - round(1.5 * RATE_HZ) : middle + round(1.5 * RATE_HZ)])
        whole += splitter.split(w) == [w]
    assert splitter.scored >= len(clean)
    assert embed.calls == splitter.embedded <= 2 * (len(clean) // 4)  # most cost nothing
    assert whole >= len(clean) - 1
